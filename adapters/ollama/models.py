"""Ollama's model routes, answered from the catalog alone: tags, show, ps, version, and `/`.

A local model's family, parameter count and quantization come from its GGUF header; an
upstream model's are unknown, and answer with Ollama's "unknown" values (empty strings).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from asgi_llm.core import InvalidRequest, ModelCard, ModelNotFound, Unsupported

from ..base import InfoContext, InfoRoute, Reply, refuse_unrecognized, validate
from .common import Wire, model_name, rfc3339

__all__ = ["ROUTES", "VERSION", "human_number", "ps", "pull", "running", "show", "tags", "version"]

VERSION = "0.6.3"
"""The Ollama server version we answer like; clients gate features on it."""

_NEVER = "9999-12-31T23:59:59Z"  # a model kept loaded until the server stops
_UNKNOWN = "unknown"  # Ollama's architecture for a model it knows nothing of
_LISTED_ELSEWHERE = frozenset({"tokenizer.chat_template"})  # long, and not the Go template `template` holds


def _tagged(card: ModelCard) -> str:
    return card.id if ":" in card.id else f"{card.id}:latest"


def human_number(count: int) -> str:
    """A parameter count the way Ollama writes it: 135M, 7.62B, 70.6B."""
    for size, unit in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if count >= size:
            number = count / size
            places = 0 if number >= 100 else 1 if number >= 10 else 2
            return f"{number:.{places}f}{unit}"
    return str(count)


def _details(card: ModelCard) -> dict[str, Any]:
    facts = card.facts
    return {
        "parent_model": "",
        "format": "gguf",
        "family": facts.architecture,
        "families": [facts.architecture] if facts.architecture else [],
        "parameter_size": human_number(facts.parameters) if facts.parameters else "",
        "quantization_level": facts.file_type,
    }


CHATML = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
"""Ollama's own Go template for ChatML models (its `chatml.gotmpl`)."""


def template(card: ModelCard) -> str:
    """The prompt template, as Ollama clients read it: a Go template where the one in use is a
    family Ollama renders with one (ChatML), else the Jinja template (the config's, else the
    GGUF's own), which is what serves the model here either way."""
    source = card.template.source if card.template is not None else card.facts.metadata.get("tokenizer.chat_template")
    if not isinstance(source, str):
        return ""
    return CHATML if "<|im_start|>" in source and "<|im_end|>" in source else source


def _parameters(card: ModelCard, stop: str | None) -> str:
    """Ollama's `parameters` lines: `num_ctx`, the context the model is served with (its `n_ctx`;
    the GGUF's `context_length` in the model info is what it was trained with), which clients
    size `options.num_ctx` by; and a fallback template's end marker (`stop`)."""
    lines: list[str] = []
    if card.context_length > 0:  # 0: the model is served with the context it was trained with
        lines.append(f"{'num_ctx':<30} {card.context_length}")
    if stop is not None:
        lines.append(f'{"stop":<30} "{stop}"')
    return "\n".join(lines)


def _template_facts(card: ModelCard) -> tuple[str, str | None, dict[str, Any]]:
    """What the modelfile, the model info and the `stop` parameter say of the chat template in use:
    a fallback is named, with the end marker it stops at."""
    used = card.template
    if used is None:
        return "", None, {}
    info: dict[str, Any] = {"asgi_llm.chat_template": used.name, "asgi_llm.chat_template.fallback": used.fallback}
    if not used.fallback:
        return "", None, info
    modelfile = f"# The GGUF has no chat template: chats use the {used.name} fallback, and end at {used.end}.\n"
    return modelfile, used.end, info


def _model_info(card: ModelCard) -> dict[str, Any]:
    """The GGUF header's entries (arrays such as the vocabulary left out), as Ollama lists them."""
    facts = card.facts
    if not facts.architecture:
        return {
            "general.architecture": _UNKNOWN,
            "general.basename": card.id,
            f"{_UNKNOWN}.context_length": card.context_length,
        }
    info = {key: value for key, value in facts.metadata.items() if key not in _LISTED_ELSEWHERE}
    return {**info, "general.parameter_count": facts.parameters}


