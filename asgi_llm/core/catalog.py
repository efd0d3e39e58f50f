"""What the server knows about its models, without touching them (answers instantly)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .ranking import RerankKind
from .templates import TemplateInUse

__all__ = ["ModelCard", "ModelFacts", "ModelState"]

ModelState = Literal["unloaded", "loading", "ready", "stalled", "failed"]


@dataclass(frozen=True)
class ModelFacts:
    """What a model's file says of it; empty where nothing is known (an upstream model)."""

    architecture: str = ""  # `llama`, `qwen2`...
    parameters: int = 0
    file_type: str = ""  # its quantization, as llama.cpp names it: `Q4_K_M`, `F16`...
    metadata: Mapping[str, str | int | float | bool] = field(default_factory=dict)  # scalar entries
    layer_weights: tuple[int, ...] = ()  # bytes of each repeating layer's tensors (`blk.N.*`)
    output_weights: int = 0  # bytes of the output layer's tensors
    output_copy: int = 0  # bytes of token embeddings copied as the output matrix once offloaded (tied: no `output.weight`)


@dataclass(frozen=True)
class ModelCard:
    id: str
    created: int
    owned_by: str
    aliases: tuple[str, ...]
    state: ModelState
    context_length: int
    embeddings: bool
    embedding_dimensions: tuple[int, ...] = ()  # the sizes its embeddings shorten to (`dimensions`)
    expires_at: float | None = None  # when an idle model will unload (Unix time), if it will
    size: int = 0  # bytes of the model file
    memory: int = 0  # bytes it holds while loaded (what llama.cpp allocated, else the estimate)
    memory_vram: int = 0  # of those, bytes on GPUs
    facts: ModelFacts = ModelFacts()
    rerank: RerankKind | None = None  # how it ranks documents for /rerank (None: it cannot)
    template: TemplateInUse | None = None  # the chat template serving a local model (None: unknown, or upstream)
    vision: bool = False  # its messages may carry images (a local model with a projector, `mmproj`)
