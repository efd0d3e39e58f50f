"""GGUF models in-process through llama-cpp-python. The only module that imports `llama_cpp`.

Every call into llama.cpp runs on the pool's inference thread (`InferenceThread`).
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import json
import logging
import math
import random
import weakref
from collections.abc import AsyncGenerator, Generator, Sequence
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals
from llama_cpp.llama_grammar import json_schema_to_gbnf

from ..config import ModelConfig
from ..core.errors import ContextOverflow, InternalError, InvalidRequest, ModelNotReady, Overloaded, Unsupported
from ..core.events import (
    Embedding,
    EmbeddingResult,
    Finish,
    FinishReason,
    GenerationEvent,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from ..core.requests import ChatRequest, EmbeddingRequest, GenerationRequest, SamplingParams
from .chat_template import CHATML, ChatTemplate
from .constraints import LazyCalls, constraint_for, offers_tools
from .grammar import Schema, harden
from .inference_thread import InferenceThread
from .reasoning import ReasoningSplitter
from .stops import StopMatcher
from .tool_calls import with_tools_note
from .tool_detect import MARKERS, CallDetector, trigger_grammar

__all__ = ["LlamaCppEngine", "backend_info"]

log = logging.getLogger("asgi_llm.engine")

_SPLIT_MODES = {"none": 0, "layer": 1, "row": 2}
_POOLING = {"mean": 1, "cls": 2, "last": 3}
_GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
_PENALTY_WINDOW = 64
_THINK = ("<think>", "</think>")  # the reasoning block's markers, for models whose template or vocabulary has them
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data
internals: Any = _internals  # untyped; only its sampler chain is used


def _gbnf(schema: Schema, param: str) -> str:
    """llama.cpp's own JSON-schema converter, on a schema `grammar.enforceable` has rewritten."""
    try:
        return harden(json_schema_to_gbnf(json.dumps(schema)))
    except Exception:  # it asserts on what it cannot express; `enforceable` should have said so first
        log.warning("the grammar converter failed on a checked schema for %s", param, exc_info=True)
        raise Unsupported(f"The schema in '{param}' cannot be enforced while decoding.", param=param) from None


def backend_info() -> dict[str, Any]:
    """What this llama.cpp build can do, for health output and logs."""
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "mmap": bool(llama_cpp.llama_supports_mmap()),
        "mlock": bool(llama_cpp.llama_supports_mlock()),
    }


