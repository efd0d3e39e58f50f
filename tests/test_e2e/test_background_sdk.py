"""Responses in the background, with the official openai SDK against `asgi-llm serve` and the real
model: created `queued`, polled to the end, cancelled mid-generation (its sequence freed at once),
its stream resumed from a sequence number, counted in usage, and failed — not left
`in_progress` — by a restart of the server that ran it."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.responses import Response

MODEL = "SmolLM2-135M-Instruct"
LONG = "Write a very long story about a dragon and a knight, with many chapters."
CONFIG = """
state_store = "sqlite"
state_path = "{state}"
usage_jsonl = "{usage}"
[[models]]
id = "{model}"
aliases = ["default"]
n_ctx = 2048
parallel = 1
n_threads = 1
"""


@contextlib.contextmanager
def _serve(config: Path, port: int) -> Iterator[subprocess.Popen[str]]:
    """`asgi-llm serve` with a persistent store; the test may kill it (no clean exit asked of it)."""
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command
    args = [command, "serve", "--config", str(config), "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    try:
        while True:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200:
                    break
            assert time.monotonic() < deadline, "server did not become healthy"
            time.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
        process.communicate(timeout=30)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    folder = tmp_path_factory.mktemp("background")
    config, usage = folder / "config.toml", folder / "usage.jsonl"
    config.write_text(CONFIG.format(state=folder / "state.sqlite3", usage=usage, model=MODEL))
    with contextlib.closing(__import__("socket").socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    return config, usage, port


@pytest.fixture(scope="module")
def server(setup: tuple[Path, Path, int]) -> Iterator[subprocess.Popen[str]]:
    config, _, port = setup
    with _serve(config, port) as process:
        yield process


@pytest.fixture(scope="module")
def sdk(server: subprocess.Popen[str], setup: tuple[Path, Path, int]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"http://127.0.0.1:{setup[2]}/v1", api_key="x", max_retries=0, timeout=60) as client:
        yield client


def _until(sdk: openai.OpenAI, response_id: str, done: tuple[str, ...], timeout: float = 60) -> Response:
    deadline = time.monotonic() + timeout
    while True:
        response = sdk.responses.retrieve(response_id)
        if response.status in done or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def _usage_of_posts(usage: Path, timeout: float = 30) -> list[dict[str, object]]:
    """The usage records of POSTs to /responses. A background call's record is written when its ASGI
    call returns, just after its final state is stored, so a poller may see `completed` first."""
    deadline = time.monotonic() + timeout
    while True:
        lines = usage.read_text().split("\n")[:-1] if usage.exists() else []  # whole lines only
        records = [json.loads(line) for line in lines]
        posted = [r for r in records if r["endpoint"] == "/responses" and r["method"] == "POST"]
        if posted or time.monotonic() > deadline:
            return posted
        time.sleep(0.05)


def test_polled_to_completion_and_counted_in_usage(sdk: openai.OpenAI, setup: tuple[Path, Path, int]) -> None:
    created = sdk.responses.create(model="default", input="What is 2+2?", background=True, max_output_tokens=24)
    assert created.status == "queued" and created.background is True and created.output == []
    assert created.model == MODEL
    final = _until(sdk, created.id, ("completed", "incomplete"))
    assert final.status in ("completed", "incomplete") and final.background is True
    assert final.output_text and final.usage is not None and 0 < final.usage.output_tokens <= 24
    posted = _usage_of_posts(setup[1])
    assert posted[-1]["completion_tokens"] == final.usage.output_tokens  # the generation, not just the answer
    assert posted[-1]["prompt_tokens"] == final.usage.input_tokens and posted[-1]["status"] == 200


def test_a_stream_resumes_from_a_sequence_number_with_nothing_missing_or_repeated(sdk: openai.OpenAI) -> None:
    stream = sdk.responses.create(
        model="default", input="Count from one to ten.", background=True, stream=True, max_output_tokens=40
    )
    first = []
    for event in stream:
        first.append(event)
        if event.type == "response.output_text.delta" and len(first) >= 6:
            break
    stream.close()  # the client leaves: the response goes on
    response_id = first[0].response.id  # type: ignore[union-attr]
    assert [e.type for e in first[:2]] == ["response.created", "response.queued"]
    assert first[0].response.status == "queued"  # type: ignore[union-attr]
    after = first[-1].sequence_number
    rest = list(sdk.responses.retrieve(response_id, stream=True, starting_after=after))
    numbers = [e.sequence_number for e in first + rest]
    assert numbers == list(range(len(numbers)))
    assert rest[-1].type in ("response.completed", "response.incomplete")
    text = "".join(e.delta for e in first + rest if e.type == "response.output_text.delta")
    assert text == rest[-1].response.output_text  # type: ignore[union-attr]
    again = list(sdk.responses.retrieve(response_id, stream=True, starting_after=2))  # once ended: from the store
    assert [e.sequence_number for e in again] == numbers[3:]


def test_cancel_stops_the_generation_and_frees_its_sequence(sdk: openai.OpenAI) -> None:
    created = sdk.responses.create(model="default", input=LONG, background=True, max_output_tokens=1500)
    _until(sdk, created.id, ("in_progress",))
    time.sleep(0.3)
    cancelled = sdk.responses.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.id == created.id
    started = time.monotonic()
    quick = sdk.responses.create(model="default", input="Hi", max_output_tokens=4)  # one sequence: it was freed
    assert quick.status in ("completed", "incomplete") and time.monotonic() - started < 10
    stored = sdk.responses.retrieve(created.id)
    assert stored.status == "cancelled" and stored.output and stored.output[0].status == "incomplete"
    assert 0 < len(stored.output_text) < 1500 * 3  # stopped well short of its budget
    assert sdk.responses.cancel(created.id).status == "cancelled"  # again: answered as it is


def test_background_needs_the_store(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model="default", input="Hi", background=True, store=False)
    assert caught.value.status_code == 400 and caught.value.body["param"] == "background"  # type: ignore[index]


def test_a_restart_fails_what_was_running(setup: tuple[Path, Path, int], server: subprocess.Popen[str]) -> None:
    """Last in this module: it kills the module's server."""
    config, _, port = setup
    base = f"http://127.0.0.1:{port}/v1"
    with openai.OpenAI(base_url=base, api_key="x", max_retries=0, timeout=60) as sdk:
        created = sdk.responses.create(model="default", input=LONG, background=True, max_output_tokens=1500)
        assert _until(sdk, created.id, ("in_progress",)).status == "in_progress"
    server.kill()
    server.wait()
    with _serve(config, port), openai.OpenAI(base_url=base, api_key="x", max_retries=0) as sdk:
        failed = sdk.responses.retrieve(created.id)
        assert failed.status == "failed" and failed.error is not None
        assert failed.error.code == "server_error" and "stopped" in failed.error.message
