"""The snippets of README.md and of the manual (docs/), tested where they are shown.

A block after `<!-- readme-test: NAME -->` is run as written (the hosts serve the real default
model); a name shown on several pages must read the same on each. Every other block is checked
for what it is: Python compiles, TOML is valid `Settings`, JSON parses.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.engines.fake import FakeEngine

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
pytestmark = pytest.mark.anyio

_NAMED = re.compile(r"<!-- readme-test: ([\w-]+) -->\n```\w*\n(.*?)```", re.DOTALL)
_FENCED = re.compile(r"^```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def pages() -> list[Path]:
    """Where snippets are shown: the front page and every page of the manual."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def _page(path: Path) -> str:
    return str(path.relative_to(ROOT))


def named_snippets() -> dict[str, dict[str, str]]:
    """Each named snippet → the pages showing it → its text there."""
    found: dict[str, dict[str, str]] = {}
    for path in pages():
        for name, text in _NAMED.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, {})[_page(path)] = text
    return found


def run_snippet(name: str) -> dict[str, Any]:
    """Execute a snippet as a module of its own (frameworks resolve annotations through it)."""
    module = types.ModuleType(f"readme_{name.replace('-', '_')}")
    sys.modules[module.__name__] = module
    page, text = _shown(name)
    exec(compile(text, page, "exec"), module.__dict__)  # noqa: S102 (the page's own code, run as written)
    return module.__dict__


def snippet(name: str) -> str:
    return _shown(name)[1]


def _shown(name: str) -> tuple[str, str]:
    """The first page showing the snippet, and its text."""
    shown = named_snippets().get(name, {})
    assert shown, f"snippet {name!r} not found in README.md or docs/"
    return next(iter(shown.items()))


def fenced(language: str) -> list[Any]:
    """Every fenced block in `language` on every page, as pytest params named by page and line."""
    blocks = []
    for path in pages():
        text = path.read_text(encoding="utf-8")
        for match in _FENCED.finditer(text):
            if match.group(1) == language:
                line = text.count("\n", 0, match.start()) + 1
                blocks.append(pytest.param(match.group(2), id=f"{_page(path)}:{line}"))
    return blocks


@pytest.mark.model
async def test_starlette_mount_example_serves_chat_and_host_routes() -> None:
    namespace = run_snippet("starlette")
    app, llm = namespace["app"], namespace["llm"]
    async with LifespanManager(app, startup_timeout=60):
        await llm.pool.wait_ready()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host") as http:
            assert (await http.get("/")).text == "my own route"
            reply = await http.post(
                "/v1/chat/completions",
                json={"model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            )
            assert reply.status_code == 200
            assert reply.json()["usage"]["completion_tokens"] <= 4
            embedded = await http.post("/v1/embeddings", json={"model": "default", "input": "hi"})
            assert len(embedded.json()["data"][0]["embedding"]) == 576
    assert not llm.pool.thread.alive


async def _serve_and_ask(app: Any, llm: Any, home: str) -> None:
    async with LifespanManager(app, startup_timeout=60):
        await llm.pool.wait_ready()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host") as http:
            assert (await http.get("/")).json() == {"hello": home}
            reply = await http.post(
                "/v1/chat/completions",
                json={"model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            )
            assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] <= 4
    assert not llm.pool.thread.alive


@pytest.mark.model
async def test_fastapi_example() -> None:
    namespace = run_snippet("fastapi")
    await _serve_and_ask(namespace["app"], namespace["llm"], "from FastAPI")


@pytest.mark.model
async def test_litestar_example() -> None:
    namespace = run_snippet("litestar")
    app = namespace["app"]
    (plugin,) = [p for p in app.plugins if type(p).__name__ == "LLMPlugin"]
    await _serve_and_ask(app, plugin.llm, "from Litestar")


def test_django_settings_example_is_a_valid_configuration() -> None:
    from asgi_llm.contrib.django.conf import parse_options

    namespace = run_snippet("django-settings")
    assert "asgi_llm.contrib.django" in namespace["INSTALLED_APPS"]
    options = parse_options(namespace["ASGI_LLM"])
    assert (options.prefix, options.ollama_at_root) == ("/v1", True)
    (model,) = options.settings.models
    assert model.n_gpu_layers == -1 and model.aliases == ("default",)


async def test_the_in_process_client_example_streams_from_a_host_route() -> None:
    """The host route of docs/in-process.md, in a FastAPI app over a scripted engine: its client
    streams what the model wrote, through the app's layers and pool."""
    models = (ModelConfig(id="fake", path="unused.gguf", aliases=("default",)),)
    written = ("The cat", " sat", " on the mat.")
    llm = LLMApp(pool=ModelPool(Settings(models=models), engine_factory=lambda c, t: FakeEngine(c, t, pieces=written)))
    app = FastAPI(lifespan=llm.lifespan)
    app.mount("/v1", llm)
    page, route = _shown("fastapi-summarize")
    namespace = {"app": app, "llm": llm}
    exec(compile(route, page, "exec"), namespace)  # noqa: S102 (the page's own code, run as written)
    async with (
        LifespanManager(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host") as http,
    ):
        reply = await http.get("/summarize", params={"text": "A cat sat on a mat all day long."})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    assert reply.text == "".join(written)


@pytest.mark.parametrize("name", sorted(named_snippets()))
def test_a_named_snippet_reads_the_same_wherever_it_is_shown(name: str) -> None:
    shown = named_snippets()[name]
    assert len(set(shown.values())) == 1, f"{name!r} differs between {sorted(shown)}"


@pytest.mark.parametrize("name", sorted(named_snippets()))
def test_every_named_snippet_is_run_by_a_test(name: str) -> None:
    tests = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "tests").rglob("test_*.py"))
    assert f'"{name}"' in tests or f"readme-test: {name} " in tests


def test_the_snippets_are_found() -> None:
    assert {"starlette", "fastapi", "litestar", "django-settings", "upstream-toml"} <= set(named_snippets())
    assert fenced("python") and fenced("toml")


@pytest.mark.parametrize("code", fenced("python"))
def test_every_python_snippet_compiles(code: str) -> None:
    compile(code, "snippet", "exec")


@pytest.mark.parametrize("document", fenced("toml"))
def test_every_toml_snippet_is_valid_settings(document: str) -> None:
    Settings.model_validate(tomllib.loads(document))


@pytest.mark.parametrize("document", fenced("json"))
def test_every_json_snippet_parses(document: str) -> None:
    json.loads(document)