class LlamaCppEngine:
    """One GGUF model. Generations on it run one at a time, in arrival order."""

    def __init__(self, config: ModelConfig, thread: InferenceThread) -> None:
        self.config = config
        self._thread = thread
        self._llm: Any = None
        self._embedder: Any = None
        self._template: ChatTemplate | None = None
        self._template_has_tools = False  # whether the chat template renders the tools it is given
        self._pending = 0
        self.decoded_tokens = 0  # tokens sampled since load; read by metrics and tests
        self._piece_buffer = ctypes.create_string_buffer(64)
        self._candidates: Any = None  # every token's logit, for samplers run by hand (on the inference thread only)
        self._marker_tokens: dict[int, bytes] = {}  # tool-call markers that are control tokens, by id
        self._template_thinks = False  # whether the chat template mentions the reasoning block's markers
        self._thinks = False  # whether outputs are split into reasoning and answer
        self._think_tokens: dict[int, bytes] = {}  # reasoning markers that are control tokens, by id

    @property
    def supports_embeddings(self) -> bool:
        return self.config.embeddings

    @property
    def context_length(self) -> int:
        return int(self._llm.n_ctx()) if self._llm is not None else self.config.n_ctx

    @property
    def waiting(self) -> int:
        """Generations queued behind the running one (read by metrics)."""
        return max(self._pending - 1, 0)

    def describe(self) -> dict[str, Any]:
        if self._llm is None:
            return {}
        return {
            **backend_info(),
            "n_ctx": self.context_length,
            "n_gpu_layers": self.config.n_gpu_layers,
            "n_threads": self.config.threads,
            "n_params": int(self._llm._model.n_params()),
        }

    async def load(self) -> None:
        await self._thread.call(self._load)

    async def close(self) -> None:
        await self._thread.call(self._close)

    def generate(self, request: GenerationRequest) -> AsyncGenerator[GenerationEvent, None]:
        return self._generate(request)

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        if self._llm is None:
            raise ModelNotReady("The model is not loaded yet.")
        return await self._thread.call(lambda: self._embed(request))

    async def count_tokens(self, request: GenerationRequest) -> int:
        if self._llm is None:
            raise ModelNotReady("The model is not loaded yet.")
        return await self._thread.call(lambda: sum(len(tokens) for tokens, _ in self._prompts(request)))

    async def _generate(self, request: GenerationRequest) -> AsyncGenerator[GenerationEvent, None]:
        if self._llm is None:
            raise ModelNotReady("The model is not loaded yet.")
        if self._pending > self.config.max_queue:
            raise Overloaded("Too many requests are waiting for this model; retry shortly.")
        self._pending += 1
        try:
            stream: AsyncGenerator[GenerationEvent, None] = self._thread.stream(self, lambda: self._generation(request))
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    yield event
        finally:
            self._pending -= 1

    # -- on the inference thread -------------------------------------------------

    def _load(self) -> None:
        cfg = self.config
        self._llm = llama_cpp.Llama(model_path=cfg.resolved_path(), **self._load_options())
        self._template = self._chat_template()
        self._marker_tokens = self._control_markers()
        self._thinks, self._think_tokens = self._reasoning_markers()
        self._llm.eval([self._llm.token_bos()])  # warm-up: first request pays no allocation
        self._llm.reset()
        log.info("loaded %s: %s", cfg.id, self.describe())
        if cfg.n_gpu_layers and not llama_cpp.llama_supports_gpu_offload():
            log.warning("n_gpu_layers=%s asked for, but this llama-cpp-python build has no GPU offload", cfg.n_gpu_layers)

    def _load_options(self, *, embedding: bool = False) -> dict[str, Any]:
        cfg = self.config
        options: dict[str, Any] = {
            "n_ctx": cfg.n_ctx,
            "n_batch": cfg.n_batch,
            "n_ubatch": cfg.n_ubatch,
            "n_threads": cfg.threads,
            "n_threads_batch": cfg.n_threads_batch or cfg.threads,
            "n_gpu_layers": cfg.n_gpu_layers,
            "main_gpu": cfg.main_gpu,
            "split_mode": _SPLIT_MODES[cfg.split_mode],
            "tensor_split": list(cfg.tensor_split) if cfg.tensor_split else None,
            "flash_attn": cfg.flash_attn,
            "offload_kqv": cfg.offload_kqv,
            "use_mmap": cfg.use_mmap,
            "use_mlock": cfg.use_mlock,
            "verbose": False,
        }
        if cfg.seed is not None:
            options["seed"] = cfg.seed
        if cfg.type_k:
            options["type_k"] = _GGML_TYPES[cfg.type_k]
        if cfg.type_v:
            options["type_v"] = _GGML_TYPES[cfg.type_v]
        if embedding:
            size = min(self.context_length, 2048)
            options.update(
                embedding=True, n_ctx=size, n_batch=size, n_ubatch=size, pooling_type=_POOLING[cfg.pooling]
            )
        return options

    def _control_markers(self) -> dict[int, bytes]:
        """Tool-call markers this vocabulary has as single control tokens (Llama 3's `<|python_tag|>`,
        Mistral's `[TOOL_CALLS]`): their pieces are empty in plain text, so calls watch for their ids."""
        found = {}
        for marker in MARKERS:
            ids = list(self._llm.tokenize(marker.encode("utf-8"), add_bos=False, special=True))
            if len(ids) == 1 and not self._piece(ids[0]):
                found[ids[0]] = marker.encode("utf-8")
        return found

    def _reasoning_markers(self) -> tuple[bool, dict[int, bytes]]:
        """Whether this model writes `<think>` blocks (its chat template mentions the marker, or its
        vocabulary has it as one token), and those markers that are control tokens, by id."""
        single = {}
        for marker in _THINK:
            ids = list(self._llm.tokenize(marker.encode("utf-8"), add_bos=False, special=True))
            if len(ids) == 1:
                single[ids[0]] = marker.encode("utf-8")
        thinks = self._template_thinks or _THINK[0].encode("utf-8") in single.values()
        if not thinks:
            return False, {}
        return True, {token: marker for token, marker in single.items() if not self._piece(token)}

    def _splitter(self, prompt: list[int]) -> ReasoningSplitter | None:
        """A reasoning splitter for an output after `prompt`, which starts inside the block if the
        prompt opened it (as some templates do); None for models that do not reason in blocks."""
        if not self._thinks:
            return None
        tail = self._llm.detokenize(prompt[-8:], special=True).decode("utf-8", "replace")
        return ReasoningSplitter(*_THINK, inside=tail.rstrip().endswith(_THINK[0]))

    def _chat_template(self) -> ChatTemplate:
        llm = self._llm
        source = self.config.chat_template or llm.metadata.get("tokenizer.chat_template") or CHATML
        self._template_has_tools = "tools" in source
        self._template_thinks = _THINK[0] in source
        model = llm._model
        return ChatTemplate(
            source,
            bos_token=model.token_get_text(llm.token_bos()),
            eos_token=model.token_get_text(llm.token_eos()),
        )

    def _close(self) -> None:
        for llm in (self._llm, self._embedder):
            if llm is not None:
                llm.close()
        self._llm = self._embedder = None

    def _prompts(self, request: GenerationRequest) -> list[tuple[list[int], str | None]]:
        """Each prompt's tokens, and the text to echo before its output (completions only)."""
        if isinstance(request, ChatRequest):
            assert self._template is not None
            messages = request.messages
            if offers_tools(request) and not self._template_has_tools:
                messages = with_tools_note(messages, request.tools)
            text = self._template.render(messages, tools=request.tools)
            return [(self._tokenize(text, add_bos=not text.startswith(self._template.bos_token or "\0")), None)]
        prompts = []
        for i, prompt in enumerate(request.prompts):
            if isinstance(prompt, str):
                prompts.append((self._tokenize(prompt, add_bos=True), prompt if request.echo else None))
            else:
                tokens = self._checked_ids(prompt, f"prompt[{i}]")
                echo = self._llm.detokenize(tokens).decode("utf-8", "replace") if request.echo else None
                prompts.append((tokens, echo))
        return prompts

    def _tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        add_bos = add_bos and bool(self._llm._model.add_bos_token())
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True))

    def _checked_ids(self, ids: Sequence[int], param: str) -> list[int]:
        n_vocab = self._llm.n_vocab()
        for i, token in enumerate(ids):
            if not 0 <= token < n_vocab:
                raise InvalidRequest(f"Token id {token} is outside this model's vocabulary (0..{n_vocab - 1}).", param=f"{param}[{i}]")
        return list(ids)

    def _generation(self, request: GenerationRequest) -> Generator[GenerationEvent | None, None, None]:
        """All choices of one request, one after another. `None` items are yield points."""
        constraint = constraint_for(request)
        grammar = self._grammar(constraint.schema, constraint.param) if constraint.schema is not None else None
        lazy = self._lazy(constraint.lazy) if constraint.lazy is not None else None
        prompts = self._prompts(request)
        for tokens, _ in prompts:
            self._check_fits(tokens, request)
        for p, (tokens, echo) in enumerate(prompts):
            for j in range(request.n):
                index = p * request.n + j
                if echo:
                    yield TextDelta(echo, index=index)
                sampling = _Sampling(self, constraint.sampling, index, grammar, lazy)
                events = self._decode(
                    tokens,
                    constraint.sampling,
                    index,
                    count_prompt=j == 0,
                    sampling=sampling,
                    reasoning=constraint.schema is None,  # a grammar holds the whole output, from its start
                )
                yield from constraint.wrap(events)

    def _lazy(self, calls: LazyCalls) -> tuple[LazyCalls, str | None]:
        """`auto` calls, with the grammar of one call if decoding can hold calls to it."""
        if calls.schema is None:
            return calls, None
        try:
            return calls, self._grammar(calls.schema, "tools")
        except Unsupported:
            return calls, None

    def _grammar(self, schema: Schema, param: str) -> str:
        """The grammar for `schema`, once parsed by llama.cpp here so a failure is a 400, not a crash later."""
        gbnf = _gbnf(schema, param)
        sampler = llama_cpp.llama_sampler_init_grammar(self._llm._model.vocab, gbnf.encode("utf-8"), b"root")
        if not sampler:
            log.warning("llama.cpp rejected the grammar built for %s", param)
            raise Unsupported(f"The schema in '{param}' cannot be enforced while decoding.", param=param)
        llama_cpp.llama_sampler_free(sampler)
        return gbnf

    def _check_fits(self, tokens: list[int], request: GenerationRequest) -> None:
        if not tokens:
            raise InvalidRequest("The prompt is empty.", param="prompt")
        n_ctx = self.context_length
        limit = request.sampling.max_tokens
        if len(tokens) >= n_ctx or (limit is not None and len(tokens) + limit > n_ctx):
            asked = f" and {limit} for the output" if limit is not None else ""
            raise ContextOverflow(
                f"This model's maximum context length is {n_ctx} tokens; the prompt needs {len(tokens)}{asked}.",
                param="messages" if isinstance(request, ChatRequest) else "prompt",
            )

    def _decode(
        self,
        prompt: list[int],
        params: SamplingParams,
        index: int,
        *,
        count_prompt: bool,
        sampling: _Sampling | None = None,
        reasoning: bool = True,
    ) -> Generator[GenerationEvent | None, None, None]:
        """One choice. With `reasoning`, a model's `<think>` block goes out as `ReasoningDelta`s; stop
        sequences, logprobs and the watch for tool calls apply to the answer text only."""
        llm = self._llm
        cached = yield from self._ingest(prompt)
        sampler = sampling or _Sampling(self, params, index)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        splitter = self._splitter(prompt) if reasoning else None
        stops = StopMatcher(params.stop)
        limit = params.max_tokens if params.max_tokens is not None else self.context_length - len(prompt)
        pending: list[TokenLogprob] = []
        produced = 0
        reason: FinishReason = "length"
        vocab = llm._model.vocab
        while produced < limit and llm.n_tokens < self.context_length:
            token = sampler.sample()
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                reason = "stop"
                break
            produced += 1
            self.decoded_tokens += 1
            piece = sampler.piece(token)
            if params.logprobs:
                pending.append(self._logprob(token, piece, params.top_logprobs))
            text = decoder.decode(piece)
            if splitter is not None:
                thought, text = splitter.feed(text)
                if thought:
                    yield ReasoningDelta(thought, index=index)
                if splitter.in_block:
                    pending = []  # the tokens of reasoning and its markers have no logprobs to report
            sampler.saw(text)
            text = stops.feed(text)
            if stops.matched is not None:
                reason = "stop"
                if text or pending:
                    yield TextDelta(text, index=index, logprobs=tuple(pending))
                break
            if text:
                yield TextDelta(text, index=index, logprobs=tuple(pending))
                pending = []
            llm.eval([token])
        if stops.matched is None:
            rest = decoder.decode(b"", final=True)
            if splitter is not None:
                thought, rest = splitter.feed(rest)
                last = splitter.finish()
                thought, rest = thought + last.reasoning, rest + last.answer
                if thought:
                    yield ReasoningDelta(thought, index=index)
            rest = stops.feed(rest)
            if stops.matched is None:
                rest += stops.flush()
            if rest or pending:
                yield TextDelta(rest, index=index, logprobs=tuple(pending))
        yield Finish(
            reason,
            Usage(
                prompt_tokens=len(prompt) if count_prompt else 0,
                completion_tokens=produced,
                cached_tokens=cached if count_prompt else 0,
            ),
            index=index,
            stop_sequence=stops.matched,
        )

    def _ingest(self, prompt: list[int]) -> Generator[None, None, int]:
        """Bring the KV cache to `prompt`, reusing the longest cached prefix; returns its length."""
        llm = self._llm
        cached = 0
        for held, wanted in zip(llm._input_ids.tolist(), prompt):
            if held != wanted:
                break
            cached += 1
        cached = min(cached, len(prompt) - 1)  # the last prompt token is decoded again for fresh logits
        llm.n_tokens = cached
        step = llm.n_batch
        for start in range(cached, len(prompt), step):
            llm.eval(prompt[start : start + step])
            yield None
        return cached

    def _sampler(self, params: SamplingParams, index: int) -> Any:
        llm = self._llm
        chain = internals.LlamaSampler()
        n_vocab = llm.n_vocab()
        if params.logit_bias:
            chain.add_logit_bias(n_vocab, dict(params.logit_bias))
        if params.repeat_penalty != 1.0 or params.frequency_penalty or params.presence_penalty:
            chain.add_penalties(
                n_vocab, _PENALTY_WINDOW, params.repeat_penalty, params.frequency_penalty, params.presence_penalty
            )
        if params.temperature <= 0:
            chain.add_greedy()
            return chain
        if params.top_k > 0:
            chain.add_top_k(params.top_k)
        if params.top_p < 1.0:
            chain.add_top_p(params.top_p, 1)
        if params.min_p > 0:
            chain.add_min_p(params.min_p, 1)
        chain.add_temp(params.temperature)
        seed = params.seed + index if params.seed is not None else random.getrandbits(32)
        chain.add_dist(seed & 0xFFFFFFFF)
        return chain

    def _grammar_sampler(self, gbnf: str) -> Any:
        """A grammar sampler of its own, not in any chain yet; the caller frees it or hands it on."""
        sampler = llama_cpp.llama_sampler_init_grammar(self._llm._model.vocab, gbnf.encode("utf-8"), b"root")
        if not sampler:
            raise InternalError("The output grammar could not be built.")
        return sampler

    def _primed(self, gbnf: str, text: str) -> Any:
        """A grammar sampler that has taken `text` already, or None where it would not.

        A token the grammar does not allow must never reach `llama_sampler_accept`: llama.cpp
        throws from there, and an exception cannot cross into Python. Each is checked first.
        """
        try:
            grammar = self._grammar_sampler(gbnf)
        except InternalError:
            log.warning("llama.cpp rejected a tool-call grammar")
            return None
        tokens = list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)) if text else []
        spelled = b"".join(self._piece(t) for t in tokens).decode("utf-8", "replace")
        primed = spelled in (text, " " + text) and all(self._allows(grammar, t) and _accept(grammar, t) for t in tokens)
        if not primed:
            llama_cpp.llama_sampler_free(grammar)
            return None
        return grammar

    def _pick(self, chain: Any, grammar: Any) -> int:
        """What `chain` picks from the last logits, after `grammar` (if any) has ruled; nothing accepted."""
        llm = self._llm
        n_vocab = llm.n_vocab()
        if self._candidates is None or len(self._candidates) != n_vocab:
            self._candidates = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        candidates = self._candidates
        candidates["id"] = np.arange(n_vocab, dtype=np.int32)
        candidates["logit"] = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
        candidates["p"] = 0.0
        view = llama_cpp.llama_token_data_array(
            data=candidates.ctypes.data_as(llama_cpp.llama_token_data_p), size=n_vocab, selected=-1, sorted=False
        )
        if grammar is not None:
            llama_cpp.llama_sampler_apply(grammar, ctypes.byref(view))
        llama_cpp.llama_sampler_apply(chain.sampler, ctypes.byref(view))
        return int(candidates["id"][view.selected])

    @staticmethod
    def _allows(grammar: Any, token: int) -> bool:
        data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
        candidates = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(candidates))
        return math.isfinite(data[0].logit)

    def _logprob(self, token: int, piece: bytes, top_n: int) -> TokenLogprob:
        llm = self._llm
        n_vocab = llm.n_vocab()
        logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
        peak = float(logits.max())
        log_total = peak + math.log(float(np.exp(logits - peak).sum()))
        top: tuple[TopLogprob, ...] = ()
        if top_n:
            best = np.argpartition(-logits, top_n)[:top_n]
            best = best[np.argsort(-logits[best])]
            top = tuple(self._top_entry(int(t), float(logits[t]) - log_total) for t in best)
        return TokenLogprob(
            token=piece.decode("utf-8", "replace"),
            logprob=float(logits[token]) - log_total,
            bytes=piece,
            top=top,
        )

    def _piece(self, token: int) -> bytes:
        """The exact bytes of one token (a piece may be part of a UTF-8 character)."""
        size = len(self._piece_buffer)
        n = llama_cpp.llama_token_to_piece(self._llm._model.vocab, token, self._piece_buffer, size, 0, False)
        if n < 0:
            self._piece_buffer = ctypes.create_string_buffer(-n)
            return self._piece(token)
        return self._piece_buffer.raw[:n]

    def _top_entry(self, token: int, logprob: float) -> TopLogprob:
        piece = self._piece(token)
        return TopLogprob(token=piece.decode("utf-8", "replace"), logprob=logprob, bytes=piece)

    def _embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        if self._embedder is None:
            self._embedder = llama_cpp.Llama(model_path=self.config.resolved_path(), **self._load_options(embedding=True))
        llm = self._embedder
        n_embd = llm.n_embd()
        vectors = []
        for i, item in enumerate(request.inputs):
            if isinstance(item, str):
                add_bos = bool(llm._model.add_bos_token())
                tokens = list(llm.tokenize(item.encode("utf-8"), add_bos=add_bos, special=False))
            else:
                tokens = self._checked_ids(item, f"input[{i}]")
            if not tokens:
                raise InvalidRequest("An input to embed is empty.", param=f"input[{i}]")
            if request.truncate:
                tokens = tokens[: llm.n_batch]
            if len(tokens) > llm.n_batch:
                raise ContextOverflow(
                    f"Input {i} is {len(tokens)} tokens; this model embeds at most {llm.n_batch}.", param="input"
                )
            llm._batch.reset()
            llm._batch.add_sequence(tokens, 0, True)
            llm._ctx.kv_cache_clear()
            llm._ctx.decode(llm._batch)
            raw = np.array(llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)[:n_embd], dtype=np.float64)
            norm = float(np.linalg.norm(raw)) or 1.0
            vectors.append(Embedding(vector=tuple((raw / norm).tolist()), tokens=len(tokens)))
        llm._ctx.kv_cache_clear()
        return EmbeddingResult(tuple(vectors))


