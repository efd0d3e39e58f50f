"""One served model's options (`ModelConfig`): every llama.cpp load option a GPU user needs, an
upstream server's, and how requests wait. Checked here, at the trust boundary."""

from __future__ import annotations

import importlib.util
import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .lora import LoraAdapters
from .sources import DEFAULT_MODEL_ID, default_model_path, default_threads, usable_cores

__all__ = ["LLAMA_MAX_SEQ", "KVCacheType", "ModelConfig"]

LLAMA_MAX_SEQ = 256
"""The most sequences one llama.cpp context holds (`LLAMA_MAX_SEQ` in its src/llama-cparams.h,
not exported by llama.h nor llama-cpp-python): a context of 257 fails to be made."""

KVCacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


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
    n_threads: int | None = Field(
        default=None,
        ge=1,
        description="Default: the cores this process may use, less one unless OMP_WAIT_POLICY=passive; see README.",
    )
    n_threads_batch: int | None = Field(default=None, ge=1)
    adapt_threads: bool = Field(
        default=True,
        description="Decode on fewer threads while other work crowds the cores, all again once they are free (Linux).",
    )
    n_gpu_layers: int = Field(default=0, ge=-1, description="-1 offloads every layer.")
    main_gpu: int = Field(default=0, ge=0)
    split_mode: Literal["none", "layer", "row"] = "layer"
    tensor_split: tuple[float, ...] | None = None
    flash_attn: bool | Literal["auto"] = Field(
        default="auto", description="`auto` (llama.cpp's default): on wherever the backend has the kernels."
    )
    offload_kqv: bool = True
    type_k: KVCacheType | None = None
    type_v: KVCacheType | None = None
    seed: int | None = None
    use_mmap: bool = True
    use_mlock: bool = False
    embeddings: bool = Field(default=False, description="Also serve embeddings (loads an embedding context).")
    embedding_dimensions: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        default=(), description="Sizes a Matryoshka model's embeddings shorten to (`dimensions`); needs `embeddings`."
    )
    pooling: Literal["mean", "cls", "last"] = "mean"
    rerank: bool = Field(default=False, description="A reranker GGUF: /rerank uses its classifier (rank pooling).")
    lora: LoraAdapters = Field(default=(), description="LoRA adapters loaded with it: `[{id, path, scale}]`.")
    mmproj: str | None = Field(
        default=None,
        description="A vision model's projector GGUF (llama.cpp's `--mmproj`): with it, chat messages may carry images.",
    )
    chat_template: str | None = Field(default=None, description="Overrides the template stored in the GGUF.")
    reasoning: Literal["auto", "on", "off"] = Field(
        default="auto", description="Whether it reasons when a request does not say: auto = as its template does."
    )
    parallel: int = Field(
        default=4,
        ge=1,
        description=f"Choices decoded together; each holds n_ctx positions of KV cache. At most {LLAMA_MAX_SEQ} "
        "(llama.cpp's LLAMA_MAX_SEQ); with a memory budget, as many as their KV cache fits.",
    )
    kv_unified: bool = Field(
        default=False,
        description="One KV buffer for all sequences (llama.cpp's --kv-unified) instead of a stream each; see README.",
    )
    prefill_chunk: int = Field(
        default=128, ge=1, description="Prompt tokens read per step while other choices stream (keeps them moving)."
    )
    prompt_cache_mib: int = Field(
        default=256,
        ge=0,
        description="Host memory (MiB) for sequence caches set aside when their sequence goes to another prompt; 0 = none.",
    )
    prompt_cache_dir: str | None = Field(
        default=None,
        description="A directory where prompts that took long to read are saved, kept across restarts, unloads and "
        "reloads (a subdirectory per model file and context); None = none.",
    )
    prompt_cache_disk_mib: int = Field(
        default=4096, ge=1, description="Disk (MiB) the saved prompts may take; the least recently used go first."
    )
    speculative: Literal["off", "ngram", "draft"] = Field(
        default="off",
        description="Speculative decoding: ngram = each sequence drafts from its prompt and output so far (prompt "
        "lookup); draft = `draft_model` guesses for every sequence; either way verified in the step's one decode, "
        "and output is unchanged. What a grammar forces next is drafted always. See docs/performance.md.",
    )
    draft_model: str | None = Field(
        default=None,
        description='With speculative = "draft": a smaller GGUF with the same vocabulary (checked at load), '
        "loaded beside the model with as many sequences and positions; its memory counts in the model's.",
    )
    speculative_draft: int = Field(
        default=8, ge=1, le=64, description="The most tokens a sequence drafts a step (by lookup or draft model)."
    )
    speculative_ngram: int = Field(
        default=4, ge=2, le=16, description="The longest n-gram a draft follows (down to bigrams)."
    )
    speculative_memory: int = Field(
        default=65536,
        ge=0,
        description='With speculative = "ngram": runs of 12 tokens of past replies remembered across requests '
        "(the token after each, about 100 bytes a run), drafted where a sequence's context is one of them; "
        "0 = none.",
    )
    speculative_step_tokens: int = Field(
        default=16,
        ge=1,
        description="Drafting stops where a step would decode more tokens than this (running sequences count "
        "first): past it, a step costs per token and drafts would slow a busy server.",
    )
    max_queue: int = Field(default=64, ge=0, description="Requests that may wait for a free sequence; beyond: 503.")
    queue_timeout: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a request may wait for the model to load (at startup or on demand), and then for a "
        "free sequence; beyond either: 503 with Retry-After.",
    )
    stall_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Seconds queued or running work may go without progress before the model counts as stalled: "
        "/health turns 503, its requests get 503 and it restarts.",
    )
    keep_alive: float | None = Field(default=None, description="Seconds idle before unloading; None = never.")
    pin: bool = Field(default=False, description="Never unloaded to make room for another model, nor when idle.")
    # An upstream model: an OpenAI-compatible server (llama.cpp's server, vLLM, a cloud, another asgi-llm).
    backend: Literal["local", "upstream"] | None = Field(
        default=None,
        description="`local` (the GGUF `path`) or `upstream` (`base_url`); None = upstream iff a base_url is set.",
    )
    base_url: str | None = Field(
        default=None, description="The upstream's OpenAI base URL (`http://host:8080/v1`); commas separate replicas."
    )
    base_urls: tuple[str, ...] = Field(default=(), description="Replicas of one upstream model, load-balanced.")
    api_key_env: str | None = Field(
        default=None, description="The environment variable holding the upstream's API key."
    )
    upstream_model: str | None = Field(default=None, description="The model name the upstream knows; default: `id`.")
    discover: bool = Field(
        default=False, description="Serve every model the upstream lists (`id` becomes `prefix` + its name)."
    )
    prefix: str = Field(default="", description="Put before discovered model names.")
    connect_timeout: float = Field(default=5.0, gt=0, description="Seconds to connect to the upstream.")
    first_byte_timeout: float = Field(
        default=120.0, gt=0, description="Seconds until the upstream's first streamed event."
    )
    idle_timeout: float = Field(default=60.0, gt=0, description="Seconds the upstream may stay silent mid-stream.")
    health_interval: float = Field(
        default=10.0, gt=0, description="Seconds between health checks of each upstream replica."
    )
    fallbacks: tuple[str, ...] = Field(
        default=(), description="Models (ids or aliases) that take a request this one fails before its first byte."
    )

    @field_validator("parallel")
    @classmethod
    def _within_llama_cpp(cls, value: int) -> int:
        if value > LLAMA_MAX_SEQ:
            raise ValueError(
                f"parallel = {value} is more sequences than llama.cpp's limit of {LLAMA_MAX_SEQ} per context (LLAMA_MAX_SEQ)"
            )
        return value

    @field_validator("aliases", mode="before")
    @classmethod
    def _one_alias(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("base_urls", mode="before")
    @classmethod
    def _comma_urls(cls, value: Any) -> Any:
        return tuple(u.strip() for u in value.split(",") if u.strip()) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if self.backend == "upstream" and not self.upstream_urls:
            raise ValueError(f"model {self.id!r}: backend 'upstream' needs a base_url")
        if self.is_upstream and importlib.util.find_spec("httpx") is None:  # the `upstream` extra
            raise ValueError(
                f"model {self.id!r} is served by an upstream (base_url), which needs httpx: "
                "pip install 'asgi-llm[upstream]'"
            )
        if self.mmproj is not None and self.is_upstream:
            raise ValueError(f"model {self.id!r}: mmproj is for a local model (an upstream reads images itself)")
        if (self.speculative == "draft") != (self.draft_model is not None):
            raise ValueError(f'model {self.id!r}: speculative = "draft" and draft_model go together')
        if self.draft_model is not None and self.is_upstream:
            raise ValueError(f"model {self.id!r}: draft_model is for a local model")
        self._speculative_settings_read()
        if self.embedding_dimensions and not self.embeddings:
            raise ValueError(f"model {self.id!r}: embedding_dimensions needs embeddings = true")
        return self

    def _speculative_settings_read(self) -> None:
        """A drafting setting given where `speculative` never reads it would change nothing: refused,
        naming the mode that reads it (a default is no setting)."""
        settings = (
            ("speculative_draft", self.speculative_draft, ("ngram", "draft")),
            ("speculative_ngram", self.speculative_ngram, ("ngram",)),
            ("speculative_memory", self.speculative_memory, ("ngram",)),
        )
        for name, value, modes in settings:
            if self.speculative not in modes and value != type(self).model_fields[name].default:
                wanted = " or ".join(f'"{mode}"' for mode in modes)
                raise ValueError(
                    f'model {self.id!r}: {name} is read only with speculative = {wanted}, and it is "{self.speculative}"'
                )

    @property
    def is_upstream(self) -> bool:
        """Whether an upstream server runs this model (else the local GGUF at `path`)."""
        return self.backend == "upstream" or (self.backend is None and bool(self.upstream_urls))

    @property
    def upstream_urls(self) -> tuple[str, ...]:
        """Every replica's base URL, without a trailing slash."""
        urls = (*self.base_urls, *(self.base_url.split(",") if self.base_url else ()))
        return tuple(dict.fromkeys(u.strip().rstrip("/") for u in urls if u.strip()))

    def resolved_path(self) -> str:
        return self.path if self.path is not None else default_model_path()

    @property
    def threads(self) -> int:
        return self.n_threads or default_threads(usable_cores(), os.environ.get("OMP_WAIT_POLICY"))

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)