def _summary(card: ModelCard) -> dict[str, Any]:
    name = _tagged(card)
    return {
        "name": name,
        "model": name,
        "size": card.size,
        "digest": hashlib.sha256(card.id.encode()).hexdigest(),  # stands for the model, not its file
        "details": _details(card),
    }


def tags(catalog: Sequence[ModelCard]) -> Reply:
    return 200, {"models": [{**_summary(c), "modified_at": rfc3339(c.created)} for c in catalog]}


def ps(catalog: Sequence[ModelCard]) -> Reply:
    loaded = [c for c in catalog if c.state in ("ready", "stalled")]  # a stalled model still holds its memory
    return 200, {
        "models": [
            {
                **_summary(c),
                "size": c.memory or c.size,  # as Ollama: what the loaded model holds, not its file
                "expires_at": _NEVER if c.expires_at is None else rfc3339(c.expires_at),
                "size_vram": c.memory_vram,
                "context_length": c.context_length,
            }
            for c in loaded
        ]
    }


class ShowBody(Wire):
    model: str | None = None
    name: str | None = None  # the older spelling
    verbose: bool = False


class PullBody(Wire):
    model: str | None = None
    name: str | None = None  # the older spelling
    insecure: bool = False
    stream: bool = True


def _card(catalog: Sequence[ModelCard], model: str | None, name: str | None) -> ModelCard:
    wanted = model or name
    if not wanted:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model")
    card = next((c for c in catalog if model_name(wanted) in (c.id, *c.aliases)), None)
    if card is None:
        raise ModelNotFound(wanted)
    return card


def pull(catalog: Sequence[ModelCard], body: Any) -> Reply:
    """Models are configured, never downloaded. Pulling one the server has succeeds at once (one
    status line, which both of the client's modes read), so scripts that pull before use run
    unchanged; any other is 404, as for `show`."""
    wire = validate(PullBody, body)
    refuse_unrecognized(wire)
    _card(catalog, wire.model, wire.name)
    return 200, {"status": "success"}


def show(catalog: Sequence[ModelCard], body: Any) -> Reply:
    wire = validate(ShowBody, body)
    refuse_unrecognized(wire)
    if wire.verbose:  # Ollama's adds the tokenizer's arrays, which the model card does not keep
        raise Unsupported("'verbose' is not supported: the model info leaves out the GGUF's arrays.", param="verbose")
    card = _card(catalog, wire.model, wire.name)
    modelfile, stop, info = _template_facts(card)
    return 200, {
        "modelfile": modelfile,
        "parameters": _parameters(card, stop),
        "template": template(card),
        "details": _details(card),
        "model_info": {**_model_info(card), **info},
        # Every model takes tools: a call is decoded under the tool's schema, template or not.
        "capabilities": [
            "completion",
            "tools",
            *(["embedding"] if card.embeddings else []),
            *(["vision"] if card.vision else []),
        ],
        "modified_at": rfc3339(card.created),
    }


def version() -> Reply:
    return 200, {"version": VERSION}


def running() -> Reply:
    """What `GET /` and `HEAD /` answer, so clients can probe for a server."""
    return 200, "Ollama is running"


def _show(ctx: InfoContext) -> Reply:
    return show(ctx.catalog, ctx.body)


ROUTES = (
    InfoRoute(path="/api/tags", handle=lambda ctx: tags(ctx.catalog)),
    InfoRoute(path="/api/show", handle=_show, methods=("POST",), body=ShowBody),
    InfoRoute(path="/api/pull", handle=lambda ctx: pull(ctx.catalog, ctx.body), methods=("POST",), body=PullBody),
    InfoRoute(path="/api/ps", handle=lambda ctx: ps(ctx.catalog)),
    InfoRoute(path="/api/version", handle=lambda ctx: version()),
    InfoRoute(path="/", handle=lambda ctx: running(), methods=("GET", "HEAD")),
)
