"""Private Redis and PostgreSQL servers for the tests (Debian's `redis-server` and `postgresql`, installed by
.ci/setup), each started once per session on a free port in a temporary folder and stopped at
the end. PostgreSQL refuses to run as root: as root (CI), its files belong to `nobody` and its
commands run as `nobody` through `runuser`.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..test_http.uvicorn_thread import free_port

__all__ = ["PostgresServer", "RedisServer", "asgi_llm_cli", "free_port", "postgres_bin", "private_folder"]


def _wait_port(port: int, up: bool, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                if up:
                    return
        except OSError:
            if not up:
                return
        time.sleep(0.05)
    raise AssertionError(f"port {port} did not go {'up' if up else 'down'}")


def asgi_llm_cli() -> str:
    """The `asgi-llm` console script installed beside this Python."""
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command, "the asgi-llm console script is installed"
    return command


def postgres_bin(name: str) -> str:
    """`initdb`, `pg_ctl`: on PATH, or in Debian's /usr/lib/postgresql/VERSION/bin (newest first)."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[4]), reverse=True)
    path = found[0] if found else shutil.which(name)
    assert path, f"{name} is installed (.ci/setup installs Debian's postgresql)"
    return path


@dataclass
class RedisServer:
    port: int
    folder: str
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = shutil.which("redis-server")
        assert command, "redis-server is installed (.ci/setup installs Debian's redis-server)"
        self.process = subprocess.Popen(
            [command, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.folder, "--save", ""],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port, up=True)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
            _wait_port(self.port, up=False)


@dataclass
class PostgresServer:
    port: int
    folder: str
    as_user: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str) -> None:
        subprocess.run([*self.as_user, *command], check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        self._run(postgres_bin("initdb"), "-D", f"{self.folder}/data", "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            postgres_bin("pg_ctl"),
            "-D",
            f"{self.folder}/data",
            "-o",
            options,
            "-l",
            f"{self.folder}/log",
            "-w",
            "start",
        )
        _wait_port(self.port, up=True)

    def stop(self) -> None:
        self._run(postgres_bin("pg_ctl"), "-D", f"{self.folder}/data", "-m", "immediate", "-w", "stop")
        _wait_port(self.port, up=False)


def private_folder() -> tuple[str, list[str]]:
    folder = tempfile.mkdtemp(prefix="asgi-llm-shared-")
    if os.geteuid() != 0:
        return folder, []
    os.chown(folder, 65534, 65534)  # nobody: PostgreSQL will not run as root
    runuser = shutil.which("runuser")
    assert runuser, "runuser (util-linux) is installed"
    return folder, [runuser, "-u", "nobody", "--"]
