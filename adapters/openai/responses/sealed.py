"""A reasoning item's `encrypted_content` (`include: ["reasoning.encrypted_content"]`): how a client
that keeps no state (`store: false`) hands the model's reasoning back on its next turn.

This server holds no key to seal it with, so it is not encrypted: it is the reasoning text itself,
base64-encoded behind a marker, the text the item's `content` already gives in the clear. Only
our own marker is read back; another server's sealed reasoning cannot be, and is refused.
"""

from __future__ import annotations

import base64

from asgi_llm.core import InvalidRequest, Unsupported

__all__ = ["INCLUDE", "seal", "unseal"]

INCLUDE = "reasoning.encrypted_content"
_MARK = "asgi-llm:reasoning:v1:"


def seal(text: str) -> str:
    return _MARK + base64.b64encode(text.encode("utf-8")).decode("ascii")


def unseal(sealed: str, param: str) -> str:
    """The reasoning text `seal` wrote; a 400 naming `param` for anything else."""
    if not sealed.startswith(_MARK):
        raise Unsupported(
            "This reasoning was sealed by another server and cannot be read here; send its text "
            "as the item's 'content' or leave the item out.",
            param=param,
        )
    try:
        return base64.b64decode(sealed.removeprefix(_MARK), validate=True).decode("utf-8")
    except ValueError:  # not base64, or not UTF-8 under it
        raise InvalidRequest(
            f"Invalid value for '{param}': it is not reasoning this server sealed.", param=param
        ) from None
