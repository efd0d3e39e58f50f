"""Which chat template turns a local model's messages into its prompt: the config's, else the
one its GGUF carries, else a fallback (ChatML) for a file that has none, such as a base model.

One rule, read by the engine that renders prompts and by the catalog that reports them, so
that `/api/show` and `/admin/models` say what really serves the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["CHATML", "CHATML_END", "TemplateInUse", "TemplateOrigin", "template_in_use"]

TemplateOrigin = Literal["config", "gguf", "fallback"]

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""The fallback, used only when neither the config nor the model file has a template."""

CHATML_END = "<|im_end|>"
"""Where a ChatML turn ends. A model that does not know ChatML has no token for it, and writes
it as plain text when it ends a turn (if it does), so the output is cut at the text itself."""


@dataclass(frozen=True)
class TemplateInUse:
    origin: TemplateOrigin
    name: str  # where it comes from: `chat_template` (the config), `tokenizer.chat_template` (the GGUF), or the fallback's name
    source: str  # the Jinja template
    end: str | None = None  # text that ends the reply, as a stop sequence would (the fallback's)

    @property
    def fallback(self) -> bool:
        return self.origin == "fallback"


def template_in_use(configured: str | None, metadata: Mapping[str, object]) -> TemplateInUse:
    """The config's `chat_template` wins over the file's own; a file without one gets ChatML."""
    if configured:
        return TemplateInUse("config", "chat_template", configured)
    own = metadata.get("tokenizer.chat_template")
    if isinstance(own, str) and own:
        return TemplateInUse("gguf", "tokenizer.chat_template", own)
    return TemplateInUse("fallback", "chatml", CHATML, end=CHATML_END)
