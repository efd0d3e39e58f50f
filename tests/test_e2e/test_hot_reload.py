"""`asgi-llm serve` follows its config and keys files without a restart: a model added to the
config is served, a removed one is gone, a revoked key fails and an added one works."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import openai

from asgi_llm.config import default_model_path


def config(path: Path, keys: Path, *ids: str) -> None:
    models = [
        {"id": i, "path": default_model_path(), "n_ctx": 256, "parallel": 1, "n_threads": 1, "load": "lazy"}
        for i in ids
    ]
    path.write_text(json.dumps({"models": models, "api_keys_file": str(keys)}))


def until(check: Callable[[], bool], seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the change was not picked up"
        time.sleep(0.2)


def test_serve_reloads_models_and_keys_from_its_files(asgi_llm_serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings, keys = tmp_path / "asgi-llm.json", tmp_path / "keys.txt"
    keys.write_text("alice=sk-alice\n")
    config(settings, keys, "one")
    with asgi_llm_serve("--config", str(settings)) as server:

        def ids(key: str) -> list[str]:
            reply = httpx.get(f"{server.url}/v1/models", headers={"authorization": f"Bearer {key}"})
            return sorted(m["id"] for m in reply.json()["data"]) if reply.status_code == 200 else []

        assert ids("sk-alice") == ["one"]
        config(settings, keys, "two")
        until(lambda: ids("sk-alice") == ["two"])
        with openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-alice", max_retries=0, timeout=60) as sdk:
            reply = sdk.chat.completions.create(model="two", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            assert reply.model == "two"
        keys.write_text("bob=sk-bob\n")
        until(lambda: ids("sk-bob") == ["two"])
        assert httpx.get(f"{server.url}/v1/models", headers={"authorization": "Bearer sk-alice"}).status_code == 401


def test_serve_reloads_on_sighup_a_change_the_file_watch_cannot_see(asgi_llm_serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The new config is written with the old modification time put back, so only the signal can
    make the server read it: it must not be served before SIGHUP, and must be right after."""
    settings, keys = tmp_path / "asgi-llm.json", tmp_path / "keys.txt"
    keys.write_text("alice=sk-alice\n")
    config(settings, keys, "one")
    with asgi_llm_serve("--config", str(settings)) as server:

        def ids() -> list[str]:
            reply = httpx.get(f"{server.url}/v1/models", headers={"authorization": "Bearer sk-alice"})
            return sorted(m["id"] for m in reply.json()["data"])

        assert ids() == ["one"]
        stamp = settings.stat()
        config(settings, keys, "one", "three")
        os.utime(settings, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        time.sleep(2.5)  # the watch polls every second: two polls passed without seeing it
        assert ids() == ["one"]
        os.kill(server.pid, signal.SIGHUP)
        until(lambda: ids() == ["one", "three"])
