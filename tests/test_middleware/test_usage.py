"""Exactly one usage record per request — streams, errors and disconnects included — and the sinks."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from asgi_llm import KeyInfo, LLMApp
from asgi_llm.core import EngineEvent, GenerationRequest, Overloaded, TextDelta
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.middleware import AuthMiddleware, KeyStore, Ledger, UsageMiddleware, UsageRecord

pytestmark = pytest.mark.anyio

KEY = "sk-usage-0123456789"


def recorded_app(kit: Any, records: list[UsageRecord], **engine_options: Any) -> LLMApp:
    layers = [
        functools.partial(UsageMiddleware, sinks=[records.append]),
        functools.partial(AuthMiddleware, verify=KeyStore([(KEY, KeyInfo("team"))])),
    ]
    return LLMApp(pool=kit.fake_pool(**engine_options), adapters=kit.ALL, middleware=layers)


AUTH = [("x-api-key", KEY)]


async def test_a_request_gets_one_record_with_its_tokens_model_key_and_timings(kit: Any) -> None:
    records: list[UsageRecord] = []
    llm = recorded_app(kit, records)
    async with kit.running(llm):
        reply = await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "model": "default"}, headers=AUTH)
    assert reply.status == 200
    (record,) = records
    assert (record.key, record.protocol, record.endpoint, record.method) == (
        "team",
        "openai",
        "/chat/completions",
        "POST",
    )
    assert record.model == "fake"  # the canonical id, not the alias the client sent
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens, record.total_tokens) == (3, 2, 0, 5)
    assert (record.status, record.disconnected) == (200, False)
    assert record.time_to_first_token is not None and 0 <= record.time_to_first_token <= record.duration
    assert len(record.id) == 32 and record.started > 1.7e9


async def test_each_protocol_and_a_stream_is_recorded_once(kit: Any) -> None:
    records: list[UsageRecord] = []
    llm = recorded_app(kit, records, engine=kit.SlowEngine)
    async with kit.running(llm):
        await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}, headers=AUTH)
        await kit.drive(
            llm, "POST", "/messages", json=kit.MESSAGES, headers=[*AUTH, ("anthropic-version", "2023-06-01")]
        )
        await kit.drive(llm, "POST", "/api/chat", json={**kit.OLLAMA_CHAT, "stream": True}, headers=AUTH)
        await kit.drive(llm, "POST", "/embeddings", json={"model": "fake", "input": ["a", "b"]}, headers=AUTH)
    assert [(r.protocol, r.endpoint, r.status) for r in records] == [
        ("openai", "/chat/completions", 200),
        ("anthropic", "/messages", 200),
        ("ollama", "/api/chat", 200),
        ("openai", "/embeddings", 200),
    ]
    assert [(r.prompt_tokens, r.completion_tokens) for r in records] == [(3, 2), (3, 2), (3, 2), (2, 0)]
    assert all(r.time_to_first_token is not None for r in records[:3])
    assert records[3].time_to_first_token is None


async def test_a_stream_the_client_leaves_is_recorded_once_as_disconnected(kit: Any) -> None:
    records: list[UsageRecord] = []
    llm = recorded_app(kit, records, engine=kit.SlowEngine, pieces=tuple(f"t{i} " for i in range(50)))
    async with kit.running(llm):
        reply = await kit.drive(
            llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}, headers=AUTH, leave_after=3
        )
        await asyncio.sleep(0.05)  # nothing more is recorded later
    assert reply.status == 200 and not reply.complete
    (record,) = records
    assert record.disconnected and record.status == 200 and record.model == "fake"
    assert 2 <= record.completion_tokens < 50  # what was generated before the client left
    assert record.time_to_first_token is not None


async def test_errors_and_clients_that_leave_before_a_response_are_recorded(kit: Any) -> None:
    records: list[UsageRecord] = []
    llm = recorded_app(kit, records)
    async with kit.running(llm):
        await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "model": "nope"}, headers=AUTH)
        await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT)  # no key: 401
        await kit.drive(llm, "POST", "/chat/completions", body=b"{not json", headers=AUTH)
        await kit.drive(llm, "POST", "/chat/completions", headers=AUTH, leave_before_body=True)
    assert [(r.status, r.key, r.model, r.disconnected) for r in records] == [
        (404, "team", None, False),
        (401, None, None, False),
        (400, "team", None, False),
        (499, "team", None, True),
    ]
    assert all(r.total_tokens == 0 for r in records)


async def test_an_app_that_crashes_is_recorded_as_500_and_the_error_propagates() -> None:
    records: list[UsageRecord] = []

    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    app = UsageMiddleware(broken, sinks=[records.append])
    with pytest.raises(RuntimeError):
        await app({"type": "http", "method": "GET", "path": "/x", "headers": []}, _never, _discard)
    assert [(r.status, r.protocol, r.endpoint) for r in records] == [(500, "http", "/x")]


async def _never() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError


async def _discard(message: Any) -> None:
    pass


async def test_sinks_may_be_sync_or_async_and_a_failing_one_harms_nobody(
    kit: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sync_seen: list[UsageRecord] = []
    async_seen: list[UsageRecord] = []

    async def slow(record: UsageRecord) -> None:
        await asyncio.sleep(0)
        async_seen.append(record)

    def failing(record: UsageRecord) -> None:
        raise ValueError("sink down")

    async def plain(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = UsageMiddleware(plain, sinks=[failing, sync_seen.append, slow])
    reply = await kit.drive(app, "GET", "/anything")
    assert reply.status == 204
    assert len(sync_seen) == len(async_seen) == 1 and sync_seen[0] is async_seen[0]
    assert "usage sink" in caplog.text


async def test_excluded_paths_are_not_recorded(kit: Any) -> None:
    records: list[UsageRecord] = []
    llm = LLMApp(
        pool=kit.fake_pool(),
        middleware=[functools.partial(UsageMiddleware, sinks=[records.append], exclude=["/health"])],
    )
    async with kit.running(llm):
        await kit.drive(llm, "GET", "/health")
        await kit.drive(llm, "GET", "/models")
    assert [r.endpoint for r in records] == ["/models"]


async def test_json_lines_and_logging_sinks(kit: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="asgi_llm.usage")
    path = tmp_path / "usage.jsonl"
    llm = LLMApp(pool=kit.fake_pool(kit.fake_settings(usage_jsonl=str(path), usage_log=True)))
    async with kit.running(llm):
        await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT)
        await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["endpoint"], x["model"], x["completion_tokens"], x["status"]) for x in lines] == [
        ("/chat/completions", "fake", 2, 200)
    ] * 2
    assert set(lines[0]) == {f for f in UsageRecord.__dataclass_fields__}
    assert caplog.text.count("openai POST /chat/completions key=- model=fake status=200 prompt=3 completion=2") == 2


async def test_the_ledger_keeps_every_record_under_concurrent_writers(kit: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.sqlite3")
    ledgers = [Ledger(path), Ledger(path)]  # as two worker processes would
    settings = kit.fake_settings(usage_ledger=path)
    llm = LLMApp(pool=kit.fake_pool(settings))
    records: list[UsageRecord] = []

    async def direct(i: int) -> None:
        record = UsageRecord(
            f"id-{i}", 1000.0 + i, "k", "openai", "/x", "POST", "m", 1, 2, 0, 0.1, 0.2, 200, i % 2 == 0
        )
        records.append(record)
        await ledgers[i % 2].record(record)

    async with kit.running(llm):
        await asyncio.gather(
            *(kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT) for _ in range(10)),
            *(direct(i) for i in range(20)),
        )
    stored = await Ledger(path).records(limit=100)
    assert len(stored) == 30
    assert [r for r in stored if r.key == "k"] == records
    served = [r for r in stored if r.key is None]
    assert len(served) == 10 and all((r.model, r.prompt_tokens, r.completion_tokens) == ("fake", 3, 2) for r in served)
    assert await Ledger(path).records(key="k", since=1010.0) == records[10:]


async def test_every_response_carries_a_request_id_that_its_record_keeps(kit: Any) -> None:
    records: list[UsageRecord] = []
    llm = recorded_app(kit, records)
    async with kit.running(llm):
        made = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)
        own = [*AUTH, ("x-request-id", "abc.123:x-y")]
        given = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=own)
        bad = [*AUTH, ("x-request-id", "has spaces, " + "x" * 200)]
        unusable = await kit.drive(llm, "GET", "/models", headers=bad)
        streamed = await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}, headers=AUTH)
        refused = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT)  # no key: a 401
        missing = await kit.drive(llm, "GET", "/no/such/route", headers=AUTH)
    replies = [made, given, unusable, streamed, refused, missing]
    ids = [reply.headers["x-request-id"] for reply in replies]
    assert ids[1] == "abc.123:x-y"  # the client's own, echoed
    assert all(rid.startswith("req_") and len(rid) == 28 for i, rid in enumerate(ids) if i != 1)
    assert len(set(ids)) == len(ids) and [r.status for r in replies] == [200, 200, 200, 200, 401, 404]
    assert [record.request_id for record in records] == ids  # the same id in each usage record


async def test_a_ledger_from_before_request_ids_takes_them_on(tmp_path: Path) -> None:
    import sqlite3

    path = str(tmp_path / "old.sqlite3")
    with sqlite3.connect(path) as db:  # the table as earlier versions made it
        db.execute(
            "CREATE TABLE usage (id TEXT PRIMARY KEY, started REAL NOT NULL, key TEXT, protocol TEXT NOT NULL, "
            "endpoint TEXT NOT NULL, method TEXT NOT NULL, model TEXT, prompt_tokens INTEGER NOT NULL, "
            "completion_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL, time_to_first_token REAL, "
            "duration REAL NOT NULL, status INTEGER NOT NULL, disconnected INTEGER NOT NULL)"
        )
        db.execute("INSERT INTO usage VALUES ('old', 1.0, 'k', 'openai', '/x', 'POST', 'm', 1, 1, 0, NULL, 0.1, 200, 0)")
    ledger = Ledger(path)
    new = UsageRecord("new", 2.0, "k", "openai", "/x", "POST", "m", 1, 1, 0, None, 0.1, 200, False, request_id="req_1")
    await ledger.record(new)
    assert [(r.id, r.request_id) for r in await ledger.records()] == [("old", ""), ("new", "req_1")]


class BreaksMidStream(FakeEngine):
    """One piece, then `failure` (after the stream's 200 went out)."""

    failure: Exception = Overloaded("Too many requests are waiting for this model.")

    async def _events(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        yield TextDelta("partial ")
        raise self.failure


class CrashesMidStream(BreaksMidStream):
    failure = RuntimeError("a bug")


@pytest.mark.parametrize(("engine", "status"), [(BreaksMidStream, 503), (CrashesMidStream, 500)])
async def test_a_stream_ended_by_an_error_event_is_recorded_with_that_errors_status(
    kit: Any, engine: type[FakeEngine], status: int
) -> None:
    """The wire said 200 before the error, and can only end with an error event; the record
    must not call that a success."""
    records: list[UsageRecord] = []
    llm = recorded_app(kit, records, engine=engine)
    async with kit.running(llm):
        reply = await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}, headers=AUTH)
    assert reply.status == 200 and b'"error"' in reply.body
    (record,) = records
    assert (record.status, record.disconnected, record.model) == (status, False, "fake")
