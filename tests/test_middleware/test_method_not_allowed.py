"""A 405 says which methods its path takes, in an `Allow` header (RFC 9110), and in its message."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm import LLMApp

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/chat/completions", "POST"),
        ("GET", "/completions", "POST"),
        ("GET", "/embeddings", "POST"),
        ("PUT", "/chat/completions/", "POST"),  # the slash-tolerant path too
        ("POST", "/models", "GET, HEAD"),  # HEAD wherever GET is: the router serves it
    ],
)
async def test_a_wrong_method_is_a_405_with_allow(kit: Any, method: str, path: str, allowed: str) -> None:
    llm = LLMApp(pool=kit.fake_pool(), adapters=kit.ALL)
    async with kit.running(llm):
        reply = await kit.drive(llm, method, path, json={} if method != "GET" else None)
    assert reply.status == 405
    assert reply.headers["allow"] == allowed
    assert reply.json()["error"]["message"] == f"Use {allowed} here."
