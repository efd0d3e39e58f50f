"""Fallback models: the chain is checked when the settings are read, and a model that fails before
its first event hands the same request to the next one, which the response and the usage record
name; a failure after the first event ends the stream with its error event and no retry.

Scripted engines here; tests/test_e2e/test_upstream/test_fallback_models.py runs a real upstream
and the packaged model."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from pydantic import ValidationError

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.config import fallback_chain
from asgi_llm.core import (
    BadGateway,
    EngineEvent,
    GatewayTimeout,
    GenerationRequest,
    InvalidRequest,
    LLMError,
    RateLimited,
    TextDelta,
    Unavailable,
)
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio


def model(name: str, *fallbacks: str, **options: Any) -> ModelConfig:
    return ModelConfig(id=name, path="unused.gguf", fallbacks=fallbacks, **options)


# -- the chain, as the settings read it -------------------------------------------------------


def test_a_chain_is_followed_depth_first_each_model_once() -> None:
    chains = {"a": ("b", "c"), "b": ("c", "d"), "c": (), "d": ()}
    ids = {name: name for name in "abcd"} | {"dee": "d"}
    assert fallback_chain("a", chains, ids) == ["a", "b", "c", "d"]
    assert fallback_chain("c", chains, ids) == ["c"]
    assert fallback_chain("x", {"x": ("dee",)}, ids | {"x": "x"}) == ["x", "d"]  # an alias names its model


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ((model("a", "b"), model("b", "a")), "model fallbacks loop: a -> b -> a"),
        ((model("a", "a"),), "model fallbacks loop: a -> a"),
        ((model("a", "b"), model("b", "c"), model("c", "alias-of-a"), model("z", aliases=("x",))), "loop"),
        ((model("a", "nowhere"),), "model 'a' falls back to 'nowhere', which no model is named"),
    ],
)
def test_a_loop_or_an_unknown_name_is_refused_when_the_settings_are_read(
    models: tuple[ModelConfig, ...], message: str
) -> None:
    if any("alias-of-a" in m.fallbacks for m in models):
        models = (model("a", "b", aliases=("alias-of-a",)), *models[1:])
    with pytest.raises(ValidationError, match=message):
        Settings(models=models)


def test_a_settings_file_names_fallbacks_by_id_or_alias(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text(
        '[[models]]\nid = "remote"\nbase_url = "http://upstream.invalid/v1"\nfallbacks = ["small"]\n\n'
        '[[models]]\nid = "local"\naliases = ["small"]\n'
    )
    settings = Settings.from_file(path)
    assert settings.models[0].fallbacks == ("small",)
    assert ModelPool(settings).chain("remote") == ["remote", "local"]


# -- serving ---------------------------------------------------------------------------------


class Scripted(FakeEngine):
    """Fails with `error` before any event, or (with `after`) after that many text pieces."""

    calls: dict[str, int]

    def __init__(self, config: ModelConfig, error: LLMError | None, after: int | None = None) -> None:
        super().__init__(config, pieces=(f"from {config.id}", " done"))
        self.fail, self.after = error, after

    async def _events(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        self.calls[self.config.id] = self.calls.get(self.config.id, 0) + 1
        if self.fail is not None and self.after is None:
            raise self.fail
        pieces = 0
        async for event in super()._events(request):
            if self.fail is not None and isinstance(event, TextDelta) and pieces == self.after:
                raise self.fail
            pieces += isinstance(event, TextDelta)
            yield event


class Served:
    def __init__(self, failures: dict[str, LLMError], usage: Path, after: int | None = None) -> None:
        self.calls: dict[str, int] = {}
        self.failures, self.usage, self.after = failures, usage, after

    def engine(self, config: ModelConfig, thread: object) -> Scripted:
        engine = Scripted(config, self.failures.get(config.id), self.after if config.id in self.failures else None)
        engine.calls = self.calls
        return engine

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.usage.read_text().splitlines()]


MODELS = (
    model("remote", "backup", "local", aliases=("default",)),
    model("backup"),
    model("local", n_ctx=4096),
    model("small-context", n_ctx=8),
    model("tight", "small-context", "local"),
)


async def serve(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(models=MODELS, usage_jsonl=str(served.usage))
    app = LLMApp(pool=ModelPool(settings, engine_factory=served.engine), adapters=(OPENAI, ANTHROPIC, OLLAMA))
    async with LifespanManager(app), httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
        yield http


@pytest.fixture
def usage(tmp_path: Path) -> Path:
    return tmp_path / "usage.jsonl"


CHAT = {"model": "default", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    "error",
    [
        Unavailable("The upstream server cannot be reached; retry shortly."),
        BadGateway("The upstream server answered 500."),
        GatewayTimeout("The upstream server did not answer in time."),
        RateLimited("Rate limit reached upstream."),
    ],
    ids=["unreachable", "5xx", "timeout", "429"],
)
async def test_a_model_that_fails_before_its_first_event_is_served_by_the_next(usage: Path, error: LLMError) -> None:
    served = Served({"remote": error}, usage)
    async for http in serve(served):
        reply = await http.post("/chat/completions", json=CHAT)
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == "backup"
        assert reply.json()["choices"][0]["message"]["content"] == "from backup done"
        assert reply.headers["x-asgi-llm-fallback"] == "remote"
    assert served.calls == {"remote": 1, "backup": 1}
    (record,) = served.records()
    assert (record["model"], record["status"], record["completion_tokens"]) == ("backup", 200, 2)


async def test_each_model_of_the_chain_in_turn_and_the_last_error_when_all_fail(usage: Path) -> None:
    failures: dict[str, LLMError] = {"remote": Unavailable("down"), "backup": BadGateway("broken")}
    served = Served(failures, usage)
    async for http in serve(served):
        reply = await http.post("/chat/completions", json={**CHAT, "stream": True})
        assert reply.headers["x-asgi-llm-fallback"] == "remote, backup"
        chunks = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
        assert {chunk["model"] for chunk in chunks} == {"local"}
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "from local done"
        served.failures["local"] = Unavailable("also down")
    async for http in serve(served):
        refused = await http.post("/messages", json={**CHAT, "max_tokens": 5})
        assert refused.status_code == 503 and "x-asgi-llm-fallback" not in refused.headers
        assert refused.json() == {"type": "error", "error": {"type": "overloaded_error", "message": "also down"}} | {
            "request_id": refused.json()["request_id"]
        }
    assert served.calls == {"remote": 2, "backup": 2, "local": 2}


async def test_the_requests_own_fault_is_never_retried(usage: Path) -> None:
    served = Served({"remote": InvalidRequest("'temperature' is out of range.", param="temperature")}, usage)
    async for http in serve(served):
        reply = await http.post("/chat/completions", json=CHAT)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "temperature"
        assert "x-asgi-llm-fallback" not in reply.headers
    assert served.calls == {"remote": 1}


async def test_a_fallback_too_small_for_the_request_is_passed_over(usage: Path) -> None:
    served = Served({"tight": Unavailable("down")}, usage)
    async for http in serve(served):
        asked = {**CHAT, "model": "tight", "stream": False, "options": {"num_ctx": 100}}
        reply = await http.post("/api/chat", json=asked)  # Ollama's num_ctx: the context it needs
        assert reply.status_code == 200 and reply.json()["model"] == "local"
        assert reply.headers["x-asgi-llm-fallback"] == "tight"  # small-context could not take it: not a failure
    assert served.calls == {"tight": 1, "local": 1}


async def test_a_failure_after_the_first_event_ends_the_stream_with_its_error_event_and_no_retry(usage: Path) -> None:
    served = Served({"remote": BadGateway("The upstream server closed the connection.")}, usage, after=1)
    async for http in serve(served):
        reply = await http.post("/chat/completions", json={**CHAT, "stream": True})
        assert reply.status_code == 200 and "x-asgi-llm-fallback" not in reply.headers
        events = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
        assert json.loads(events[0])["model"] == "remote"
        assert json.loads(events[-1])["error"]["message"] == "The upstream server closed the connection."
        assert "from backup" not in reply.text
        anthropic = await http.post("/messages", json={**CHAT, "max_tokens": 5, "stream": True})
        last = anthropic.text.rstrip().split("\n\n")[-1].split("\n")
        assert last[0] == "event: error" and "from backup" not in anthropic.text
        error = json.loads(last[1].removeprefix("data: "))["error"]
        assert error == {"type": "api_error", "message": "The upstream server closed the connection."}
    assert served.calls == {"remote": 2}
    assert [(r["model"], r["status"]) for r in served.records()] == [("remote", 502), ("remote", 502)]
