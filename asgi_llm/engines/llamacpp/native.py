"""A model and its batched context, built from a `ModelConfig`, and the decode calls the
scheduler needs. Called on the inference thread only.

Everything is opened with llama-cpp-python's `verbose=True`: its quiet mode points the whole
process's stdout and stderr at /dev/null while a model loads, which swallows whatever the host
prints meanwhile (uvicorn's startup lines). llama.cpp's own log lines go to the logger
`asgi_llm.llama_cpp` instead (mostly at DEBUG), where the host's logging decides what shows.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals

from ...config import ModelConfig
from ...core.errors import InternalError
from .jobs import BatchToken
from .picks import top_rows
from .threads import GovernedThreads

__all__ = [
    "SPLIT_MODES",
    "Decoder",
    "Model",
    "backend_info",
    "llama_log_lines",
    "new_context",
    "new_single_context",
    "quiet_llama_logs",
    "route_llama_logs",
    "route_mtmd_logs",
]

internals: Any = _internals  # untyped
SPLIT_MODES = {"none": 0, "layer": 1, "row": 2}
_GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
_ALL_LAYERS = 0x7FFFFFFF
_LLAMA_LOG = logging.getLogger("asgi_llm.llama_cpp")
_LOG_LEVELS = {4: logging.WARNING, 3: logging.INFO}
"""ggml_log_level (ggml.h: 1 debug, 2 info, 3 warn, 4 error, 5 continuation) → logging level,
one step down: a failure reaches the host as our own error (a load that fails, a request
refused), and llama.cpp's warnings are mostly about choices we make on purpose (a context
shorter than trained). Debug, info and continuation lines are DEBUG."""


_CAPTURE = threading.local()  # `lines`: where this thread's llama.cpp log lines also go, while set;
# `quiet`: while set, its lines are DEBUG whatever their level


def _log_to_logging(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    line = text.decode("utf-8", "replace").rstrip()
    if line:
        quiet = getattr(_CAPTURE, "quiet", False)
        _LLAMA_LOG.log(logging.DEBUG if quiet else _LOG_LEVELS.get(level, logging.DEBUG), "%s", line)
        if (lines := getattr(_CAPTURE, "lines", None)) is not None:
            lines.append(line)


@contextlib.contextmanager
def llama_log_lines() -> Iterator[list[str]]:
    """The lines llama.cpp logs on this thread meanwhile (a load logs the buffers it allocates;
    another pool's thread may be loading at the same time)."""
    lines: list[str] = []
    _CAPTURE.lines = lines
    try:
        yield lines
    finally:
        _CAPTURE.lines = None


@contextlib.contextmanager
def quiet_llama_logs() -> Iterator[None]:
    """This thread's llama.cpp log lines are DEBUG meanwhile: for calls whose failure is a
    client's (an image that does not decode), which the client is told of, not the operator."""
    _CAPTURE.quiet = True
    try:
        yield
    finally:
        _CAPTURE.quiet = False


_LOG_CALLBACK: Any = llama_cpp.llama_log_callback(_log_to_logging)  # must live as long as the process


def route_llama_logs() -> None:
    """llama.cpp logs through one process-wide hook, which importing llama_cpp points at
    stderr; point it at our logger instead. Idempotent."""
    llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


def route_mtmd_logs() -> None:
    """The multimodal library (a projector's, projector.py) logs through hooks of its own, which
    point at stderr: the same route. Idempotent."""
    from llama_cpp import mtmd_cpp  # loads libmtmd: only where a model has a projector

    mtmd_cpp.mtmd_helper_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


_FLASH_ATTN = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    True: llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    False: llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


def backend_info() -> dict[str, Any]:
    """What this llama.cpp build can do, for health output and logs."""
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "mmap": bool(llama_cpp.llama_supports_mmap()),
        "mlock": bool(llama_cpp.llama_supports_mlock()),
    }


