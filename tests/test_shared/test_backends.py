"""The shared backends in one process against the real servers: exact admission by two limiters
(two processes' worth), leases, bounded fail-closed and fail-open answers, usage kept while
PostgreSQL is down and written once it is back, the Responses store's bounds, and the rules
`asgi-llm serve --workers` and the settings follow."""

from __future__ import annotations

import logging
import socket
import time
import uuid

import anyio
import pytest
from redis.asyncio import Redis

from asgi_llm.cli.serve import main, per_process_state
from asgi_llm.config import Settings
from asgi_llm.core import RateLimited, SharedStateStore, Unavailable
from asgi_llm.core.policy import Limits
from asgi_llm.middleware.limits import MemoryBudgets
from asgi_llm.middleware.usage import UsageRecord
from asgi_llm.serving.background import RUN_SUFFIX, BackgroundRuns
from asgi_llm.shared.guard import Guard
from asgi_llm.shared.postgres import PostgresDB
from asgi_llm.shared.postgres_keys import PostgresKeys
from asgi_llm.shared.postgres_ledger import PostgresLedger
from asgi_llm.shared.postgres_store import PostgresStore
from asgi_llm.shared.redis_limits import RedisBudgets, RedisLimiter, redis_client

from .servers import PostgresServer, RedisServer, free_port

pytestmark = pytest.mark.anyio


class _OneProcess(RedisLimiter):
    """A gate with a Redis client of its own, as one process has: closing it closes the client too."""

    def __init__(self, client: Redis, guard: Guard, lease: float) -> None:
        super().__init__(client, Limits(), budgets=MemoryBudgets(), guard=guard, lease_seconds=lease)
        self.client = client

    async def aclose(self) -> None:
        await super().aclose()
        await self.client.aclose()


def _limiter(url: str, *, fail_open: bool = False, lease: float = 10.0, timeout: float = 0.5) -> RedisLimiter:
    guard = Guard("rate-limit store", timeout=timeout, fail_open=fail_open)
    return _OneProcess(redis_client(url, timeout), guard, lease)


async def test_two_limiters_admit_exactly_the_limit_together(redis_server: RedisServer) -> None:
    # a roomy timeout: 40 admissions at once on a busy machine are a count to check, not a wait to time
    processes = [_limiter(redis_server.url, timeout=10.0), _limiter(redis_server.url, timeout=10.0)]
    key, limits = uuid.uuid4().hex, Limits(requests_per_minute=7, max_concurrent=20)
    admitted: list[bool] = []

    async def one(index: int) -> None:
        admission = await processes[index % 2].enter(key, limits)
        admitted.append(admission.refusal is None)

    try:
        async with anyio.create_task_group() as group:
            for index in range(40):
                group.start_soon(one, index)
    finally:
        for process in processes:
            await process.aclose()
    assert admitted.count(True) == 7 and len(admitted) == 40


async def test_concurrency_slots_are_leases_renewed_while_held(redis_server: RedisServer) -> None:
    a, b = _limiter(redis_server.url, lease=0.6), _limiter(redis_server.url, lease=0.6)
    key, limits = uuid.uuid4().hex, Limits(max_concurrent=1)
    held = await a.enter(key, limits)
    assert held.refusal is None and held.lease is not None
    await anyio.sleep(1.5)  # more than two leases: renewed by `a` meanwhile
    refused = await b.enter(key, limits)
    assert isinstance(refused.refusal, RateLimited) and "limit 1" in refused.refusal.message
    await a.leave(key, limits, held, tokens=0)
    assert (await b.enter(key, limits)).refusal is None
    await a.aclose()
    await b.aclose()


async def test_tokens_per_minute_and_redis_budgets(redis_server: RedisServer) -> None:
    guard = Guard("rate-limit store", timeout=0.5, fail_open=False)
    client = redis_client(redis_server.url, 0.5)
    limiter = RedisLimiter(client, Limits(), budgets=RedisBudgets(client, guard), guard=guard)
    key, limits = uuid.uuid4().hex, Limits(tokens_per_minute=10, tokens_per_day=100)
    first = await limiter.enter(key, limits)
    await limiter.leave(key, limits, first, tokens=12)
    refused = await limiter.enter(key, limits)
    assert isinstance(refused.refusal, RateLimited) and "10 tokens per minute" in refused.refusal.message
    assert ("x-ratelimit-remaining-tokens", "0") in refused.headers
    assert await limiter.budgets.spent(key, 0) == 12
    await limiter.aclose()
    await client.aclose()


async def test_an_unreachable_redis_is_a_quick_503_or_with_fail_open_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    closed, opened = _limiter(nowhere), _limiter(nowhere, fail_open=True)
    started = time.monotonic()
    refused = await closed.enter("k", Limits(requests_per_minute=5))
    assert isinstance(refused.refusal, Unavailable) and refused.refusal.status == 503
    assert "redis" not in refused.refusal.message and time.monotonic() - started < 2
    with caplog.at_level(logging.WARNING, logger="asgi_llm.shared"):
        admitted = await opened.enter("k", Limits(requests_per_minute=5))
    assert admitted.refusal is None and "serving without it (fail_open)" in caplog.text
    await opened.leave("k", Limits(requests_per_minute=5), admitted, tokens=3)  # kept for later, not raised
    await closed.aclose()
    await opened.aclose()


