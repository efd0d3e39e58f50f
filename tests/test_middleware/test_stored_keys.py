"""Keys made by `asgi-llm keys`: hashed in SQLite, read on every request, expiring, revocable."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from asgi_llm import LLMApp
from asgi_llm.core import Unauthorized
from asgi_llm.middleware import KeyExists, KeyInfo, Limits, SQLiteKeys
from asgi_llm.middleware.keyring import hash_key, parse_expiry

pytestmark = pytest.mark.anyio

NOW = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("text", "when"),
    [
        ("2027-01-01", dt.datetime(2027, 1, 1, tzinfo=dt.UTC)),
        ("2027-01-01T08:30:00+02:00", dt.datetime(2027, 1, 1, 6, 30, tzinfo=dt.UTC)),
        ("90m", NOW + dt.timedelta(minutes=90)),
        ("12h", NOW + dt.timedelta(hours=12)),
        ("30d", NOW + dt.timedelta(days=30)),
        ("2w", NOW + dt.timedelta(days=14)),
    ],
)
def test_expiry_is_a_date_a_time_or_a_duration_from_now(text: str, when: dt.datetime) -> None:
    assert parse_expiry(text, NOW) == when


def test_an_unreadable_expiry_is_refused() -> None:
    with pytest.raises(ValueError, match="give a date"):
        parse_expiry("next tuesday", NOW)


async def test_only_a_hash_is_stored_and_the_stored_key_is_what_it_was_given(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    keys = SQLiteKeys(path)
    assert not SQLiteKeys.holds_keys(path) and not SQLiteKeys.holds_keys(tmp_path / "absent.sqlite3")
    key = keys.create("team", operator=True, models=("default",), limits=Limits(requests_per_minute=5))
    assert key.startswith("sk-llm-") and len(key) > 40 and SQLiteKeys.holds_keys(path)
    dump = "\n".join(sqlite3.connect(path).iterdump())
    assert key not in dump and hash_key(key) in dump
    assert await keys(key) == KeyInfo(
        "team", models=frozenset({"default"}), limits=Limits(requests_per_minute=5), operator=True
    )
    assert await keys(key + "x") is None and await keys("sk-other") is None
    with pytest.raises(KeyExists, match="exists already"):
        keys.create("team")
    [listed] = keys.list()
    assert (listed.name, listed.status(dt.datetime.now(dt.UTC)), listed.operator) == ("team", "active", True)


async def test_a_revoked_key_is_invalid_and_an_expired_one_says_so(tmp_path: Path) -> None:
    keys = SQLiteKeys(tmp_path / "state.sqlite3")
    gone = keys.create("gone")
    old = keys.create("old", expires=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    assert keys.revoke("gone") and not keys.revoke("gone") and not keys.revoke("nobody")
    assert await keys(gone) is None
    with pytest.raises(Unauthorized, match="This API key expired at 2020-01-01T00:00:00Z."):
        await keys(old)
    assert SQLiteKeys.holds_keys(keys.path)  # revoked keys still count: everyone stays refused
    assert {k.name: k.status(dt.datetime.now(dt.UTC)) for k in keys.list()} == {"gone": "revoked", "old": "expired"}


def app_with_keys(kit: Any, path: Path, engine: Any = None) -> LLMApp:
    settings = kit.fake_settings(keys_db=str(path))
    return LLMApp(pool=kit.fake_pool(settings, engine=engine or kit.SlowEngine), adapters=kit.ALL)


async def test_the_app_checks_the_table_on_every_request_so_revoking_is_immediate(kit: Any, tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    keys = SQLiteKeys(path)
    key = keys.create("team", limits=Limits(requests_per_minute=10))
    llm = app_with_keys(kit, path, type("Slower", (kit.SlowEngine,), {"step": 0.3}))
    auth = [("authorization", f"Bearer {key}")]
    async with kit.running(llm):
        assert (await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT)).status == 401
        ok = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=auth)
        assert ok.status == 200 and ok.headers["x-ratelimit-remaining-requests"] == "9"  # the key's own limits
        in_flight = asyncio.create_task(
            kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}, headers=auth)
        )
        await asyncio.sleep(0.4)  # the stream has begun: one piece is out, one to come
        assert not in_flight.done()
        SQLiteKeys(path).revoke("team")  # as `asgi-llm keys revoke` does, from another connection
        refused = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=auth)
        assert not in_flight.done()
        finished = await in_flight
    assert refused.status == 401 and refused.json()["error"]["message"] == "Invalid API key."
    assert finished.status == 200 and finished.complete and b"[DONE]" in finished.body


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "ollama"])
async def test_an_expired_key_is_401_in_the_callers_envelope(kit: Any, tmp_path: Path, protocol: str) -> None:
    path = tmp_path / "state.sqlite3"
    key = SQLiteKeys(path).create("old", expires=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    route, body, extra = {
        "openai": ("/chat/completions", kit.CHAT, []),
        "anthropic": ("/messages", kit.MESSAGES, [("anthropic-version", "2023-06-01")]),
        "ollama": ("/api/chat", kit.OLLAMA_CHAT, []),
    }[protocol]
    llm = app_with_keys(kit, path)
    async with kit.running(llm):
        reply = await kit.drive(llm, "POST", route, json=body, headers=[*extra, ("x-api-key", key)])
    assert reply.status == 401 and reply.headers["www-authenticate"] == "Bearer"
    message = "This API key expired at 2020-01-01T00:00:00Z."
    answer = reply.json()
    if protocol == "openai":
        assert answer["error"]["message"] == message and answer["error"]["type"] == "authentication_error"
    elif protocol == "anthropic":
        assert answer["error"] == {"type": "authentication_error", "message": message}
    else:
        assert answer["error"] == message
    assert kit.SlowEngine.generations == 0
