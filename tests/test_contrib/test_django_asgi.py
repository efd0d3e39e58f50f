"""The Django dispatcher: which requests reach asgi_llm, what scope they see, and lifespan."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from asgi_llm import LLMApp, ModelPool
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.openai import OPENAI

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("django_setup")]


class DjangoStandIn:
    """Answers every request with "django" and remembers the (path, root_path) it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.seen.append((scope["path"], scope.get("root_path", "")))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"django"})


def dispatcher(pool: ModelPool, django: Any = None) -> Any:
    from asgi_llm.contrib.django import LLMDispatcher

    return LLMDispatcher(django or DjangoStandIn(), LLMApp(pool=pool, adapters=(OPENAI, ANTHROPIC)))


@contextlib.asynccontextmanager
async def client(app: Any, root_path: str = "") -> AsyncIterator[httpx.AsyncClient]:
    """Lifespan entered and the models ready, as under a server; the pool stopped after."""
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    async with LifespanManager(app), httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        await app.llm.pool.wait_ready()
        yield http
    assert not app.llm.pool.started


async def test_the_prefix_goes_to_the_llm_app_and_the_rest_to_django(fake_pool: ModelPool) -> None:
    app = dispatcher(fake_pool)
    async with client(app) as http:
        for path in ("/v1/models", "/v1/models/"):
            assert (await http.get(path)).json()["data"][0]["id"] == "fake"
        chat = await http.post(
            "/v1/chat/completions", json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert chat.json()["choices"][0]["message"]["content"] == "Hello there"
        bare = await http.get("/v1")  # the mount point itself: asgi_llm answers, in its own words
        assert bare.status_code == 404 and bare.json()["error"]["type"]
        for path in ("/", "/v1x/models", "/admin/", "/api/tags"):
            assert (await http.get(path)).text == "django"
    assert app.django.seen == [("/", ""), ("/v1x/models", ""), ("/admin/", ""), ("/api/tags", "")]


async def test_the_host_root_path_is_respected_and_extended(fake_pool: ModelPool) -> None:
    app = dispatcher(fake_pool)
    async with client(app, root_path="/site") as http:
        assert (await http.get("/site/v1/models")).json()["data"][0]["id"] == "fake"
        assert (await http.get("/site/page")).text == "django"
        assert (await http.get("/elsewhere/v1/models")).text == "django"
    assert app.django.seen == [("/site/page", "/site"), ("/elsewhere/v1/models", "/site")]


async def test_ollama_routes_answer_at_the_root_only_when_asked(fake_pool: ModelPool) -> None:
    from django.test import override_settings

    with override_settings(ASGI_LLM={"OLLAMA_AT_ROOT": True}):
        app = dispatcher(fake_pool)
        async with client(app) as http:
            for path in ("/api/tags", "/api/tags/"):
                assert (await http.get(path)).json()["models"][0]["name"] == "fake:latest"
            assert (await http.get("/api/version")).json()["version"]
            for path in ("/", "/api/mine", "/api"):
                assert (await http.get(path)).text == "django"


async def test_the_setting_is_read_when_first_needed(fake_pool: ModelPool) -> None:
    from django.test import override_settings

    app = dispatcher(fake_pool)  # built before the setting changes
    with override_settings(ASGI_LLM={"PREFIX": "/llm/"}):
        async with client(app) as http:
            assert (await http.get("/llm/models")).json()["data"][0]["id"] == "fake"
            assert (await http.get("/v1/models")).text == "django"


def test_the_llm_app_is_built_from_the_setting() -> None:
    from django.test import override_settings

    from asgi_llm.contrib.django import LLMDispatcher

    app = LLMDispatcher(DjangoStandIn())
    with override_settings(ASGI_LLM={"MODELS": [{"id": "mine", "path": "/m.gguf"}], "max_body_bytes": 1000}):
        llm = app.llm
    assert [m.id for m in llm.settings.models] == ["mine"]
    assert llm.settings.max_body_bytes == 1000
    assert not llm.pool.started  # nothing loads before lifespan or a request


async def test_lifespan_starts_and_stops_the_pool(fake_pool: ModelPool) -> None:
    app = dispatcher(fake_pool)
    async with LifespanManager(app):
        assert fake_pool.started and fake_pool.thread.alive
        await fake_pool.wait_ready()
    assert not fake_pool.started and not fake_pool.thread.alive


async def test_lifespan_reports_a_bad_setting(fake_pool: ModelPool) -> None:
    from django.test import override_settings

    sent: list[dict[str, Any]] = []
    incoming = [{"type": "lifespan.startup"}]

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with override_settings(ASGI_LLM={"PREFIX": "v1"}):
        await dispatcher(fake_pool)({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.failed"]
    assert "PREFIX must be a path starting with '/'" in sent[0]["message"]
    assert not fake_pool.started


@pytest.fixture
def urlconf(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from django.contrib import admin
    from django.http import HttpResponse
    from django.test import override_settings
    from django.urls import clear_url_caches, path

    module = types.ModuleType("asgi_llm_test_urls")
    module.urlpatterns = [path("admin/", admin.site.urls), path("page/", lambda request: HttpResponse("a view"))]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with override_settings(ROOT_URLCONF=module.__name__):
        yield module.__name__
    clear_url_caches()


async def test_get_asgi_application_serves_django_beside_the_llm_api(fake_pool: ModelPool, urlconf: str) -> None:
    from django.core.handlers.asgi import ASGIHandler

    from asgi_llm.contrib.django import get_asgi_application

    app = get_asgi_application(LLMApp(pool=fake_pool))
    assert isinstance(app.django, ASGIHandler)
    async with client(app) as http:
        assert (await http.get("/page/")).text == "a view"
        login = await http.get("/admin/login/")
        assert login.status_code == 200 and "Django administration" in login.text
        assert (await http.get("/admin/")).status_code == 302
        assert (await http.get("/v1/models")).json()["data"][0]["id"] == "fake"
