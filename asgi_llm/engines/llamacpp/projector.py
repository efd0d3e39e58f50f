"""A vision model's projector (`mmproj`), loaded beside its text model through llama.cpp's
multimodal library (libmtmd): a chat prompt's images decoded into bitmaps, the prompt tokenized
with them into chunks of text and of images, and those chunks read into a sequence. On the
inference thread only.

The scheduler keeps each sequence's cache as a token list (batching.py), so an image stands in a
prompt's tokens as a run of stand-in ids, one per position it takes, derived from a hash of its
bytes (negative: no vocabulary has them). A second turn about the same picture then shares the
prefix, and its image is not encoded again; another picture differs from its first position on.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_cpp import mtmd_cpp

from ...config import ModelConfig
from ...core.errors import InternalError, InvalidRequest
from ...core.requests import IMAGE_MARKER, ImageInput
from .jobs import BatchToken
from .native import Decoder, Model, quiet_llama_logs, route_mtmd_logs

__all__ = ["MediaPrompt", "Projector", "stand_ins"]

log = logging.getLogger("asgi_llm.engine")

mtmd: Any = mtmd_cpp  # partly typed
_NO_FFMPEG = b"/nonexistent/asgi-llm"
"""Where the helper is told ffmpeg lives: bytes that are no image are refused, never handed to an
ffprobe process as a video (the helper's last try)."""
_TEXT, _IMAGE = 0, 1  # mtmd_input_chunk_type


def stand_ins(digest: bytes, count: int) -> list[int]:
    """`count` stand-in ids for an image chunk of this SHA-256 `digest`: negative 31-bit words of
    it in turn, so a run matches another only where all of its digest does (int32, as the saved
    prompt files keep token ids)."""
    words = [int.from_bytes(digest[i : i + 4], "little") & 0x7FFFFFFF for i in range(0, 32, 4)]
    return [-1 - (words[k % 8] ^ (k // 8)) for k in range(count)]


@dataclass(eq=False)
class MediaPrompt:
    """A prompt with images, tokenized: `tokens` position by position (each image a run of stand-in
    ids), the `runs` (start, end) the images take, and `tail`, where its last run of text begins.
    Holds the native chunks until `close` (or until it is collected)."""

    projector: Projector
    chunks: Any
    tokens: list[int]
    runs: tuple[tuple[int, int], ...]
    tail: int
    _spans: list[tuple[int, int, int]] = field(default_factory=list)  # (start, end, chunk index)

    def boundary(self, position: int) -> int:
        """`position`, or the start of the image run it falls inside."""
        for start, end in self.runs:
            if start < position < end:
                return start
        return position

    def read(self, sequence: int, start: int, budget: int) -> int:
        """Read on into `sequence` from `start` (before `tail`, never inside an image's run): the
        image that begins there, through the projector's encoder and into the context, or up to
        `budget` tokens of the text there (as far as the next image); the position it got to."""
        if self.chunks is None:
            raise InternalError("The prompt's images were let go before it was read.")
        for first, end, index in self._spans:
            if not first <= start < end:
                continue
            chunk = mtmd.mtmd_input_chunks_get(self.chunks, index)
            if mtmd.mtmd_input_chunk_get_type(chunk) != _TEXT:
                self.projector.encode(chunk, first, sequence)
                return end
            decoder, stop = self.projector.decoder, min(end, self.tail, start + max(budget, 1))
            for at in range(start, stop, decoder.capacity):
                piece = self.tokens[at : min(at + decoder.capacity, stop)]
                decoder.decode([BatchToken(t, at + i, sequence, False) for i, t in enumerate(piece)])
            return stop
        raise InternalError(f"The prompt has no position {start} to read.")

    def close(self) -> None:
        chunks, self.chunks = self.chunks, None
        if chunks is not None:
            mtmd.mtmd_input_chunks_free(chunks)

    def __del__(self) -> None:  # its jobs are gone: nothing can be told of a failure here
        with contextlib.suppress(Exception):
            self.close()


class Projector:
    """The projector's context (`mtmd_context`) over a loaded text model; `encodes` counts the
    images it has encoded (read by tests and `/health`: a cached turn encodes none)."""

    def __init__(self, model: Model, config: ModelConfig, decoder: Decoder) -> None:
        assert config.mmproj is not None
        route_mtmd_logs()
        self.path = config.mmproj
        self._model = model
        self._decoder = decoder
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = config.n_gpu_layers != 0
        params.n_threads = config.threads
        params.print_timings = False
        params.media_marker = IMAGE_MARKER.encode()
        self._ctx = mtmd.mtmd_init_from_file(config.mmproj.encode("utf-8"), model.native.model, params)
        if not self._ctx:
            raise ValueError(
                f"the projector {Path(config.mmproj).name} could not be loaded for this model "
                "(not a projector GGUF, or not one for this model's width: see the asgi_llm.llama_cpp log)"
            )
        if not mtmd.mtmd_support_vision(self._ctx):
            self.close()
            raise ValueError(f"the projector {Path(config.mmproj).name} has no vision encoder")
        self._options = mtmd.mtmd_helper_init_opt_default()
        self._options.video_params.ffmpeg_bin_dir = _NO_FFMPEG
        self.encodes = 0
        self.images = 0  # decoded
        self._check_framing()

    def _check_framing(self) -> None:
        """Some projectors frame an image with tokens of their own model's vocabulary (SmolVLM's
        `<fake_token_around_image>`): with a text model that lacks them, llama.cpp would abort the
        process decoding their -1 ids. So a blank image is tokenized once at load: such a pairing
        fails the load, naming the projector, instead of any request."""
        side = 32
        blank = (ctypes.c_uint8 * (side * side * 3))()
        bitmap = mtmd.mtmd_bitmap_init(side, side, blank)
        try:
            self._tokenized(IMAGE_MARKER, [bitmap], add_special=False).close()
        except InternalError as exc:
            self.close()
            raise ValueError(str(exc)) from None
        except InvalidRequest:  # a blank image it will not take says nothing of its framing
            pass
        finally:
            mtmd.mtmd_bitmap_free(bitmap)

    def close(self) -> None:
        ctx, self._ctx = self._ctx, None
        if ctx:
            mtmd.mtmd_free(ctx)

    def prompt(self, text: str, images: Sequence[ImageInput], *, add_special: bool) -> MediaPrompt:
        """`text` (holding `IMAGE_MARKER` once per image, in order) tokenized with `images`."""
        bitmaps = []
        try:
            for image in images:
                bitmaps.append(self._bitmap(image))
            return self._tokenized(
                text, bitmaps, add_special=add_special, part=images[0].part if len(images) == 1 else ""
            )
        finally:
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)

    def _tokenized(self, text: str, bitmaps: Sequence[Any], *, add_special: bool, part: str = "") -> MediaPrompt:
        chunks = mtmd.mtmd_input_chunks_init()
        encoded = text.encode("utf-8")
        given = mtmd.mtmd_input_text(encoded, len(encoded), add_special, True)
        array = (mtmd.mtmd_bitmap_p_ctypes * max(len(bitmaps), 1))(*bitmaps)
        status = mtmd.mtmd_tokenize(self._ctx, chunks, ctypes.byref(given), array, len(bitmaps))
        media = MediaPrompt(self, chunks, [], (), 0)
        if status != 0:
            media.close()
            why = "its images do not match their places in the text" if status == 1 else "an image could not be read"
            raise InvalidRequest(f"The prompt could not be tokenized with its images: {why}.", param=part or "messages")
        try:
            self._walk(media)
        except BaseException:
            media.close()
            raise
        return media

    def _walk(self, media: MediaPrompt) -> None:
        tokens: list[int] = []
        runs: list[tuple[int, int]] = []
        seen: dict[bytes, int] = {}
        tail = 0
        for index in range(mtmd.mtmd_input_chunks_size(media.chunks)):
            chunk = mtmd.mtmd_input_chunks_get(media.chunks, index)
            start = len(tokens)
            if mtmd.mtmd_input_chunk_get_type(chunk) == _TEXT:
                count = ctypes.c_size_t()
                ids = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                text = [int(ids[i]) for i in range(count.value)]
                if any(not 0 <= t < self._model.n_vocab for t in text):  # llama.cpp would abort on them
                    raise InternalError(
                        f"The projector {Path(self.path).name} frames images with tokens this model's vocabulary lacks."
                    )
                tokens.extend(text)
                tail = start
            elif mtmd.mtmd_input_chunk_get_type(chunk) == _IMAGE:
                key = bytes(mtmd.mtmd_input_chunk_get_id(chunk) or b"")
                seen[key] = seen.get(key, -1) + 1  # an image read as slices: a chunk each
                digest = hashlib.sha256(key + b":%d" % seen[key]).digest()
                tokens.extend(stand_ins(digest, int(mtmd.mtmd_input_chunk_get_n_pos(chunk))))
                runs.append((start, len(tokens)))
                tail = len(tokens)
            else:
                raise InternalError("The projector gave a chunk that is no text and no image.")
            media._spans.append((start, len(tokens), index))
        media.tokens, media.runs, media.tail = tokens, tuple(runs), tail

    def _bitmap(self, image: ImageInput) -> Any:
        """The image decoded (PNG, JPEG, GIF, BMP, WebP...), its id the hash of its bytes."""
        data = image.data
        buffer = (ctypes.c_uint8 * max(len(data), 1)).from_buffer_copy(data or b"\0")
        with quiet_llama_logs():  # a bad image is the client's to hear of, in its 400
            made = mtmd.mtmd_helper_bitmap_init_from_buf_wrapper(self._ctx, buffer, len(data), False, self._options)
        bitmap, video = made.bitmap, made.video_ctx
        if bitmap and (video or mtmd.mtmd_bitmap_is_audio(bitmap)):  # a video or a sound: no image
            mtmd.mtmd_bitmap_free(bitmap)
            bitmap = None
        if video:
            mtmd.mtmd_helper_video_free(video)
        if not bitmap:
            raise InvalidRequest(
                f"The image in '{image.part}' could not be decoded (it is not a whole image in a format read here).",
                param=image.part or "messages",
            )
        mtmd.mtmd_bitmap_set_id(bitmap, hashlib.sha256(data).hexdigest().encode())
        self.images += 1
        return bitmap

    @property
    def decoder(self) -> Decoder:
        return self._decoder

    def encode(self, chunk: Any, position: int, sequence: int) -> None:
        """One image chunk encoded and read into `sequence` at `position`."""
        decoder = self._decoder
        after = ctypes.c_int32(position)
        status = mtmd.mtmd_helper_eval_chunk_single(
            self._ctx, decoder.context.ctx, chunk, position, sequence, decoder.capacity, False, ctypes.byref(after)
        )
        self.encodes += 1
        if status != 0:
            raise InternalError(f"The projector failed to read an image into the context ({status}).")
