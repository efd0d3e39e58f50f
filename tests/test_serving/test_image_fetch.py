"""A remote image, fetched from a real HTTP server on a local socket: only from an allowed host,
never through a redirect to another host, never more than `max_image_bytes`, never longer than
the time limit; each refusal a 400 naming the part."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from asgi_llm.config import Settings
from asgi_llm.core import IMAGE_MARKER, ChatRequest, ImageInput, InvalidRequest, Message
from asgi_llm.serving.image_fetch import allowed_host
from asgi_llm.serving.images import ImageRules, image_rules, read_images

from .pictures import png

DEFAULTS = image_rules(Settings())  # the settings' own limits, no host allowed

pytestmark = pytest.mark.anyio

PART = "messages[0].content[1]"


IMAGE = png(8, 8)
BIG = IMAGE + b"\x00" * 5000  # what follows IEND is ignored by decoders, and counted here


class Handler(BaseHTTPRequestHandler):
    """`/cat.png`, its redirects (same host, another host), a big one with and without a
    length, a slow one and a missing one."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        if self.path == "/cat.png":
            self._send(200, IMAGE)
        elif self.path == "/same-host":
            self._redirect(f"http://127.0.0.1:{port}/cat.png")
        elif self.path == "/relative":
            self._redirect("/cat.png")
        elif self.path == "/other-host":
            self._redirect(f"http://localhost:{port}/cat.png")
        elif self.path == "/loop":
            self._redirect("/loop")
        elif self.path == "/big":
            self._send(200, BIG)
        elif self.path == "/big-no-length":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            for start in range(0, len(BIG), 1000):
                self.wfile.write(BIG[start : start + 1000])
        elif self.path == "/slow":
            self.send_response(200)
            self.send_header("Content-Length", str(len(IMAGE)))
            self.end_headers()
            self.wfile.write(IMAGE[:10])
            self.wfile.flush()
            time.sleep(1.5)
            self.wfile.write(IMAGE[10:])
        else:
            self._send(404, b"no")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def asked(url: str) -> ChatRequest:
    image = ImageInput(b"", None, PART, url=url, detail="high")
    return ChatRequest(model="m", messages=(Message("user", f"what is {IMAGE_MARKER}?", images=(image,)),))


ALLOWED = dataclasses.replace(DEFAULTS, hosts=("127.0.0.1",), max_bytes=1000, timeout=1.0)


@pytest.mark.parametrize("path", ["/cat.png", "/same-host", "/relative"])
async def test_an_allowed_host_is_fetched(port: int, path: str) -> None:
    url = f"http://127.0.0.1:{port}{path}"
    read = await read_images(asked(url), ALLOWED)
    assert isinstance(read, ChatRequest)
    (image,) = read.messages[0].images
    assert (image.data, image.media_type, image.url, image.detail) == (IMAGE, "image/png", url, "high")


REFUSED = [
    pytest.param("http://localhost:{port}/cat.png", ALLOWED, "not in this server's `image_url_hosts`", id="other-host"),
    pytest.param("http://127.0.0.1:{port}/cat.png", DEFAULTS, "remote images are off", id="none-allowed"),
    pytest.param("http://127.0.0.1:{port}/other-host", ALLOWED, "redirects to another host", id="redirect-away"),
    pytest.param("http://127.0.0.1:{port}/loop", ALLOWED, "redirects more than", id="redirect-loop"),
    pytest.param("http://127.0.0.1:{port}/big", ALLOWED, "max_image_bytes (1000)", id="too-big"),
    pytest.param("http://127.0.0.1:{port}/big-no-length", ALLOWED, "max_image_bytes (1000)", id="too-big-streamed"),
    pytest.param(
        "http://127.0.0.1:{port}/slow",
        dataclasses.replace(DEFAULTS, hosts=("127.0.0.1",), timeout=0.5),
        "took longer",
        id="slow",
    ),
    pytest.param("http://127.0.0.1:{port}/missing", ALLOWED, "answered 404", id="missing"),
    pytest.param("http://127.0.0.1:1/cat.png", ALLOWED, "could not be fetched", id="unreachable"),
]


@pytest.mark.parametrize(("url", "rules", "words"), REFUSED)
async def test_a_fetch_that_may_not_or_cannot_be_done_is_a_400(
    port: int, url: str, rules: ImageRules, words: str
) -> None:
    started = time.monotonic()
    with pytest.raises(InvalidRequest) as refused:
        await read_images(asked(url.format(port=port)), rules)
    assert (refused.value.status, refused.value.param) == (400, PART)
    assert words in refused.value.message
    assert time.monotonic() - started < 1.4  # the slow one is cut at its limit, not waited for


@pytest.mark.parametrize(
    ("host", "hosts", "allowed"),
    [
        ("images.example.com", ("images.example.com",), True),
        ("IMAGES.example.com.", ("images.example.com",), True),
        ("cdn.example.com", ("*.example.com",), True),
        ("example.com", ("*.example.com",), False),
        ("evil-example.com", ("*.example.com",), False),
        ("images.example.com.evil.net", ("images.example.com",), False),
        ("anything", (), False),
    ],
)
def test_the_host_list(host: str, hosts: tuple[str, ...], allowed: bool) -> None:
    assert allowed_host(host, hosts) is allowed


async def test_without_httpx_a_remote_image_names_the_extra(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # `import httpx` fails, as where it is not installed
    with pytest.raises(InvalidRequest) as refused:
        await read_images(asked(f"http://127.0.0.1:{port}/cat.png"), ALLOWED)
    assert refused.value.param == PART and "asgi-llm[upstream]" in refused.value.message
