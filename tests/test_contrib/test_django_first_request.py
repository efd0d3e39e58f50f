"""Django's async test client, whose first request reaches the real default model through a view
(issue 39). The test client calls Django's handler, with no server and no lifespan: the view's
in-process call starts the pool, the model begins loading, and the call waits for it. It used to
raise ModelNotReady ("still loading") out of the view."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.model, pytest.mark.usefixtures("django_setup")]

MODEL = {"aliases": ["default"], "n_ctx": 512, "n_threads": 1}  # the packaged model


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """A project's urls.py whose async view asks the model, through the LLM app of its asgi.py."""
    from django.http import HttpRequest, JsonResponse
    from django.test import override_settings
    from django.urls import clear_url_caches, path

    from asgi_llm.contrib.django import get_asgi_application

    module = types.ModuleType("asgi_llm_first_request_urls")

    async def ask(request: HttpRequest) -> JsonResponse:
        messages = [{"role": "user", "content": request.GET["q"]}]
        reply = await module.application.llm.client(key="site").chat(messages, model="default", max_tokens=4)
        return JsonResponse({"text": reply.text, "tokens": reply.usage.completion_tokens})

    module.urlpatterns = [path("ask/", ask)]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with override_settings(ROOT_URLCONF=module.__name__, ASGI_LLM={"MODELS": [MODEL]}):
        module.application = get_asgi_application()  # type: ignore[attr-defined]
        yield module
    clear_url_caches()


async def test_the_first_request_of_djangos_async_test_client_waits_for_the_model(site: types.ModuleType) -> None:
    from django.test import AsyncClient

    llm = site.application.llm
    try:
        reply = await AsyncClient().get("/ask/", {"q": "Hi"})
        assert llm.pool.started  # the view's call started the pool: the test client sends no lifespan
    finally:
        await llm.pool.stop()
    assert reply.status_code == 200
    assert 1 <= reply.json()["tokens"] <= 4 and isinstance(reply.json()["text"], str)
    assert not llm.pool.thread.alive
