"""The Anthropic protocol family, assembled: messages, token counting, models."""

from __future__ import annotations

from .anthropic_messages import ROUTES, render_error
from .base import Adapter

__all__ = ["ANTHROPIC"]

ANTHROPIC = Adapter(name="anthropic", routes=ROUTES, render_error=render_error, signature_header="anthropic-version")