class Model:
    """The weights and vocabulary: tokenizing and token pieces need no context."""

    def __init__(self, config: ModelConfig, progress: Callable[[float], None] | None = None) -> None:
        route_llama_logs()
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = _ALL_LAYERS if config.n_gpu_layers == -1 else config.n_gpu_layers
        params.split_mode = SPLIT_MODES[config.split_mode]
        params.main_gpu = config.main_gpu
        if config.tensor_split:
            self._tensor_split = (ctypes.c_float * llama_cpp.LLAMA_MAX_DEVICES)(*config.tensor_split)
            params.tensor_split = self._tensor_split  # the array must outlive the load
        if config.use_mmap and config.use_mlock:
            params.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
        elif config.use_mlock:
            params.load_mode = llama_cpp.LLAMA_LOAD_MODE_MLOCK
        elif config.use_mmap:
            params.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP
        else:
            params.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
        if progress is not None:

            def report(fraction: float, _: Any) -> bool:
                progress(float(fraction))
                return True  # go on loading

            self._progress = llama_cpp.llama_progress_callback(report)  # must outlive the load
            params.progress_callback = self._progress
        self.native: Any = internals.LlamaModel(path_model=config.resolved_path(), params=params, verbose=True)
        self.vocab = self.native.vocab
        self.n_vocab = int(self.native.n_vocab())
        self.metadata: dict[str, str] = self.native.metadata()
        self.bos = int(self.native.token_bos())
        self.eos = int(self.native.token_eos())
        self.adds_bos = bool(self.native.add_bos_token())
        self._piece_buffer = ctypes.create_string_buffer(64)
        self.longest_piece = self._longest_piece()

    def _longest_piece(self) -> int | None:
        """The most bytes of text one token stands for (control tokens as written), for bounding a
        prompt's tokens by its length; None for vocabularies whose tokenizers drop or fold text
        (WordPiece drops spaces, Unigram normalizes), where no such bound holds."""
        spelled_back = (llama_cpp.LLAMA_VOCAB_TYPE_SPM, llama_cpp.LLAMA_VOCAB_TYPE_BPE)
        if llama_cpp.llama_vocab_type(self.vocab) not in spelled_back:
            return None
        buffer = ctypes.create_string_buffer(1024)
        longest = 1
        for token in range(self.n_vocab):
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, True)
            longest = max(longest, abs(n))  # negative: longer than the buffer, by that much
        return longest

    def close(self) -> None:
        self.native.close()

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        return [int(t) for t in self.native.tokenize(text.encode("utf-8"), add_bos and self.adds_bos, special)]

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return bytes(self.native.detokenize(list(tokens), special)).decode("utf-8", "replace")

    def token_text(self, token: int) -> str:
        return str(self.native.token_get_text(token))

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """The exact bytes of one token (a piece may be part of a UTF-8 character); with
        `special`, a control token is written out (`<|im_start|>`) rather than empty."""
        size = len(self._piece_buffer)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, self._piece_buffer, size, 0, special)
        if n < 0:
            self._piece_buffer = ctypes.create_string_buffer(-n)
            return self.piece(token, special=special)
        return self._piece_buffer.raw[:n]

    def is_end(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def n_params(self) -> int:
        return int(self.native.n_params())


def new_context(model: Model, config: ModelConfig, *, sequences: int) -> Any:
    """A context of `sequences` sequences with `n_ctx` positions each, in separate KV streams
    (a sequence attends to its own cells only, which keeps batched decoding fast), or with
    `kv_unified` in one buffer they share (copies between sequences then share cells)."""
    params = llama_cpp.llama_context_default_params()
    per_sequence = config.n_ctx or int(model.native.n_ctx_train())
    params.n_ctx = per_sequence * sequences
    params.n_seq_max = sequences
    params.kv_unified = config.kv_unified
    params.n_batch = max(config.n_batch, sequences)
    params.n_ubatch = min(config.n_ubatch, params.n_batch)
    params.n_threads = config.threads
    params.n_threads_batch = config.n_threads_batch or config.threads
    params.offload_kqv = config.offload_kqv
    params.flash_attn_type = _FLASH_ATTN[config.flash_attn]
    if config.type_k:
        params.type_k = _GGML_TYPES[config.type_k]
    if config.type_v:
        params.type_v = _GGML_TYPES[config.type_v]
    params.no_perf = True
    return internals.LlamaContext(model=model.native, params=params, verbose=True)


def new_single_context(model: Model, config: ModelConfig, *, size: int, batch: int, pooling: int | None = None) -> Any:
    """A one-sequence context of `size` positions beside the batched one, decoding `batch`
    tokens at a time: for embeddings (pooled outputs, with `pooling`) or for reading a prompt's
    own logprobs."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = size
    params.n_batch = params.n_ubatch = batch
    params.n_seq_max = 1
    if pooling is not None:
        params.embeddings = True
        params.pooling_type = pooling
    params.n_threads = config.threads
    params.n_threads_batch = config.n_threads_batch or config.threads
    params.offload_kqv = config.offload_kqv
    params.no_perf = True
    return internals.LlamaContext(model=model.native, params=params, verbose=True)


def _bytes(array: Any) -> Any:
    return array.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))


def _address(pointer: Any) -> int:
    return int(ctypes.cast(pointer, ctypes.c_void_p).value or 0)


class Decoder:
    """The scheduler's `Backend` over one context: batched decodes and per-sequence cache edits,
    saves and restores."""

    def __init__(self, context: Any, threads: GovernedThreads | None = None) -> None:
        self.context = context
        self.threads = threads
        self._ctx = context.ctx
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self.capacity = int(context.params.n_batch)  # the most tokens one decode takes
        self._batch: Any = llama_cpp.llama_batch_init(self.capacity, 0, 1)
        self._wants = np.ctypeslib.as_array(self._batch.logits, shape=(self.capacity,))  # its logits flags
        self._n_vocab = int(context.model.n_vocab())

    @property
    def per_sequence(self) -> int:
        """Positions a sequence may hold: its stream's, or with a unified KV cache its share of
        the one buffer (where llama_n_ctx_seq says the whole buffer)."""
        return int(llama_cpp.llama_n_ctx(self._ctx)) // int(llama_cpp.llama_n_seq_max(self._ctx))

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        self.context.close()

    def decode(self, batch: Sequence[BatchToken]) -> None:
        native = self._batch
        assert len(batch) <= self.capacity
        token, pos, n_seq_id, seq_id, logits = native.token, native.pos, native.n_seq_id, native.seq_id, native.logits
        for i, entry in enumerate(batch):
            token[i] = entry.token
            pos[i] = entry.position
            n_seq_id[i] = 1
            seq_id[i][0] = entry.sequence
            logits[i] = entry.logits
        native.n_tokens = len(batch)
        threads = self.threads
        if threads is None:
            status = llama_cpp.llama_decode(self._ctx, native)
        else:
            threads.check()
            started = time.perf_counter()
            status = llama_cpp.llama_decode(self._ctx, native)
            threads.decoded(time.perf_counter() - started)
        if status != 0:
            raise InternalError(f"llama_decode returned {status}")

    def forget(self, sequence: int, start: int) -> None:
        llama_cpp.llama_memory_seq_rm(self._memory, sequence, start, -1)

    def copy(self, source: int, target: int) -> None:
        llama_cpp.llama_memory_seq_rm(self._memory, target, -1, -1)
        llama_cpp.llama_memory_seq_cp(self._memory, source, target, -1, -1)

    def save(self, sequence: int, limit: int) -> tuple[Any, int] | None:
        size = int(llama_cpp.llama_state_seq_get_size(self._ctx, sequence))
        if not size or size > limit:
            return None
        state = np.empty(size, dtype=np.uint8)  # not zeroed: filling a ctypes array costs more than the copy
        written = int(llama_cpp.llama_state_seq_get_data(self._ctx, _bytes(state), size, sequence))
        return (state[:written], written) if written else None

    def restore(self, sequence: int, state: Any) -> bool:
        read = llama_cpp.llama_state_seq_set_data(self._ctx, _bytes(state), state.nbytes, sequence)
        if not read:
            self.forget(sequence, 0)
        return bool(read)

    def logits(self, row: int) -> Any:
        """The logits of batch row `row` of the last decode (a ctypes float pointer)."""
        return llama_cpp.llama_get_logits_ith(self._ctx, row)

    def top(self, rows: Sequence[int]) -> list[int]:
        """The top token (the first of equal highs) of each batch row in `rows` of the last
        decode, in one argmax over their logits: llama.cpp keeps a decode's logits as contiguous
        rows of `n_vocab` floats, one per batch row that asked for them, in batch order. A single
        row, or rows whose first or last llama.cpp says is elsewhere, are read where it says."""
        if len(rows) > 1:
            counted = np.cumsum(self._wants[: self._batch.n_tokens], dtype=np.intp)  # batch row -> logits row + 1
            first, last = min(rows), max(rows)
            start = _address(llama_cpp.llama_get_logits(self._ctx))
            row_bytes = self._n_vocab * ctypes.sizeof(ctypes.c_float)
            if all(_address(self.logits(row)) == start + (int(counted[row]) - 1) * row_bytes for row in (first, last)):
                logits = llama_cpp.llama_get_logits(self._ctx)
                return top_rows(
                    np.ctypeslib.as_array(logits, shape=(int(counted[last]), self._n_vocab)), counted[rows] - 1
                )
        return [int(np.ctypeslib.as_array(self.logits(row), shape=(self._n_vocab,)).argmax()) for row in rows]

    def clear(self) -> None:
        """Forget every sequence's cells."""
        llama_cpp.llama_memory_clear(self._memory, True)

    def warm_up(self, token: int) -> None:
        self.decode([BatchToken(token, 0, 0, True)])
        self.clear()
