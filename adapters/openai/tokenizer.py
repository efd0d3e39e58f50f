"""A model's tokenizer and chat template, nothing decoded: `POST /tokenize`, `/detokenize` and
`/apply-template` in llama-server's shapes, the tokenize reply with vLLM's `count` and
`max_model_len` beside llama-server's `tokens`."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict

from pydantic import Field

from asgi_llm.core import DetokenizeRequest, TemplateRequest, TokenizeRequest, TokenizerResult

from ..base import Parsed, TokenizerRoute, refuse_unrecognized, validate
from .chat import NamedToolChoice, WireTool
from .chat import parse as parse_chat
from .chat_messages import WireMessage
from .common import Wire

__all__ = [
    "ROUTES",
    "parse_detokenize",
    "parse_template",
    "parse_tokenize",
    "render_detokenize",
    "render_template",
    "render_tokenize",
]


class TokenizeBody(Wire):
    model: str | None = None
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeBody(Wire):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]


class ApplyTemplateBody(Wire):
    """The fields of a chat body that shape its prompt; the others (sampling...) do not, so are refused."""

    model: str | None = None
    messages: Annotated[list[WireMessage], Field(min_length=1)]
    tools: list[WireTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class TokenPiece(TypedDict):
    id: int
    piece: str | list[int]
    """The token's text, or its bytes where they are not valid UTF-8 alone (part of a character)."""


class TokenizeReply(TypedDict):
    tokens: list[int] | list[TokenPiece]
    count: int
    max_model_len: int


class DetokenizeReply(TypedDict):
    content: str


class TemplateReply(TypedDict):
    prompt: str


def parse_tokenize(body: Any) -> Parsed[TokenizeRequest, None]:
    wire = validate(TokenizeBody, body)
    refuse_unrecognized(wire)
    request = TokenizeRequest(wire.model, wire.content, wire.add_special, wire.parse_special, wire.with_pieces)
    return Parsed(request, None)


def parse_detokenize(body: Any) -> Parsed[DetokenizeRequest, None]:
    wire = validate(DetokenizeBody, body)
    refuse_unrecognized(wire)
    return Parsed(DetokenizeRequest(wire.model, tuple(wire.tokens)), None)


def parse_template(body: Any) -> Parsed[TemplateRequest, None]:
    """Read as chat reads the same fields, so the prompt is the one chat would decode from."""
    wire = validate(ApplyTemplateBody, body)
    refuse_unrecognized(wire)
    chat = parse_chat({**body, "model": wire.model or ""}).request
    return Parsed(TemplateRequest(wire.model, chat), None)


def _piece(piece: bytes) -> str | list[int]:
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


def render_tokenize(parsed: Parsed[TokenizeRequest, None], result: TokenizerResult) -> TokenizeReply:
    tokens: list[int] | list[TokenPiece] = list(result.tokens)
    if parsed.request.pieces:
        pairs = zip(result.tokens, result.pieces, strict=True)
        tokens = [TokenPiece(id=token, piece=_piece(piece)) for token, piece in pairs]
    return {"tokens": tokens, "count": len(result.tokens), "max_model_len": result.context_length}


def render_detokenize(parsed: Parsed[DetokenizeRequest, None], result: TokenizerResult) -> DetokenizeReply:
    return {"content": b"".join(result.pieces).decode("utf-8", "replace")}


def render_template(parsed: Parsed[TemplateRequest, None], result: TokenizerResult) -> TemplateReply:
    return {"prompt": result.prompt}


ROUTES = (
    TokenizerRoute(path="/tokenize", parse=parse_tokenize, render=render_tokenize, body=TokenizeBody),
    TokenizerRoute(path="/detokenize", parse=parse_detokenize, render=render_detokenize, body=DetokenizeBody),
    TokenizerRoute(path="/apply-template", parse=parse_template, render=render_template, body=ApplyTemplateBody),
)