def _record(key: str) -> UsageRecord:
    return UsageRecord(
        uuid.uuid4().hex, time.time(), key, "openai", "/chat/completions", "POST", "m", 3, 4, 0, 0.1, 0.2, 200, False
    )


async def test_usage_written_while_postgres_is_down_is_kept_and_written_when_it_is_back(
    postgres_server: PostgresServer,
) -> None:
    db = PostgresDB(postgres_server.url, Guard("database", timeout=1.0, fail_open=True))
    ledger, keys = PostgresLedger(db), PostgresKeys(db)
    key = keys.create(f"k{uuid.uuid4().hex[:8]}")
    name = (await keys(key)).name  # type: ignore[union-attr]  # seen in force: remembered
    await ledger.record(_record(name))
    postgres_server.stop()
    try:
        await ledger.record(_record(name))
        await ledger.charge(name, 7, time.time())
        assert ledger.backlog == 2
        assert (await keys(key)).name == name  # type: ignore[union-attr]  # fail open: the key seen in force
        with pytest.raises(Unavailable):
            await keys("sk-llm-never-seen")  # an unknown key is never let in
    finally:
        postgres_server.start()
    with anyio.fail_after(10):
        while ledger.backlog:
            await anyio.sleep(0.1)
    assert len(await ledger.records(key=name)) == 2 and await ledger.spent(name, 0) == 7
    await ledger.aclose()
    await db.aclose()


async def test_the_responses_store_keeps_the_newest_within_its_bounds(postgres_server: PostgresServer) -> None:
    db = PostgresDB(postgres_server.url, Guard("database", timeout=1.0, fail_open=False))
    now = [1000.0]
    store = PostgresStore(db, max_items=2, max_age_seconds=60, clock=lambda: now[0])
    ids = [uuid.uuid4().hex for _ in range(3)]
    for index, key in enumerate(ids):
        now[0] += 1
        await store.put(key, {"n": index, "text": "é"})
    assert await store.get(ids[0]) is None and await store.get(ids[2]) == {"n": 2, "text": "é"}
    now[0] += 61
    assert await store.get(ids[2]) is None  # too old
    assert await store.delete(ids[2]) and not await store.delete(ids[2])
    await db.aclose()


async def test_the_responses_store_holds_background_runs_and_sweeps_those_of_a_gone_server(
    postgres_server: PostgresServer,
) -> None:
    db = PostgresDB(postgres_server.url, Guard("database", timeout=1.0, fail_open=False))
    store = PostgresStore(db)
    assert isinstance(store, SharedStateStore)
    tag = uuid.uuid4().hex[:8]
    gone, elsewhere, near = f"resp_gone_{tag}", f"resp_elsewhere_{tag}", f"resp_{tag}{RUN_SUFFIX}x"
    for key, process in ((gone, f"{socket.gethostname()}:999999999:1"), (elsewhere, "another-machine:1:1")):
        await store.put(key, {"response": {"id": key, "status": "in_progress", "background": True}, "input_items": []})
        await store.put(key + RUN_SUFFIX, {"process": process, "done": False})
    await store.put(near, {"process": "x:1:1", "done": False})  # '#run' inside its key, not at its end
    scanned = dict(await store.scan(RUN_SUFFIX))
    assert {gone + RUN_SUFFIX, elsewhere + RUN_SUFFIX} <= scanned.keys() and near not in scanned
    assert all(key.endswith(RUN_SUFFIX) for key in scanned)
    assert await BackgroundRuns(store).recover() >= 1
    failed, running = await store.get(gone), await store.get(elsewhere)
    assert failed is not None and failed["response"]["status"] == "failed"
    assert running is not None and running["response"]["status"] == "in_progress"  # its machine is not this one
    assert await store.get(gone + RUN_SUFFIX) == {"process": f"{socket.gethostname()}:999999999:1", "done": True}
    for key in (gone, gone + RUN_SUFFIX, elsewhere, elsewhere + RUN_SUFFIX, near):  # the table is shared
        await store.delete(key)
    await db.aclose()


def test_workers_are_refused_with_per_process_state_and_say_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--workers", "2"]) == 2
    assert "stored Responses would live in one worker's memory; set state_url" in capsys.readouterr().err
    limited = Settings(limits={"requests_per_minute": 5}, state_store="sqlite")
    assert "set limits_url (Redis)" in (per_process_state(limited) or "")
    shared = limited.model_copy(update={"limits_url": "redis://r:6379/0", "state_url": "postgresql://p/db"})
    assert per_process_state(shared) is None


def test_backend_urls_come_from_the_environment_and_are_checked() -> None:
    env = {"ASGI_LLM_LIMITS_URL": "redis://cache:6379/0", "ASGI_LLM_STATE_URL": "postgresql://db/llm"}
    settings = Settings.from_env(env)
    assert (settings.limits_url, settings.state_url) == ("redis://cache:6379/0", "postgresql://db/llm")
    with pytest.raises(ValueError, match="limits_url"):
        Settings.from_env({"ASGI_LLM_LIMITS_URL": "memcached://x"})
