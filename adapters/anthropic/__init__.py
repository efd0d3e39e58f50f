"""The Anthropic protocol family, assembled: messages and token counting, plus model listing.

`GET /models` answers in Anthropic's shape only for requests carrying `anthropic-version`
(every Anthropic SDK sends it); OpenAI's listing answers the rest.
"""

from __future__ import annotations

from ..base import Adapter
from . import messages, models
from .common import render_error, tag_error

__all__ = ["ANTHROPIC"]

ANTHROPIC = Adapter(
    name="anthropic",
    routes=(*messages.ROUTES, *models.ROUTES),
    render_error=render_error,
    tag_error=tag_error,
    signature_header="anthropic-version",
    request_id_header="request-id",  # where Anthropic's SDKs read it (`error.request_id`)
)
