"""`asgi-llm serve --workers 2` with shared backends: uvicorn's worker processes each build the
app from the same command line, one key's limit holds across them, and a background Response
made through one worker is read through any (PostgreSQL holds it)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from .servers import PostgresServer, RedisServer, asgi_llm_cli, free_port


def _workers_of(pid: int) -> list[str]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    lines = [Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode() for child in children]
    return [line for line in lines if "multiprocessing.spawn" in line and "resource_tracker" not in line]


@pytest.mark.model  # each worker loads the packaged model
def test_two_workers_hold_one_limit(redis_server: RedisServer, postgres_server: PostgresServer, tmp_path: Path) -> None:
    config = tmp_path / "workers.toml"
    config.write_text(
        f'limits_url = "{redis_server.url}"\nstate_url = "{postgres_server.url}"\nweb_ui = false\n'
        'api_keys = [{name = "workers", key = "sk-workers", limits = {requests_per_minute = 4}},\n'
        '  {name = "later", key = "sk-later"}]\n'
        '[[models]]\naliases = ["default"]\nn_ctx = 512\nn_threads = 1\nparallel = 1\n',
        encoding="utf-8",
    )
    port = free_port()
    command = [
        asgi_llm_cli(),
        "serve",
        "--workers",
        "2",
        "--port",
        str(port),
        "--config",
        str(config),
        "--log-level",
        "warning",
    ]
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while len(_workers_of(process.pid)) < 2 or not _healthy(port):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        statuses = []
        for _ in range(10):  # a new connection each: the kernel spreads them over the workers
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                statuses.append(client.get("/v1/models", headers={"x-api-key": "sk-workers"}).status_code)
        assert sorted(statuses) == [200] * 4 + [429] * 6
        _a_background_response_is_read_through_every_worker(port)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    assert process.returncode == 0 and "Traceback" not in log.read_text(), log.read_text()


def _a_background_response_is_read_through_every_worker(port: int) -> None:
    base, headers = f"http://127.0.0.1:{port}/v1", {"authorization": "Bearer sk-later"}
    body = {"model": "default", "input": "Say hi.", "background": True, "max_output_tokens": 8}
    with httpx.Client(base_url=base, timeout=30, headers=headers) as client:
        queued = client.post("/responses", json=body)
    assert queued.status_code == 200, queued.text
    made = queued.json()
    assert made["status"] == "queued" and made["background"] is True
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while not seen or seen[-1] in ("queued", "in_progress"):
        assert time.monotonic() < deadline, seen
        with httpx.Client(base_url=base, timeout=30, headers=headers) as client:  # a new connection: any worker
            read = client.get(f"/responses/{made['id']}")
        assert read.status_code == 200, read.text
        seen.append(read.json()["status"])
        time.sleep(0.1)
    assert seen[-1] in ("completed", "incomplete") and set(seen) <= {
        "queued",
        "in_progress",
        seen[-1],
    }  # 8 tokens may cut it
    with httpx.Client(base_url=base, timeout=30, headers=headers) as client:
        done = client.get(f"/responses/{made['id']}").json()
    assert done["output"] and done["usage"]["output_tokens"] > 0


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False
