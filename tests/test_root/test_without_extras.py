"""A host installs only what it uses: without the `serve` extra (uvicorn, uvloop, httptools,
Starlette) and the `upstream` extra (httpx), the package and its contrib packages import, a mounted
app and the in-process client serve, and what needs an extra names it.

Each test runs a fresh interpreter whose `sitecustomize` wraps every import finder so that it finds
none of those packages, as if they were not installed: `find_spec` gives None and `import` raises
ModuleNotFoundError. Starlette's TestClient needs httpx, so the app is driven by an ASGI call
written out here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test starts an interpreter
SERVE = ("uvicorn", "uvloop", "httptools", "starlette")
UPSTREAM = ("httpx",)

NOT_INSTALLED = """
import importlib.abc
import sys


class NotInstalled(importlib.abc.MetaPathFinder):
    def __init__(self, finder):
        self.finder = finder

    def __getattr__(self, name):  # invalidate_caches, find_distributions...
        return getattr(self.finder, name)

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ABSENT:
            return None
        return self.finder.find_spec(name, path, target)


sys.meta_path[:] = [NotInstalled(finder) for finder in sys.meta_path]
"""

MOUNTED = """
import importlib.util
import json
import sys

import anyio

import asgi_llm.contrib.django
import asgi_llm.contrib.litestar
from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.engines.fake import FakeEngine

ABSENT = ("uvicorn", "uvloop", "httptools", "starlette", "httpx")
settings = Settings(models=[ModelConfig(id="m", path="/nowhere.gguf")])
llm = LLMApp(pool=ModelPool(settings, engine_factory=lambda config, thread: FakeEngine(config)))


async def chat() -> dict:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}]}).encode()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/chat/completions", "raw_path": b"/chat/completions", "root_path": "", "query_string": b"",
        "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1), "server": ("h", 80),
    }
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    answered = anyio.Event()
    sent = []

    async def receive():
        if incoming:
            return incoming.pop()
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    async with llm.lifespan():
        with anyio.fail_after(30):
            await llm(scope, receive, send)
        answered.set()
        reply = await llm.client().chat([{"role": "user", "content": "Hi"}], model="m")
    return {
        "status": sent[0]["status"],
        "body": json.loads(b"".join(m.get("body", b"") for m in sent[1:])),
        "client": reply.text,
        "found": [name for name in ABSENT if importlib.util.find_spec(name) is not None],
        "imported": sorted({m.partition(".")[0] for m in sys.modules} & set(ABSENT)),
    }


print(json.dumps(anyio.run(chat)))
"""


def without(absent: tuple[str, ...], argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`argv` run in a process where the `absent` packages are not found, away from the repository."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(f"ABSENT = {sorted(absent)!r}\n{NOT_INSTALLED}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def console_script() -> str:
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command is not None
    return command


def test_a_mounted_app_and_the_in_process_client_serve_without_the_extras(tmp_path: Path) -> None:
    done = without((*SERVE, *UPSTREAM), python(MOUNTED), tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["found"] == [] and result["imported"] == []  # truly absent, and never asked for
    assert result["status"] == 200
    assert result["body"]["choices"][0]["message"]["content"] == "Hello there" == result["client"]


def test_serve_without_the_serve_extra_names_it(tmp_path: Path) -> None:
    done = without(SERVE, [console_script(), "serve"], tmp_path)
    assert done.returncode == 2
    assert done.stderr == "asgi-llm: serve needs uvicorn, which is not installed: pip install 'asgi-llm[serve]'\n"


def test_an_upstream_model_without_the_upstream_extra_is_refused_naming_it(tmp_path: Path) -> None:
    refused = """
        from pydantic import ValidationError

        from asgi_llm import Settings

        try:
            Settings(models=[{"id": "big", "base_url": "http://127.0.0.1:9/v1"}])
        except ValidationError as exc:
            print(exc.errors()[0]["msg"])
    """
    done = without(UPSTREAM, python(refused), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "model 'big' is served by an upstream (base_url), which needs httpx" in done.stdout
    assert "pip install 'asgi-llm[upstream]'" in done.stdout

    config = tmp_path / "upstream.toml"
    config.write_text('[[models]]\nid = "big"\nbase_url = "http://127.0.0.1:9/v1"\n')
    served = without(UPSTREAM, [console_script(), "serve", "--config", str(config)], tmp_path)
    assert served.returncode == 2
    assert "pip install 'asgi-llm[upstream]'" in served.stderr and "Traceback" not in served.stderr
