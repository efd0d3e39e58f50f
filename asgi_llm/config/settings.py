"""`Settings`: everything an app serves with, from code, a TOML/YAML/JSON file, or the environment.

The options of the app as a whole and the checks between its models; one model's options are
`model.py`'s, a key's `keys.py`'s. Reading the outside world is `sources.py`'s.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from .chains import fallback_chain
from .keys import ApiKeyConfig, LimitsConfig
from .model import ModelConfig
from .sources import (
    env_model_overrides,
    gguf_files,
    keys_file_entries,
    parse_key_entries,
    parse_size,
    read_settings_file,
)

__all__ = ["Settings"]


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    models: tuple[ModelConfig, ...] = (ModelConfig(embeddings=True, aliases=("default",)),)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    retry_after_seconds: int = Field(default=1, ge=0)
    models_dir: str | None = Field(
        default=None, description="Serve every `*.gguf` here by file stem, loaded on first use; `models` entries of that id override its options."
    )
    max_loaded_models: int | None = Field(default=None, ge=1, description="Local models loaded at once; beyond: the least recently used idle one unloads.")
    memory_budget: int | None = Field(
        default=None, ge=1, description="Bytes (or `8GiB`) of RAM the estimated costs of loaded local models may add up to."
    )
    gpu_memory_budget: tuple[int, ...] | None = Field(
        default=None,
        description="Per GPU, in device order: bytes (or `24GiB`) of VRAM the estimates of offloaded layers may add up to.",
    )
    admin_api: bool = Field(default=True, description="`POST /models/load`, `/models/unload`, `GET /admin/models` for operator keys.")
    load_wait_seconds: float = Field(default=30.0, ge=0, description="How long a load waits for requests on the models it must unload; then 503.")
    max_pending: int = Field(default=256, ge=1, description="Requests held by all models at once; beyond: 503.")
    state_store: Literal["memory", "sqlite"] = Field(default="memory", description="Where stored Responses live.")
    state_path: str = Field(default="asgi-llm-state.sqlite3", description="The SQLite file, for state_store = sqlite.")
    state_max_items: int = Field(default=1000, ge=1)
    state_max_age_seconds: int = Field(default=30 * 86400, ge=1)
    api_keys: tuple[ApiKeyConfig, ...] = Field(default=(), description="With any key (or keys file), routes need one.")
    api_keys_file: str | None = Field(default=None, description="One `name=key` or bare key per line.")
    keys_db: str | None = Field(
        default=None, description="SQLite file of keys made by `asgi-llm keys`, checked on every request."
    )
    public_paths: tuple[str, ...] = Field(default=("/health",), description="Paths below the mount that need no key.")
    limits: LimitsConfig = Field(default_factory=LimitsConfig, description="Limits of every key without its own.")
    usage_ledger: str | None = Field(default=None, description="SQLite file for usage records and token budgets.")
    usage_jsonl: str | None = Field(default=None, description="Also append each usage record to this JSON Lines file.")
    usage_log: bool = Field(default=False, description="Also log each usage record (logger `asgi_llm.usage`).")
    limits_url: str | None = Field(default=None, pattern="^rediss?://", description="Redis: limits of many processes.")
    state_url: str | None = Field(default=None, pattern="^postgres(ql)?://", description="PostgreSQL: keys, usage...")
    fail_open: bool = Field(default=False, description="Serve, warning, while a shared backend is down (else 503).")
    backend_timeout: float = Field(default=2.0, gt=0, description="Seconds a call to a shared backend may take.")
    lease_seconds: float = Field(default=10.0, gt=0, description="A dead process's concurrency slots free after this.")
    trace_content: bool = Field(default=False, description="OpenTelemetry spans carry the prompt and completion text.")
    metrics_path: str | None = Field(default="/metrics", description="Prometheus metrics below the mount; None = off.")
    log_format: Literal["text", "json"] = Field(
        default="text", description="`asgi-llm serve`'s log lines: text, or one JSON object per line (--log-json)."
    )
    cors_origins: tuple[str, ...] = Field(
        default=(), description="Origins a web page may call `asgi-llm serve` from (`*`: any); a mounted app leaves CORS to its host."
    )
    image_url_hosts: tuple[str, ...] = Field(
        default=(), description="Hosts remote image URLs are fetched from (`*.example.com`: its subdomains); none by default."
    )
    image_fetch_timeout: float = Field(default=10.0, gt=0, description="Seconds fetching one remote image may take.")
    max_image_bytes: int = Field(default=20 * 1024 * 1024, ge=1, description="Bytes (or `20MiB`) of one image, decoded.")
    max_image_pixels: int = Field(default=7680 * 4320, ge=1, description="Pixels (width × height) of one image.")
    max_images: int = Field(default=16, ge=0, description="Images in one request.")
    web_ui: bool | None = Field(
        default=None, description="The chat and operator page at `/ui` below the mount; None = on for `asgi-llm serve` only."
    )

    @field_validator("memory_budget", "max_image_bytes", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return parse_size(value) if isinstance(value, str) else value

    @field_validator("gpu_memory_budget", mode="before")
    @classmethod
    def _sizes(cls, value: Any) -> Any:
        if isinstance(value, str):  # one string for them all: `24GiB,24GiB`
            value = [part for part in value.split(",") if part.strip()]
        if isinstance(value, (list, tuple)):
            return tuple(parse_size(v) if isinstance(v, str) else v for v in value)
        return value

    @field_validator("gpu_memory_budget")
    @classmethod
    def _positive(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is not None and (not value or any(v < 1 for v in value)):
            raise ValueError("gpu_memory_budget needs one positive size per GPU")
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> Settings:
        seen: set[str] = set()
        for model in self.models:
            for name in model.names:
                if name in seen:
                    raise ValueError(f"model name or alias {name!r} is used twice")
                seen.add(name)
        if self.gpu_memory_budget is not None:
            for model in self.models:
                offloads = model.n_gpu_layers != 0 and not model.is_upstream
                if offloads and max(model.main_gpu + 1, len(model.tensor_split or ())) > len(self.gpu_memory_budget):
                    raise ValueError(
                        f"model {model.id!r} uses a GPU that gpu_memory_budget has no entry for "
                        f"({len(self.gpu_memory_budget)} given)"
                    )
        ids, chains = {n: m.id for m in self.models for n in m.names}, {m.id: m.fallbacks for m in self.models}
        for model in self.models if not any(m.discover for m in self.models) else ():  # discovered names come later
            fallback_chain(model.id, chains, ids)
        key_names = [key.name for key in self.api_keys]
        if len(key_names) != len(set(key_names)):
            raise ValueError("API key names must be unique")
        return self

    def with_models_dir(self) -> Settings:
        """`models` with one entry per GGUF in `models_dir` (read now): an entry of the file's
        stem without a `path` is that file's options (loaded on first use unless it says
        `load`); one with a `path` wins over the file. Without `models` set, the files replace
        the default model."""
        if self.models_dir is None:
            return self
        files = gguf_files(self.models_dir)
        explicit = "models" in self.model_fields_set
        models: list[ModelConfig] = []
        for model in self.models if explicit else ():
            file = files.pop(model.id, None) if model.path is None and not model.is_upstream else None
            if file is not None:
                lazy = {} if "load" in model.model_fields_set else {"load": "lazy"}
                model = model.model_copy(update={"path": str(file), **lazy})
            models.append(model)
        taken = {name for model in models for name in model.names}
        models += [ModelConfig(id=stem, path=str(f), load="lazy") for stem, f in files.items() if stem not in taken]
        return self.model_copy(update={"models": tuple(models)})

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys) or self.api_keys_file is not None or self.keys_db is not None

    def all_api_keys(self) -> tuple[ApiKeyConfig, ...]:
        """`api_keys` and those in `api_keys_file` (read now: one `name=key` or bare key per
        line; blank lines and `#` comments skipped)."""
        if self.api_keys_file is None:
            return self.api_keys
        entries = keys_file_entries(self.api_keys_file)
        return (*self.api_keys, *(ApiKeyConfig(name=n, key=SecretStr(k)) for n, k in entries))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Settings:
        """Read `.toml`, `.yaml`/`.yml` or `.json`."""
        return cls.model_validate(read_settings_file(path))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """`ASGI_LLM_CONFIG` names a file; `ASGI_LLM_MODEL` and friends override the single-model default."""
        env = os.environ if environ is None else environ
        settings = cls.from_file(env["ASGI_LLM_CONFIG"]) if env.get("ASGI_LLM_CONFIG") else cls()
        settings = settings.with_env_keys(env)
        overrides = env_model_overrides(env)
        if not overrides:
            return settings
        first = settings.models[0].model_dump(exclude_unset=False)
        first.update(overrides)
        return settings.model_copy(update={"models": (ModelConfig.model_validate(first), *settings.models[1:])})

    def with_keys(self, entries: Iterable[str]) -> Settings:
        """These `name=key` or bare-key entries added to `api_keys` (bare keys are named
        `key-` and 8 hex digits of their SHA-256)."""
        added = tuple(ApiKeyConfig(name=name, key=SecretStr(key)) for name, key in parse_key_entries(entries))
        return self.model_copy(update={"api_keys": (*self.api_keys, *added)}) if added else self

    def with_env_keys(self, environ: Mapping[str, str] | None = None) -> Settings:
        """`ASGI_LLM_API_KEYS` (comma-separated entries) and `ASGI_LLM_API_KEYS_FILE` added;
        `ASGI_LLM_LIMITS_URL` and `ASGI_LLM_STATE_URL` override `limits_url` and `state_url`."""
        env = os.environ if environ is None else environ
        names = {"limits_url": "ASGI_LLM_LIMITS_URL", "state_url": "ASGI_LLM_STATE_URL"}
        urls = {name: env[variable] for name, variable in names.items() if env.get(variable)}
        settings = self.model_validate({**self.model_dump(), **urls}) if urls else self
        settings = settings.with_keys(env.get("ASGI_LLM_API_KEYS", "").split(","))
        if env.get("ASGI_LLM_API_KEYS_FILE"):
            settings = settings.model_copy(update={"api_keys_file": env["ASGI_LLM_API_KEYS_FILE"]})
        return settings
