"""llama-server's `/lora-adapters`: `GET` lists a model's adapters with their default scales, `POST`
(operator keys) sets them: `{"lora": [{"id": ..., "scale": ...}]}`, the per-request field's shape
(llama-server posts the bare list; every body here is a JSON object). The model is the query's
`model`, else the first one the caller may use. Ids are the configured names (llama-server numbers
its adapters), and no file path goes out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from pydantic import Field

from asgi_llm.core import AdapterScale

from ..base import LoraRoute, refuse_unrecognized, validate
from .common import Wire, WireLora, adapter_scales

__all__ = ["ROUTES", "parse", "render"]


class LoraScalesBody(Wire):
    """The new default scales, for the adapters named (the others keep theirs)."""

    lora: Annotated[list[WireLora], Field(min_length=1)]


class LoraAdapter(TypedDict):
    id: str
    scale: float
    model: str


def parse(body: Any) -> tuple[AdapterScale, ...]:
    wire = validate(LoraScalesBody, body)
    refuse_unrecognized(wire)
    return adapter_scales(wire.lora) or ()


def render(model: str, adapters: Sequence[AdapterScale]) -> list[LoraAdapter]:
    return [LoraAdapter(id=adapter.id, scale=adapter.scale, model=model) for adapter in adapters]


ROUTES = (LoraRoute(path="/lora-adapters", parse=parse, render=render, body=LoraScalesBody),)
