"""Private Redis and PostgreSQL servers, started once per session on free ports in temporary
folders and stopped at the end (see servers.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest

from .servers import PostgresServer, RedisServer, free_port, private_folder


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    folder = tempfile.mkdtemp(prefix="asgi-llm-redis-")
    server = RedisServer(free_port(), folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    folder, as_user = private_folder()
    server = PostgresServer(free_port(), folder, as_user)
    server.init()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
