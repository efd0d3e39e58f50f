"""`Vocabulary`: a loaded model's tokenizer and chat template, asked from the event loop and
answered on the inference thread, which alone touches the model (ARCHITECTURE.md, threads)."""

from __future__ import annotations

from collections.abc import Sequence

from ...core.requests import ChatRequest
from ..inference_thread import InferenceThread
from .runtime import Runtime

__all__ = ["Vocabulary"]


class Vocabulary:
    """The `Tokenizer` of one loaded model; nothing it does decodes or holds a sequence."""

    def __init__(self, thread: InferenceThread, runtime: Runtime) -> None:
        self._thread = thread
        self._runtime = runtime

    async def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        runtime = self._runtime

        def tokens() -> list[int]:
            runtime.usable()
            return runtime.model.tokenize(text, add_bos=add_special, special=parse_special)

        return await self._thread.call(tokens)

    async def pieces(self, tokens: Sequence[int]) -> list[bytes]:
        runtime = self._runtime

        def pieces() -> list[bytes]:
            runtime.usable()
            return [runtime.model.piece(token, special=True) for token in runtime.prompts.checked_ids(tokens, "tokens")]

        return await self._thread.call(pieces)

    async def render_chat(self, request: ChatRequest) -> str:
        """Rendered by the same `Prompts.chat_text` that `generate` tokenizes."""
        runtime = self._runtime

        def text() -> str:
            runtime.usable()
            return runtime.prompts.chat_text(request)

        return await self._thread.call(text)
