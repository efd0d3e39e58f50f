"""API keys given in the settings, and the limits of a key (`ApiKeyConfig`, `LimitsConfig`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from .sources import KEY_NAME

__all__ = ["ApiKeyConfig", "LimitsConfig"]


class LimitsConfig(BaseModel):
    """Per-key limits (None = unlimited). Budgets count prompt + completion tokens per UTC day /
    month / in total, kept in the usage ledger when one is configured."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    max_concurrent: int | None = Field(default=None, ge=1)
    tokens_per_day: int | None = Field(default=None, ge=1)
    tokens_per_month: int | None = Field(default=None, ge=1)
    tokens_total: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1, description="Default and ceiling of a request's max_tokens.")


class ApiKeyConfig(BaseModel):
    """One API key. Logs, usage records and metrics show its `name`, never the key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=f"^{KEY_NAME}$")
    key: SecretStr = Field(min_length=1)
    models: tuple[str, ...] | None = Field(default=None, description="Models (ids or aliases) it may use; None = all.")
    protocols: tuple[str, ...] | None = Field(default=None, description="`openai`, `anthropic`, `ollama`; None = all.")
    limits: LimitsConfig | None = Field(default=None, description="Replaces the settings' default limits for this key.")
    operator: bool = Field(default=False, description="May read /metrics (every key's usage); others: inference only.")
