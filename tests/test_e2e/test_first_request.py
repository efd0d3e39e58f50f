"""The first request after startup, with the real default model, in the test clients users write
their tests with (issue 39): each host's lifespan begins loading the model and its first request
comes at once. It waits for the load and is answered; it used to get a 503 "still loading", and
a background Response made then ended `failed`. /health says `loading` until the model is ready.

(Django's async test client, which reaches the models through a view: tests/test_contrib/
test_django_first_request.py.)"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi.testclient import TestClient as FastAPITestClient
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient as StarletteTestClient

from asgi_llm import LLMApp, ModelConfig, Settings

from .test_readme import run_snippet, snippet

pytestmark = pytest.mark.model
CHAT = {"model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


def test_the_readmes_fastapi_app_answers_its_first_request_under_fastapis_test_client() -> None:
    namespace = run_snippet("fastapi")
    with FastAPITestClient(namespace["app"]) as client:
        reply = client.post("/v1/chat/completions", json=CHAT)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] <= 4
        assert client.get("/v1/health").json()["status"] == "ok"


def test_the_manuals_test_client_snippet_runs_against_the_readmes_fastapi_app() -> None:
    namespace = run_snippet("fastapi")
    exec(compile(snippet("fastapi-testclient"), "snippet", "exec"), namespace)  # noqa: S102 (the page's own code)
    assert namespace["reply"].json()["choices"][0]["message"]["role"] == "assistant"


def test_a_background_response_made_first_under_starlettes_test_client_completes(tmp_path: Path) -> None:
    settings = Settings(
        models=[ModelConfig(aliases=["default"], n_ctx=512, n_threads=1)],
        state_store="sqlite",
        state_path=str(tmp_path / "state.sqlite3"),
    )
    llm = LLMApp(settings)
    app = Starlette(routes=[Mount("/v1", app=llm)], lifespan=llm.lifespan)
    body = {"model": "default", "input": "Hi", "max_output_tokens": 4, "background": True}
    with StarletteTestClient(app) as client:
        queued = client.post("/v1/responses", json=body)  # the test client returns once its run has ended
        assert queued.status_code == 200 and queued.json()["status"] == "queued", queued.text
        stored = client.get(f"/v1/responses/{queued.json()['id']}").json()
        assert stored["status"] in ("completed", "incomplete"), stored.get("error")
        assert stored["usage"]["output_tokens"] <= 4
        chat = client.post("/v1/chat/completions", json=CHAT)
        assert chat.status_code == 200, chat.text


@pytest.mark.anyio
async def test_the_readmes_starlette_app_answers_its_first_request_under_asgi_lifespan() -> None:
    namespace = run_snippet("starlette")
    app = namespace["app"]
    async with (
        LifespanManager(app, startup_timeout=60),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host") as http,
    ):
        health = await http.get("/v1/health")  # the load has begun; a load balancer waits
        reply = await http.post("/v1/chat/completions", json=CHAT)
        embedded = await http.post("/v1/embeddings", json={"model": "default", "input": "hi"})
        ready = await http.get("/v1/health")
    assert health.status_code == 503 and health.json()["status"] == "loading"
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] <= 4
    assert embedded.status_code == 200 and len(embedded.json()["data"][0]["embedding"]) == 576
    assert ready.status_code == 200 and ready.json()["status"] == "ok"
