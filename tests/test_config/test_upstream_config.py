"""Upstream models in the configuration: one setting flips a model between local and remote, the
pool picks the engine from it, and the upstream's key shows nowhere."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from asgi_llm import ModelConfig, ModelPool, Settings
from asgi_llm.cli.serve import build_parser, settings_from_args
from asgi_llm.core import Unavailable
from asgi_llm.engines.upstream.discovery import _discovered
from asgi_llm.engines.upstream.engine import UpstreamEngine
from asgi_llm.engines.upstream.wire import UpstreamModel

TOML = """
[[models]]
id = "chat"
path = "/models/chat.gguf"
base_url = "http://gpu-box:8080/v1"
backend = "local"
api_key_env = "CHAT_UPSTREAM_KEY"
"""


def test_base_url_makes_a_model_upstream_and_backend_flips_it(tmp_path: Path) -> None:
    assert not ModelConfig().is_upstream
    remote = ModelConfig(base_url="http://a:8080/v1/, http://b:8080/v1")
    assert remote.is_upstream and remote.upstream_urls == ("http://a:8080/v1", "http://b:8080/v1")
    assert ModelConfig(base_urls="http://a/v1,http://b/v1").upstream_urls == ("http://a/v1", "http://b/v1")  # type: ignore[arg-type]
    file = tmp_path / "asgi-llm.toml"
    file.write_text(TOML)
    local = Settings.from_env({"ASGI_LLM_CONFIG": str(file)}).models[0]
    flipped = Settings.from_env({"ASGI_LLM_CONFIG": str(file), "ASGI_LLM_BACKEND": "upstream"}).models[0]
    assert not local.is_upstream and flipped.is_upstream
    assert flipped.path == local.path and flipped.id == local.id == "chat"


def test_the_base_url_variable_alone_sends_the_default_model_upstream() -> None:
    settings = Settings.from_env({"ASGI_LLM_BASE_URL": "http://gpu-box:8080/v1", "ASGI_LLM_UPSTREAM_MODEL": "qwen"})
    model = settings.models[0]
    assert model.is_upstream and model.upstream_model == "qwen" and model.aliases == ("default",)
    args = build_parser().parse_args(["serve"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ASGI_LLM_BASE_URL", "http://gpu-box:8080/v1")
        assert settings_from_args(args).models[0].is_upstream


def test_upstream_backend_without_a_url_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="needs a base_url"):
        ModelConfig(backend="upstream")


def test_the_pool_picks_the_engine_by_the_config() -> None:
    pool = ModelPool(Settings(models=(ModelConfig(id="r", base_url="http://127.0.0.1:9/v1"),)))
    engine = pool._factory(pool.settings.models[0], pool.thread)
    assert isinstance(engine, UpstreamEngine)
    assert pool.catalog()[0].size == 0  # no file behind it


@pytest.mark.anyio
async def test_an_unreachable_upstream_loads_and_says_so_without_its_key_or_address() -> None:
    config = ModelConfig(id="r", base_url="http://user:pw@127.0.0.1:9/v1", api_key_env="K", connect_timeout=1)
    engine = UpstreamEngine(config, environ={"K": "sk-never-shown"})
    await engine.load()
    try:
        described = engine.describe()
        assert described["replicas"][0]["healthy"] is False
        assert (
            "sk-never-shown" not in repr(described)
            and "127.0.0.1" not in repr(described)
            and "pw" not in repr(described)
        )
        assert "sk-never-shown" not in repr(engine.__dict__)  # held as a SecretStr
    finally:
        await engine.close()


def test_discovered_models_take_the_prefix_and_the_upstreams_context() -> None:
    config = ModelConfig(id="ignored", base_url="http://a/v1", discover=True, prefix="gpu/", api_key_env="K")
    found = _discovered(config, UpstreamModel("llama3:8b", 8192))
    assert (found.id, found.upstream_model, found.n_ctx, found.discover) == ("gpu/llama3:8b", "llama3:8b", 8192, False)
    assert found.api_key_env == "K" and found.upstream_urls == ("http://a/v1",)


def test_the_readme_upstream_example_is_valid_settings() -> None:
    import re
    import tomllib

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    match = re.search(r"<!-- readme-test: upstream-toml -->\n```toml\n(.*?)```", readme, re.DOTALL)
    assert match
    chat, cloud = Settings.model_validate(tomllib.loads(match.group(1))).models
    assert chat.is_upstream and len(chat.upstream_urls) == 2 and chat.path
    assert cloud.is_upstream and cloud.discover and cloud.prefix == "cloud/"


@pytest.mark.anyio
async def test_the_pool_asks_for_the_upstreams_models_at_every_start(monkeypatch: pytest.MonkeyPatch) -> None:
    lists = [["a"], ["a", "b"]]

    async def listed(url: str, **_: object) -> list[UpstreamModel]:
        return [UpstreamModel(name, None) for name in lists.pop(0)]

    monkeypatch.setattr("asgi_llm.engines.upstream.discovery.list_models", listed)
    config = ModelConfig(id="up", base_url="http://up/v1", discover=True, prefix="up/", load="lazy")
    pool = ModelPool(Settings(models=(config,)))
    await pool.start()
    first = [card.id for card in pool.catalog()]
    await pool.stop()
    await pool.start()
    second = [card.id for card in pool.catalog()]
    await pool.stop()
    assert first == ["up/a"] and second == ["up/a", "up/b"]
    assert pool.resolve("up/b") == "up/b" and pool.resolve("up") is None


@pytest.mark.anyio
async def test_an_upstream_that_cannot_list_its_models_fails_the_start() -> None:
    config = ModelConfig(id="up", base_url="http://127.0.0.1:9/v1", discover=True, connect_timeout=0.5)
    pool = ModelPool(Settings(models=(config,)))
    with pytest.raises(Unavailable):
        await pool.start()
    assert not pool.started and not pool.thread.alive
