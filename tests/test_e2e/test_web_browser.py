"""The web page in headless Chromium (Debian's), against the real model under real uvicorn.

The page is mounted in a host at `/llm` with keys: it asks for one, streams a reply into the
chat token by token with a growing counter and a tokens/s figure, and shows an operator key
the loaded model, its usage and the request rate. Screenshots are decoded and their pixels
checked: the page rendered, styled, with text where the answer is.
"""

from __future__ import annotations

import asyncio
import re
import struct
import time
import zlib
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from asgi_llm import KeyInfo, LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.base import Adapter
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.core import Finish, GenerationRequest, ReasoningDelta, TextDelta, Usage
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.slow  # each test drives Chromium
MODEL = "SmolLM2-135M-Instruct"
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KEYS = {"op-key": KeyInfo(name="ops", operator=True), "user-key": KeyInfo(name="user")}
ACCENT = (0x33, 0x58, 0xD4)  # style.css's --accent: the Send button's background
THINK = (0xF4, 0xF0, 0xE6)  # style.css's --think: the reasoning box's background


async def verify(key: str) -> KeyInfo | None:
    return KEYS.get(key)


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("host home")


@pytest.fixture(scope="module")
def site(server: Any, serve_app: Callable[[Starlette], Any]) -> Iterator[str]:
    llm = LLMApp(pool=server.pool, adapters=(OPENAI,), web_ui=True, verify=verify)
    with serve_app(Starlette(routes=[Route("/home", home), Mount("/llm", app=llm)])) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    opened = context.new_page()
    problems: list[str] = []
    opened.on("console", lambda m: problems.append(m.text) if m.type == "error" and not _refused(m) else None)
    opened.on("pageerror", lambda e: problems.append(str(e)))
    yield opened
    context.close()
    assert problems == []  # no script error, nothing the Content-Security-Policy blocked


def _refused(message: ConsoleMessage) -> bool:
    """Chromium logs the 401 without a key and the 403 to an ordinary key that these tests ask for."""
    return bool(re.fullmatch(r"Failed to load resource: .* status of 40[13] .*", message.text))


