"""`GET /metrics`: valid Prometheus text, labelled by model, protocol and key name."""

from __future__ import annotations

import asyncio
import math
import re
from collections import defaultdict
from typing import Any

import pytest
from pydantic import SecretStr

from asgi_llm import ApiKeyConfig, LLMApp
from asgi_llm.middleware import Metrics, MetricsMiddleware, UsageMiddleware
from asgi_llm.middleware.prometheus import Counter

pytestmark = pytest.mark.anyio

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


def parse(text: str) -> tuple[dict[str, str], Samples]:
    """Checks the exposition format strictly; returns each family's type and every sample."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    helps: set[str] = set()
    samples: Samples = defaultdict(list)
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert re.fullmatch(_NAME, name) and name not in helps
            helps.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name in helps and name not in types and kind in ("counter", "gauge", "histogram")
            types[name] = kind
        else:
            match = _SAMPLE.match(line)
            assert match, line
            name, raw, value = match.groups()
            family = (
                re.sub(r"_(bucket|sum|count)$", "", name)
                if re.sub(r"_(bucket|sum|count)$", "", name) in types
                else name
            )
            assert family in types, f"sample before its TYPE: {line}"
            labels: dict[str, str] = {}
            rest = raw or ""
            while rest:
                label = _LABEL.match(rest)
                assert label, line
                assert label.group(1) not in labels
                labels[label.group(1)] = _unescape(label.group(2))
                rest = rest[label.end() :]
            samples[name].append((labels, float(value.replace("+Inf", "inf"))))
    for name, kind in types.items():
        if kind == "histogram":
            _check_histogram(name, samples)
    return types, samples


def _check_histogram(name: str, samples: Samples) -> None:
    series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = defaultdict(list)
    for labels, value in samples[f"{name}_bucket"]:
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        series[key].append((float(labels["le"].replace("+Inf", "inf")), value))
    counts = {tuple(sorted(labels.items())): value for labels, value in samples[f"{name}_count"]}
    assert set(series) == set(counts)
    for key, buckets in series.items():
        bounds = [b for b, _ in buckets]
        assert bounds == sorted(bounds) and bounds[-1] == math.inf
        values = [v for _, v in buckets]
        assert values == sorted(values) and values[-1] == counts[key]


def only(samples: Samples, name: str, **labels: str) -> float:
    found = [v for ls, v in samples[name] if all(ls.get(k) == want for k, want in labels.items())]
    assert len(found) == 1, (name, labels, samples[name])
    return found[0]


KEYS = (
    ApiKeyConfig(name="team", key=SecretStr("sk-m-1")),
    ApiKeyConfig(name="ops", key=SecretStr("sk-m-2"), operator=True),
)


async def test_only_operator_keys_read_the_metrics_that_name_every_key(kit: Any) -> None:
    llm = LLMApp(pool=kit.fake_pool(kit.fake_settings(api_keys=KEYS)), adapters=kit.ALL)
    async with kit.running(llm):
        await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=[("x-api-key", "sk-m-1")])
        tenant = await kit.drive(llm, "GET", "/metrics", headers=[("x-api-key", "sk-m-1")])
        anonymous = await kit.drive(llm, "GET", "/metrics")
        operator = await kit.drive(llm, "GET", "/metrics", headers=[("x-api-key", "sk-m-2")])
    assert tenant.status == 403 and "operator" in tenant.json()["error"]["message"]
    assert b"team" not in tenant.body and b"asgi_llm_" not in tenant.body
    assert anonymous.status == 401
    assert operator.status == 200 and 'key="team"' in operator.body.decode()


async def test_metrics_count_requests_tokens_errors_and_timings_by_model_protocol_and_key(kit: Any) -> None:
    llm = LLMApp(pool=kit.fake_pool(kit.fake_settings(api_keys=KEYS), engine=kit.SlowEngine), adapters=kit.ALL)
    team, ops = [("x-api-key", "sk-m-1")], [("x-api-key", "sk-m-2")]
    async with kit.running(llm):
        await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=team)
        await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}, headers=team)
        await kit.drive(llm, "POST", "/api/chat", json=kit.OLLAMA_CHAT, headers=ops)
        await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "model": "nope"}, headers=ops)
        await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT)
        await kit.drive(llm, "GET", "/health")
        reply = await kit.drive(llm, "GET", "/metrics", headers=ops)
    assert reply.status == 200 and reply.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    types, samples = parse(reply.body.decode())
    assert types == {
        "asgi_llm_requests_total": "counter",
        "asgi_llm_request_errors_total": "counter",
        "asgi_llm_client_disconnects_total": "counter",
        "asgi_llm_prompt_tokens_total": "counter",
        "asgi_llm_completion_tokens_total": "counter",
        "asgi_llm_cached_prompt_tokens_total": "counter",
        "asgi_llm_time_to_first_token_seconds": "histogram",
        "asgi_llm_request_duration_seconds": "histogram",
        "asgi_llm_requests_in_flight": "gauge",
        "asgi_llm_requests_queued": "gauge",
        "asgi_llm_model_loaded": "gauge",
        "asgi_llm_engine_faults_total": "counter",
        "asgi_llm_engine_stalls_total": "counter",
        "asgi_llm_engine_restarts_total": "counter",
        "asgi_llm_engine_stalled": "gauge",
        "asgi_llm_speculative_drafted_tokens_total": "counter",
        "asgi_llm_speculative_accepted_tokens_total": "counter",
        "asgi_llm_speculative_recalled_tokens_total": "counter",
        "asgi_llm_speculative_recalled_accepted_tokens_total": "counter",
        "asgi_llm_speculative_memory_runs": "gauge",
    }
    assert ({"model": "fake"}, 0.0) in samples["asgi_llm_engine_faults_total"]
    requests = {tuple(sorted(ls.items())): v for ls, v in samples["asgi_llm_requests_total"]}
    assert requests == {
        (
            ("endpoint", "/chat/completions"),
            ("key", "team"),
            ("model", "fake"),
            ("protocol", "openai"),
            ("status", "200"),
        ): 2,
        (("endpoint", "/api/chat"), ("key", "ops"), ("model", "fake"), ("protocol", "ollama"), ("status", "200")): 1,
        (
            ("endpoint", "/chat/completions"),
            ("key", "ops"),
            ("model", ""),
            ("protocol", "openai"),
            ("status", "404"),
        ): 1,
        (("endpoint", "/chat/completions"), ("key", ""), ("model", ""), ("protocol", "openai"), ("status", "401")): 1,
    }  # health probes and scrapes are not counted
    assert {(ls["status"], ls["key"]) for ls, _ in samples["asgi_llm_request_errors_total"]} == {
        ("404", "ops"),
        ("401", ""),
    }
    assert only(samples, "asgi_llm_prompt_tokens_total", key="team", protocol="openai", model="fake") == 6
    assert only(samples, "asgi_llm_completion_tokens_total", key="team", protocol="openai", model="fake") == 4
    assert only(samples, "asgi_llm_completion_tokens_total", key="ops", protocol="ollama", model="fake") == 2
    assert only(samples, "asgi_llm_time_to_first_token_seconds_count", key="team", model="fake") == 2
    assert 0 < only(samples, "asgi_llm_time_to_first_token_seconds_sum", key="team", model="fake") < 5
    assert sum(v for _, v in samples["asgi_llm_request_duration_seconds_count"]) == 5
    assert {ls["model"]: v for ls, v in samples["asgi_llm_model_loaded"]} == {"fake": 1, "other": 1}
    assert all(set(ls) == {"protocol", "model", "key"} for ls, _ in samples["asgi_llm_completion_tokens_total"])
    assert all(v == 0 for _, v in samples["asgi_llm_requests_in_flight"])


async def test_in_flight_requests_and_disconnects(kit: Any) -> None:
    llm = LLMApp(pool=kit.fake_pool(engine=kit.SlowEngine, pieces=tuple("abcdefghijklmnop")))
    async with kit.running(llm):
        running = asyncio.create_task(kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}))
        await asyncio.sleep(0.03)
        _, during = parse((await kit.drive(llm, "GET", "/metrics")).body.decode())
        await running
        await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}, leave_after=2)
        _, after = parse((await kit.drive(llm, "GET", "/metrics")).body.decode())
    assert only(during, "asgi_llm_requests_in_flight", protocol="openai") == 1
    assert only(after, "asgi_llm_requests_in_flight", protocol="openai") == 0
    assert only(after, "asgi_llm_client_disconnects_total", protocol="openai", model="fake", key="") == 1


async def test_metrics_around_a_plain_asgi_app(kit: Any) -> None:
    async def plain(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 418 if scope["path"] == "/tea" else 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    metrics = Metrics()
    app = UsageMiddleware(MetricsMiddleware(plain, metrics=metrics), sinks=[metrics.observe])
    for path in ("/a", "/tea", "/a"):
        await kit.drive(app, "GET", path)
    _, samples = parse((await kit.drive(app, "GET", "/metrics")).body.decode())
    assert only(samples, "asgi_llm_requests_total", endpoint="/a", status="200", protocol="http") == 2
    assert only(samples, "asgi_llm_request_errors_total", status="418") == 1
    assert not any(ls["endpoint"] == "/metrics" for ls, _ in samples["asgi_llm_requests_total"])
    _, again = parse((await kit.drive(app, "GET", "/metrics")).body.decode())
    assert only(again, "asgi_llm_requests_total", endpoint="/metrics") == 1  # a scrape counts once it is served


async def test_label_values_are_escaped() -> None:
    counter = Counter("x_total", "Help.", ("key",))
    counter.inc(('we"ird\\na\nme',), 2)
    text = "".join(line + "\n" for line in counter.render())
    assert text == '# HELP x_total Help.\n# TYPE x_total counter\nx_total{key="we\\"ird\\\\na\\nme"} 2\n'
    _, samples = parse(text)
    assert samples["x_total"] == [({"key": 'we"ird\\na\nme'}, 2.0)]


async def test_metrics_can_be_turned_off(kit: Any) -> None:
    llm = LLMApp(pool=kit.fake_pool(kit.fake_settings(metrics_path=None)))
    async with kit.running(llm):
        assert (await kit.drive(llm, "GET", "/metrics")).status == 404


def test_queued_requests_per_model_are_a_gauge() -> None:
    from asgi_llm.middleware.metrics import Metrics

    waiting = {"a": 2, "b": 0}
    metrics = Metrics(models=lambda: [("a", True), ("b", False)], queued=lambda: waiting.items())
    text = metrics.render()
    assert "# TYPE asgi_llm_requests_queued gauge" in text
    assert 'asgi_llm_requests_queued{model="a"} 2' in text and 'asgi_llm_requests_queued{model="b"} 0' in text
    waiting["a"] = 0
    assert 'asgi_llm_requests_queued{model="a"} 0' in metrics.render()


def test_engine_faults_stalls_and_restarts_are_counted_per_model() -> None:
    from asgi_llm.core import EngineHealth
    from asgi_llm.middleware.metrics import Metrics

    health = {"a": EngineHealth(faults=3, stalls=1, restarts=1, stalled="no progress for 31s"), "b": EngineHealth()}
    metrics = Metrics(engines=lambda: health.items())
    text = metrics.render()
    assert "# TYPE asgi_llm_engine_faults_total counter" in text
    assert 'asgi_llm_engine_faults_total{model="a"} 3' in text and 'asgi_llm_engine_faults_total{model="b"} 0' in text
    assert 'asgi_llm_engine_stalls_total{model="a"} 1' in text and 'asgi_llm_engine_restarts_total{model="a"} 1' in text
    assert 'asgi_llm_engine_stalled{model="a"} 1' in text and 'asgi_llm_engine_stalled{model="b"} 0' in text
    health["a"] = EngineHealth(faults=3, stalls=1, restarts=1)
    assert 'asgi_llm_engine_stalled{model="a"} 0' in metrics.render()


def test_drafted_and_accepted_tokens_are_counted_per_model() -> None:
    from asgi_llm.core import EngineHealth
    from asgi_llm.middleware.metrics import Metrics

    health = {
        "a": EngineHealth(drafted=120, accepted=90, recalled=50, recalled_accepted=48, remembered=700),
        "b": EngineHealth(),
    }
    metrics = Metrics(engines=lambda: health.items())
    text = metrics.render()
    assert "# TYPE asgi_llm_speculative_drafted_tokens_total counter" in text
    assert 'asgi_llm_speculative_drafted_tokens_total{model="a"} 120' in text
    assert 'asgi_llm_speculative_accepted_tokens_total{model="a"} 90' in text
    assert 'asgi_llm_speculative_accepted_tokens_total{model="b"} 0' in text
    assert 'asgi_llm_speculative_recalled_tokens_total{model="a"} 50' in text
    assert 'asgi_llm_speculative_recalled_accepted_tokens_total{model="a"} 48' in text
    assert "# TYPE asgi_llm_speculative_memory_runs gauge" in text
    assert 'asgi_llm_speculative_memory_runs{model="a"} 700' in text
    del health["a"]  # unloaded: its memory is gone, its counters stay
    text = metrics.render()
    assert 'asgi_llm_speculative_memory_runs{model="a"}' not in text
    assert 'asgi_llm_speculative_recalled_tokens_total{model="a"} 50' in text
