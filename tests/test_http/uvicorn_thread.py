"""An ASGI app under real uvicorn in a thread of the test's process, on a free port: for tests of
what only a real server does (keep-alive, a refusal read mid-upload, the shared end-to-end server,
a gateway)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

__all__ = ["free_port", "uvicorn_serving"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def uvicorn_serving(app: Any) -> Iterator[str]:
    """`app` served until the block ends (60 s to start, a model loading included); its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, lifespan="on", ws="none", log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
