"""Loading a model leaves the host's output alone: no redirected file descriptors, no swapped
`sys.stderr`, and llama.cpp's own log lines in our logger, where the host's logging decides."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import EmbeddingRequest

from .local_engine import local_engine

pytestmark = [pytest.mark.anyio, pytest.mark.model]


async def test_loading_and_embedding_leave_stdout_and_stderr_alone(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    redirected: list[tuple[Any, ...]] = []
    dup2 = os.dup2
    monkeypatch.setattr(os, "dup2", lambda *args: redirected.append(args) or dup2(*args))
    streams = (sys.stdout, sys.stderr)
    caplog.set_level(logging.DEBUG, logger="asgi_llm.llama_cpp")
    async with local_engine(ModelConfig(n_ctx=256)) as engine:
        result = await engine.embed(EmbeddingRequest(model="default", inputs=("hello there",)))
        assert (sys.stdout, sys.stderr) == streams
    assert redirected == []
    assert len(result.embeddings[0].vector) == 576  # SmolLM2-135M's width
    records = [r for r in caplog.records if r.name == "asgi_llm.llama_cpp"]
    assert any(r.levelno == logging.DEBUG and "llama_model_loader" in r.getMessage() for r in records)
    assert all(r.levelno <= logging.WARNING for r in records)  # a real failure is raised as our own error
