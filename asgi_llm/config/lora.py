"""The settings of a model's LoRA adapters (`[[models]] lora = [{id, path, scale}]`), kept beside
`model.py` so that the schema's modules stay one screenful per class."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

__all__ = ["LoraAdapterConfig", "LoraAdapters", "unique_adapters"]


class LoraAdapterConfig(BaseModel):
    """One LoRA adapter GGUF, loaded with its model (llama-server's `--lora FILE` /
    `--lora-scaled FILE SCALE`); requests name it by `id`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._:-]+$")
    path: str = Field(min_length=1, description="The adapter GGUF (made for this very base model).")
    scale: float = Field(default=1.0, description="Its default scale: 0 = off, 1 = as trained.")

    @field_validator("scale")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("a LoRA scale must be a finite number")
        return value


def unique_adapters(adapters: tuple[LoraAdapterConfig, ...]) -> tuple[LoraAdapterConfig, ...]:
    """The adapters, refused if two share an id (a request could not tell them apart)."""
    ids = [adapter.id for adapter in adapters]
    if len(ids) != len(set(ids)):
        raise ValueError(f"LoRA adapter ids must be unique: {ids}")
    return adapters


LoraAdapters = Annotated[tuple[LoraAdapterConfig, ...], AfterValidator(unique_adapters)]
"""`ModelConfig.lora`'s type."""
