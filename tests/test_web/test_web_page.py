"""The web page's files: served below the mount when asked for (always by `asgi-llm serve`),
needing no key, never recorded, locked to their own origin; never served where it is off."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from asgi_llm import ApiKeyConfig, LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.cli.serve import build_parser, settings_from_args, standalone_app
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio

MODELS = (ModelConfig(id="fake", path="unused.gguf"),)


def fake_app(web_ui: bool | None = None, **settings: Any) -> LLMApp:
    pool = ModelPool(
        Settings(models=MODELS, **settings), engine_factory=lambda config, thread: FakeEngine(config, thread)
    )
    return LLMApp(pool=pool, web_ui=web_ui)


@contextlib.asynccontextmanager
async def client(app: Any, root_path: str = "") -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        yield http


async def test_off_by_default_in_a_host() -> None:
    async with client(fake_app()) as http:
        assert (await http.get("/ui")).status_code == 404
        assert (await http.get("/ui/app.js")).status_code == 404


@pytest.mark.parametrize("path", ["/ui", "/ui/"])
async def test_the_page_links_its_files_below_the_mount(path: str) -> None:
    host = Starlette(routes=[Mount("/llm", app=fake_app(web_ui=True))])
    async with client(host) as http:
        page = await http.get("/llm" + path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<base href="/llm/ui/">' in page.text  # so `app.js` resolves with or without the slash
        assert '<script src="app.js"' in page.text and 'href="style.css"' in page.text
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
        script = await http.get("/llm/ui/app.js")
        assert script.headers["content-type"].startswith("text/javascript") and "openapi.json" in script.text
        assert (await http.get("/llm/ui/style.css")).headers["content-type"].startswith("text/css")
        assert (await http.get("/llm/ui/../openapi.py")).status_code == 404
        assert (await http.get("/llm/ui/page.py")).status_code == 404  # only the page's own three files
        assert page.headers["x-request-id"] != script.headers["x-request-id"]  # every answer has its own id


async def test_a_root_path_is_escaped_into_the_base() -> None:
    app = fake_app(web_ui=True)
    async with client(app, root_path='/x"><script>') as http:
        page = await http.get('/x"><script>/ui')
    assert '<base href="/x&quot;&gt;&lt;script&gt;/ui/">' in page.text


async def test_needs_no_key_and_is_not_recorded_while_the_api_still_needs_one() -> None:
    keys = (ApiKeyConfig(name="ops", key=SecretStr("op-secret"), operator=True),)
    app = fake_app(web_ui=True, api_keys=keys)
    async with app.lifespan(), client(app) as http:
        await app.pool.wait_ready()
        assert (await http.get("/ui")).status_code == 200
        assert (await http.get("/ui/app.js")).status_code == 200
        assert (await http.get("/models")).status_code == 401
        metrics = await http.get("/metrics", headers={"authorization": "Bearer op-secret"})
    assert 'endpoint="/ui' not in metrics.text and 'endpoint="/models"' in metrics.text


async def test_the_host_is_untouched_beside_it() -> None:
    async def home(request: Any) -> PlainTextResponse:
        return PlainTextResponse("host home")

    host = Starlette(routes=[Route("/ui", home), Mount("/llm", app=fake_app(web_ui=True))])
    async with client(host) as http:
        assert (await http.get("/ui")).text == "host home"
        assert (await http.get("/nowhere")).status_code == 404
        assert "content-security-policy" not in (await http.get("/ui")).headers


async def test_asgi_llm_serve_has_it_at_ui_only_and_no_web_ui_turns_it_off() -> None:
    lazy = (ModelConfig(id="m", path="absent.gguf", load="lazy"),)  # nothing loads

    async def page_at(argv: list[str], path: str) -> int:
        settings = settings_from_args(build_parser().parse_args(["serve", *argv]))
        app = standalone_app(settings.model_copy(update={"models": lazy}))
        async with LifespanManager(app), client(app) as http:  # no inference thread left behind
            return (await http.get(path)).status_code

    assert await page_at([], "/ui") == 200
    assert await page_at([], "/ui/app.js") == 200
    assert await page_at([], "/v1/ui") == 404  # one page, at the root
    assert await page_at(["--no-web-ui"], "/ui") == 404


async def test_a_sibling_in_front_of_the_host_leaves_the_hosts_ui_alone() -> None:
    async def page(request: Any) -> PlainTextResponse:
        return PlainTextResponse("the host's own /ui")

    pool = ModelPool(Settings(models=MODELS, web_ui=True), engine_factory=lambda c, t: FakeEngine(c, t))
    api = LLMApp(pool=pool)  # `web_ui = true` in the settings: this app serves the page
    ollama = api.sibling(OLLAMA, health_path=None)  # a sibling serves none unless asked
    host = Starlette(routes=[Route("/ui", page), Mount("/v1", app=api)])
    async with client(ollama.in_front_of(host)) as http:
        assert (await http.get("/ui")).text == "the host's own /ui"
        assert (await http.get("/v1/ui")).status_code == 200


async def test_the_operator_view_reads_each_models_figures_from_the_admin_list() -> None:
    """What the Operator tab shows comes from the operators' model list (`admin_models` in the
    app's OpenAPI document, which the page reads): per model its queue, the faults and stalls
    it survived since it loaded, and its engine's own figures; none before it loads."""
    models = (*MODELS, ModelConfig(id="later", path="unused.gguf", load="lazy"))
    app = LLMApp(
        pool=ModelPool(Settings(models=models, web_ui=True), engine_factory=lambda c, t: FakeEngine(c, t)),
        web_ui=True,
    )
    async with app.lifespan(), client(app) as http:
        await app.pool.wait_ready()
        paths = (await http.get("/openapi.json")).json()["paths"]
        assert paths["/admin/models"]["get"]["operationId"] == "admin_models"
        listed = {m["id"]: m for m in (await http.get("/admin/models")).json()["data"]}
        script = (await http.get("/ui/app.js")).text
    loaded, later = listed["fake"], listed["later"]
    assert (loaded["queued"], loaded["health"]) == (0, {"faults": 0, "stalls": 0, "restarts": 0})
    assert loaded["backend"] == {} and loaded["estimated_memory"] is not None
    assert (later["state"], later["queued"], later["health"], later["backend"]) == ("unloaded", 0, None, {})
    assert "byId.admin_models" in script and "function size(bytes)" in script