def _accept(grammar: Any, token: int) -> bool:
    llama_cpp.llama_sampler_accept(grammar, token)
    return True


class _Sampling:
    """One choice's sampling: the sampler chain, and a grammar beside it when the output is held to one.

    The grammar is checked against the token the chain picks, and only when it refuses that token
    is it applied to the whole vocabulary and the pick made again (llama.cpp's own server does the
    same): most tokens cost one check instead of a pass over every token. With `lazy` calls the
    text is watched, and the grammar joins once a call begins, primed with the call so far.
    """

    def __init__(
        self,
        engine: LlamaCppEngine,
        params: SamplingParams,
        index: int,
        grammar: str | None = None,
        lazy: tuple[LazyCalls, str | None] | None = None,
    ) -> None:
        self._engine = engine
        self._chain = engine._sampler(params, index)
        self._grammar: Any = None
        if grammar is not None:
            self._hold(engine._grammar_sampler(grammar))
        self._watching = lazy is not None  # for calls in free text
        self._lazy = lazy if lazy is not None and lazy[1] is not None else None
        self._trigger = CallDetector(self._lazy[0].checks) if self._lazy is not None else None

    def _hold(self, grammar: Any) -> None:
        self._grammar = grammar
        weakref.finalize(self, llama_cpp.llama_sampler_free, grammar)

    def piece(self, token: int) -> bytes:
        """The token's bytes; a reasoning marker's, and while calls are watched for a call marker's,
        though it is a control token."""
        engine = self._engine
        piece = engine._piece(token)
        if not piece and token in engine._think_tokens:
            return engine._think_tokens[token]
        if not piece and self._watching:
            return engine._marker_tokens.get(token, piece)
        return piece

    def sample(self) -> int:
        engine = self._engine
        if self._grammar is None:
            return int(self._chain.sample(engine._llm._ctx, -1))
        token = engine._pick(self._chain, None)
        if not engine._allows(self._grammar, token):
            token = engine._pick(self._chain, self._grammar)
        llama_cpp.llama_sampler_accept(self._chain.sampler, token)
        llama_cpp.llama_sampler_accept(self._grammar, token)
        return token

    def saw(self, text: str) -> None:
        trigger = self._trigger
        if trigger is None or self._lazy is None:
            return
        trigger.feed(text)
        if not trigger.in_call:
            return
        self._trigger = None
        calls, call_gbnf = self._lazy
        assert call_gbnf is not None
        gbnf = trigger_grammar(call_gbnf, trigger.marker or "", trigger.call_text, calls.parallel)
        grammar = self._engine._primed(gbnf, trigger.call_text)
        if grammar is not None:
            self._hold(grammar)
