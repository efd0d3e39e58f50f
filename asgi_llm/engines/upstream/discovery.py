"""Serving every model an upstream lists (`discover = true`): one model entry per name its
`GET /models` gives, the replicas, key and timeouts shared."""

from __future__ import annotations

import os
from collections.abc import Mapping

import httpx

from ...config import ModelConfig, Settings
from ...core.errors import BadGateway, LLMError, ModelNotReady, Unavailable
from .wire import UpstreamModel, model_list

__all__ = ["discover", "discover_settings", "list_models"]


async def list_models(base_url: str, *, api_key: str | None = None, timeout: float = 10.0) -> list[UpstreamModel]:
    """The models an upstream lists at `GET {base_url}/models`."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(headers=headers, timeout=timeout, trust_env=False) as client:
        try:
            response = await client.get(base_url.rstrip("/") + "/models")
        except httpx.HTTPError:
            raise Unavailable("The upstream server cannot be reached to list its models.") from None
    if response.status_code != 200:
        raise BadGateway(f"The upstream server answered {response.status_code} when asked for its models.")
    return model_list(response.json())


async def discover(config: ModelConfig, *, environ: Mapping[str, str] | None = None) -> list[ModelConfig]:
    """One model per model the upstream lists, for a config with `discover = true`: the id is
    `prefix` + the upstream's name, every other setting (replicas, key, timeouts) shared. The first
    replica that answers is asked. A config without `discover` comes back as it is."""
    if not config.is_upstream or not config.discover:
        return [config]
    env = os.environ if environ is None else environ
    key = env.get(config.api_key_env) if config.api_key_env else None
    last: LLMError = ModelNotReady("The upstream lists no models.")
    for url in config.upstream_urls:
        try:
            models = await list_models(url, api_key=key, timeout=config.connect_timeout * 2)
        except LLMError as error:
            last = error
            continue
        return [_discovered(config, model) for model in models]
    raise last


def _discovered(config: ModelConfig, model: UpstreamModel) -> ModelConfig:
    data = config.model_dump()
    data.update(id=config.prefix + model.id, upstream_model=model.id, aliases=(), discover=False, prefix="")
    if model.context_length:
        data["n_ctx"] = model.context_length
    return ModelConfig.model_validate(data)


async def discover_settings(settings: Settings, *, environ: Mapping[str, str] | None = None) -> Settings:
    """`settings` with each `discover = true` model replaced by the models its upstream lists.
    The pool runs it at every start (the app's lifespan); `asgi-llm serve` also runs it first, to
    exit with a clear message when the upstream can't be asked."""
    if not any(m.is_upstream and m.discover for m in settings.models):
        return settings
    models = [found for config in settings.models for found in await discover(config, environ=environ)]
    return Settings.model_validate({**settings.model_dump(), "models": [m.model_dump() for m in models]})
