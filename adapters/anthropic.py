"""The Anthropic protocol family, assembled: messages and token counting, plus model listing.

`GET /models` answers in Anthropic's shape only for requests carrying `anthropic-version`
(every Anthropic SDK sends it); OpenAI's listing answers the rest.
"""

from __future__ import annotations

from . import anthropic_messages, anthropic_models
from .anthropic_common import render_error
from .base import Adapter

__all__ = ["ANTHROPIC"]

ANTHROPIC = Adapter(
    name="anthropic",
    routes=(*anthropic_messages.ROUTES, *anthropic_models.ROUTES),
    render_error=render_error,
    signature_header="anthropic-version",
)
