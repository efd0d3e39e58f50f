"""Replica choice, failure backoff and health checks, on a hand-driven clock (no network)."""

from __future__ import annotations

import pytest

from asgi_llm.engines.upstream.replicas import NoReplica, ReplicaSet


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_least_outstanding_requests_wins() -> None:
    replicas = ReplicaSet(["http://a", "http://b", "http://c"], clock=Clock())
    a, b, c = replicas.replicas
    replicas.acquire(replicas.choose())
    replicas.acquire(replicas.choose())
    assert (a.outstanding, b.outstanding, c.outstanding) == (1, 1, 0)
    assert replicas.choose() is c
    replicas.release(a)
    assert replicas.choose() is c  # a and c have none in flight; c has served fewer
    replicas.acquire(c)
    assert replicas.choose() is a
    assert replicas.choose(exclude=[a, c]) is b
    with pytest.raises(NoReplica):
        replicas.choose(exclude=[a, b, c])


def test_a_failed_replica_is_out_until_a_check_passes_with_doubling_backoff() -> None:
    clock = Clock()
    replicas = ReplicaSet(["http://a", "http://b"], interval=10, backoff=1, max_backoff=4, clock=clock)
    a, b = replicas.replicas
    replicas.failed(a)
    assert replicas.choose() is b and not a.healthy and a.due == 101
    replicas.failed(a)
    replicas.failed(a)
    replicas.failed(a)
    assert a.due == 104  # 1, 2, 4, then capped at 4
    replicas.passed(a)
    assert a.healthy and a.failures == 0 and a.due == 110


def test_with_every_replica_out_the_one_due_back_first_is_tried() -> None:
    clock = Clock()
    replicas = ReplicaSet(["http://a", "http://b"], backoff=1, clock=clock)
    a, b = replicas.replicas
    replicas.failed(a)
    replicas.failed(a)
    replicas.failed(b)
    assert replicas.choose() is b


@pytest.mark.anyio
async def test_checks_probe_only_what_is_due_and_mark_by_the_answer() -> None:
    clock = Clock()
    replicas = ReplicaSet(["http://a", "http://b"], interval=5, backoff=1, clock=clock)
    a, b = replicas.replicas
    up = {"http://a": False, "http://b": True}
    probed: list[str] = []

    async def probe(url: str) -> bool:
        probed.append(url)
        if url == "http://never":
            raise OSError("unreachable")
        return up[url]

    await replicas.check(probe)
    assert probed == ["http://a", "http://b"] and not a.healthy and b.healthy
    clock.now += 1
    await replicas.check(probe)
    assert probed[2:] == ["http://a"]  # b is not due for another 4 seconds
    up["http://a"] = True
    clock.now += 2
    await replicas.check(probe)
    assert a.healthy and replicas.next_due() == 2  # b, checked at 100, is due at 105
    assert replicas.describe()[0] == {"replica": 0, "healthy": True, "outstanding": 0, "requests": 0}
    assert "http" not in str(replicas.describe())


def test_one_request_tries_each_replica_once_healthy_and_least_loaded_first() -> None:
    replicas = ReplicaSet(["http://a", "http://b", "http://c"], clock=Clock())
    a, b, _ = replicas.replicas
    replicas.acquire(a)
    replicas.failed(b)
    assert [r.url for r in replicas.attempts()] == ["http://c", "http://a", "http://b"]
