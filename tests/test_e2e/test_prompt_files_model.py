"""Saved prompts on disk with the real model (issue 39): a long system prompt read once is saved,
and after a restart (a new app over the same directory) the next request sharing it reads only
what is new, reports the tokens it reused in every protocol's usage, and writes exactly what it
would have written without the file (greedy)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from asgi_llm import LLMApp, ModelConfig, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI

pytestmark = pytest.mark.model

SYSTEM = " ".join(
    f"Rule {n}: the {colour} lantern of station {n} stays lit from dusk until the {colour} flag is lowered."
    for n, colour in enumerate(("red", "green", "amber", "blue", "white", "violet", "grey", "gold") * 2)
)


@contextmanager
def app(directory: Path | None) -> Iterator[TestClient]:
    """One app's whole life: its lifespan loads the model, and its end unloads it."""
    model = ModelConfig(
        aliases=["default"], n_ctx=1024, n_threads=2, parallel=1, prompt_cache_dir=directory and str(directory)
    )
    llm = LLMApp(Settings(models=[model]), adapters=(OPENAI, ANTHROPIC, OLLAMA))
    with TestClient(llm) as client:
        yield client


def ask(client: TestClient, question: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    body = {"model": "default", "messages": messages, "max_tokens": 12, "temperature": 0}
    reply = client.post("/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def test_a_long_prompt_saved_before_a_restart_is_read_from_disk_after_it(tmp_path: Path) -> None:
    with app(tmp_path) as client:
        first = ask(client, "Which lantern is at station 3?")
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert first["usage"]["prompt_tokens"] > 300
    (directory,) = tmp_path.iterdir()  # one model, one fingerprint
    assert len([f for f in directory.iterdir() if f.suffix == ".prompt"]) == 1

    with app(tmp_path) as client:
        second = ask(client, "When is the gold flag lowered?")
        (row,) = client.get("/health").json()["models"]
        assert row["backend"]["prompt_files"]["reads"] == 1, row
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert 300 < cached < second["usage"]["prompt_tokens"]
        # the reused tokens in the other protocols' usage (from the sequence's cache, this time)
        body = {"model": "default", "system": SYSTEM, "max_tokens": 4, "temperature": 0}
        question = [{"role": "user", "content": "Which lantern is at station 2?"}]
        anthropic = client.post("/messages", json={**body, "messages": question})
        assert anthropic.status_code == 200, anthropic.text
        usage = anthropic.json()["usage"]
        assert usage["cache_read_input_tokens"] > 300 and usage["input_tokens"] < 40
        generate = {"model": "default", "system": SYSTEM, "prompt": "Which lantern is at station 4?", "stream": False}
        ollama = client.post("/api/generate", json={**generate, "options": {"num_predict": 4, "temperature": 0}})
        assert ollama.status_code == 200, ollama.text
        assert 0 < ollama.json()["prompt_eval_count"] < 40  # as Ollama counts: only the tokens it evaluated

    with app(None) as client:
        fresh = ask(client, "When is the gold flag lowered?")
    assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["choices"][0]["message"]["content"] == fresh["choices"][0]["message"]["content"]