def png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB(A) rows of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat = 8, b""
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        chunk = data[at + 8 : at + 8 + length]
        at += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
    assert depth == 8 and color in (2, 6) and interlace == 0
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind_, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a, b, c = (line[i - bpp] if i >= bpp else 0), prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind_ == 4:
                p = a + b - c
                a = a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c
            line[i] = (line[i] + (0, a, b, (a + b) // 2, a)[kind_]) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r[i] for i in range(len(r)) if i % bpp < 3) for r in rows]


def pixels(data: bytes) -> list[tuple[int, int, int]]:
    _, _, rows = png(data)
    return [(r[i], r[i + 1], r[i + 2]) for r in rows for i in range(0, len(r), 3)]


def dark_share(data: bytes) -> float:
    """The share of pixels dark enough to be text."""
    found = pixels(data)
    return sum(1 for r, g, b in found if r + g + b < 300) / len(found)


def near(color: tuple[int, int, int], target: tuple[int, int, int]) -> bool:
    return all(abs(x - y) <= 12 for x, y in zip(color, target))


def until(page: Page, script: str, timeout: float = 30) -> None:
    """Polls `script` in the page (Playwright's own wait_for_function evaluates strings, which the
    page's Content-Security-Policy rightly forbids)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(script):
        assert time.monotonic() < deadline, script
        page.wait_for_timeout(50)


def open_page(page: Page, site: str, key: str) -> None:
    page.goto(f"{site}/llm/ui")
    page.fill("#key", key)
    page.click("#key-form button")
    until(page, "() => document.getElementById('model').options.length > 0")


def test_a_reply_streams_into_the_page_and_the_operator_sees_the_model(
    page: Page, site: str, server: Any, tmp_path: Path
) -> None:
    page.goto(f"{site}/llm/ui")
    notice = page.locator("#notice")
    notice.wait_for(state="visible")
    assert "API key" in notice.inner_text()  # openapi.json needs a key, like /models

    open_page(page, site, "op-key")
    assert page.evaluate("sessionStorage.getItem('asgi_llm.api_key')") == "op-key"
    assert page.input_value("#model") == MODEL
    assert page.inner_text("#endpoint") == "/llm/chat/completions"
    empty_log = page.locator("#log").screenshot()

    page.evaluate(
        """() => {
            window.seen = [];
            new MutationObserver(() => {
                const answer = document.querySelector('.turn.assistant .answer');
                window.seen.push([answer ? answer.textContent.length : 0, document.getElementById('tokens').textContent]);
            }).observe(document.getElementById('log').parentNode, {subtree: true, childList: true, characterData: true});
        }"""
    )
    page.fill("#max-tokens", "24")
    page.fill("#temperature", "0")
    page.fill("#prompt", "Write a short poem about the sea.")
    page.click("#send")
    until(page, "() => document.querySelector('.turn.assistant') && document.getElementById('stop').disabled", 60)

    answer = page.inner_text(".turn.assistant .answer")
    assert answer.strip() and page.inner_text(".turn.user") == "Write a short poem about the sea."
    seen: list[list[Any]] = page.evaluate("window.seen")
    lengths = [length for length, _ in seen]
    assert len({n for n in lengths if 0 < n < len(answer)}) >= 3, seen  # text arrived in several pieces
    counts = [int(tokens) for _, tokens in seen]
    assert len(set(counts)) >= 4 and counts == sorted(counts), seen  # a counter that grew as it streamed
    assert 1 < int(page.inner_text("#tokens")) <= 24
    assert float(page.inner_text("#tps")) > 0
    assert re.fullmatch(r"\d+\.\d\d s", page.inner_text("#ttft"))
    assert page.locator(".reasoning").is_hidden()  # this model does not reason: no reasoning box

    shot = page.screenshot(path=str(tmp_path / "chat.png"))
    width, height, _ = png(shot)
    assert (width, height) == (1200, 800)
    assert len(set(pixels(page.locator("#send").screenshot()))) > 2
    assert sum(near(p, ACCENT) for p in pixels(page.locator("#send").screenshot())) > 0.5 * len(
        pixels(page.locator("#send").screenshot())
    )  # the stylesheet applied
    reply_shot = page.locator(".turn.assistant").screenshot(path=str(tmp_path / "reply.png"))
    assert dark_share(reply_shot) > 0.01  # text drawn in the answer
    assert dark_share(page.locator("#log").screenshot()) > dark_share(empty_log)

    # the lazy model, unloaded whatever earlier tests on this shared server asked of it, shows its estimate;
    # unloaded through the server whose event loop loaded it (this page's app runs on a loop of its own)
    unloaded = httpx.post(f"{server.url}/v1/models/unload", json={"model": "chat-only"}, timeout=60)
    assert unloaded.status_code == 200, unloaded.text
    page.click("#operator-tab")
    until(page, f"() => document.getElementById('models-table').innerText.includes('{MODEL}')")
    row = page.locator(f"#models-table tbody tr[data-model='{MODEL}']")
    state, memory, cache, sequences, queue, survived = row.locator("td").all_inner_texts()[1:]
    assert state == "ready"
    human = r"\d+(\.\d)? (B|KiB|MiB|GiB)"
    assert re.fullmatch(f"RAM {human} \\(est\\. {human}\\) · GPU {human}( \\(est\\. {human}\\))?", memory), memory
    assert re.fullmatch(f"{human} of 256 MiB \\(\\d+ prompts\\)", cache.strip()), cache  # its prompt_cache_mib
    assert re.fullmatch(r"\d+ busy · \d+ free", sequences) and queue == "0", (sequences, queue)
    # the faults this shared engine has survived so far in the suite, as the operators' list says
    listed = httpx.get(f"{site}/llm/admin/models", headers={"authorization": "Bearer op-key"}).json()["data"]
    health = next(m for m in listed if m["id"] == MODEL)["health"]
    restarts = f" · {health['restarts']} restarts" if health["restarts"] else ""
    assert survived == f"{health['stalls']} stalls · {health['faults']} faults{restarts}", (survived, health)
    lazy = page.locator("#models-table tbody tr[data-model='chat-only']").inner_text()
    assert "unloaded" in lazy and "RAM not loaded (est." in lazy  # its estimate, before any load
    assert "[object Object]" not in page.inner_text("#models-table")
    usage = page.locator("#usage-table tbody tr", has_text="ops")
    usage.wait_for()
    requests, _, prompt, completion = (int(cell) for cell in usage.locator("td.num").all_inner_texts())
    assert requests >= 3 and prompt > 0 and 0 < completion <= 24  # openapi.json, models, the chat
    until(page, "() => /^\\d+\\.\\d\\d$/.test(document.getElementById('rate').textContent)", 10)
    operator = page.screenshot(path=str(tmp_path / "operator.png"))
    assert len(set(pixels(operator))) > 20
    assert dark_share(page.locator("#models-table").screenshot()) > 0.01
    cache_bar = pixels(row.locator("meter").screenshot())
    assert len(set(cache_bar)) > 2  # the prompt cache's fill, drawn


def test_the_operator_sees_each_upstream_replica(
    page: Page, server: Any, serve_app: Callable[[Starlette], Any], tmp_path: Path
) -> None:
    replicas = (f"{server.url}/v1", "http://127.0.0.1:9/v1")  # the e2e server, and nothing
    remote = ModelConfig(id="remote", base_urls=replicas, upstream_model=MODEL, health_interval=0.5, connect_timeout=1)
    gateway = LLMApp(Settings(models=(remote,)), adapters=(OPENAI,), web_ui=True)
    with serve_app(Starlette(routes=[Mount("/gw", app=gateway)], lifespan=gateway.lifespan)) as url:
        page.goto(f"{url}/gw/ui")
        until(page, "() => document.getElementById('model').options.length > 0")
        page.click("#operator-tab")
        until(page, "() => document.querySelectorAll('#models-table tr.replica-row').length === 2")
        until(page, "() => document.querySelector('#models-table tr.replica-row').innerText.includes('up')", 10)
        first, second = page.locator("#models-table tr.replica-row").all_inner_texts()
        assert "replica 0" in first and "\tup\t" in first and "in flight" in first
        assert "replica 1" in second and "\tdown\t" in second
        model = page.locator("#models-table tbody tr[data-model='remote']").inner_text()
        assert "held by the upstream" in model and "ready" in model
        table = page.locator("#models-table").screenshot(path=str(tmp_path / "replicas.png"))
        assert dark_share(table) > 0.003  # text drawn in every row
        shades = Counter(pixels(table))
        assert any(near(color, (0xB4, 0x23, 0x18)) for color in shades)  # the replica that is down, in --bad


def test_an_ordinary_key_chats_but_sees_no_usage(page: Page, site: str) -> None:
    open_page(page, site, "user-key")
    page.click("#operator-tab")
    page.locator("#usage-note").wait_for(state="visible")
    assert page.inner_text("#usage-note") == "Usage and rates need an operator key."
    assert page.locator("#usage-table tbody tr").count() == 0
    until(page, f"() => document.getElementById('models-table').innerText.includes('{MODEL}')")  # /health


def test_the_host_is_untouched(site: str) -> None:
    assert httpx.get(f"{site}/home").text == "host home"
    assert httpx.get(f"{site}/ui").status_code == 404  # the page lives only below the mount


class ThinkingEngine(FakeEngine):
    """A scripted model that reasons before it answers (the packaged model never reasons)."""

    async def _events(self, request: GenerationRequest) -> AsyncGenerator[Any, None]:
        for piece in ("Two", " and", " two", " make", " four."):
            await asyncio.sleep(0.03)
            yield ReasoningDelta(piece)
        for piece in ("The", " answer", " is", " 4."):
            await asyncio.sleep(0.03)
            yield TextDelta(piece)
        yield Finish("stop", Usage(prompt_tokens=3, completion_tokens=9))


@pytest.mark.parametrize("adapter", [OPENAI, OLLAMA], ids=lambda a: a.name)
def test_reasoning_shows_apart_from_the_answer_in_either_protocol(
    page: Page, serve_app: Callable[[Starlette], Any], adapter: Adapter, tmp_path: Path
) -> None:
    pool = ModelPool(
        Settings(models=(ModelConfig(id="thinker", path="unused.gguf"),)),
        engine_factory=lambda config, thread: ThinkingEngine(config, thread),
    )
    llm = LLMApp(pool=pool, adapters=(adapter,), web_ui=True)
    with serve_app(Starlette(routes=[Mount("/x", app=llm)], lifespan=llm.lifespan)) as url:
        page.goto(f"{url}/x/ui/")  # the trailing slash is as good as none
        until(page, "() => document.getElementById('model').options.length > 0")
        assert page.inner_text("#endpoint") == ("/x/chat/completions" if adapter is OPENAI else "/x/api/chat")
        page.fill("#prompt", "What is two and two?")
        page.press("#prompt", "Enter")
        until(page, "() => document.querySelector('.turn.assistant') && document.getElementById('stop').disabled")
        assert page.inner_text(".reasoning .thought") == "Two and two make four."
        assert page.inner_text(".turn.assistant .answer") == "The answer is 4."
        assert page.locator(".reasoning").is_visible()
        assert page.inner_text("#tokens") == "9"
        assert float(page.inner_text("#tps")) > 0
        thought = pixels(page.locator(".reasoning").screenshot(path=str(tmp_path / "reasoning.png")))
        answer = pixels(page.locator(".turn.assistant .answer").screenshot())
        assert near(Counter(thought).most_common(1)[0][0], THINK)  # its own tinted box...
        assert Counter(answer).most_common(1)[0][0] == (255, 255, 255)  # ...apart from the answer
