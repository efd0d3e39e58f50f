"""How the layers compose: settings-driven defaults, an explicit list, hosts inside and outside."""

from __future__ import annotations

import asyncio
import importlib
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.routing import Mount

from asgi_llm import ApiKeyConfig, KeyInfo, LimitsConfig, LLMApp, Settings, default_middleware
from asgi_llm.cli import serve as cli
from asgi_llm.middleware import (
    KEY,
    AuthMiddleware,
    KeyStore,
    Limiter,
    Limits,
    LimitsMiddleware,
    Metrics,
    MetricsMiddleware,
    UsageMiddleware,
)
from asgi_llm.middleware.admin import AdminMiddleware
from asgi_llm.middleware.tracing import TracingMiddleware

pytestmark = pytest.mark.anyio
KEYS = (ApiKeyConfig(name="team", key=SecretStr("sk-compose-1"), operator=True),)


def kinds(llm: LLMApp) -> list[type]:
    """The layers' classes, less the tracing layer, outermost wherever opentelemetry-api is
    installed (as here: tests/test_middleware/test_tracing.py checks it)."""
    found = [getattr(layer, "func", layer) for layer in llm.middleware]
    return found[1:] if found and found[0] is TracingMiddleware else found


async def test_defaults_follow_the_settings(kit: Any) -> None:
    plain = LLMApp(pool=kit.fake_pool())
    assert kinds(plain) == [UsageMiddleware, MetricsMiddleware, AdminMiddleware]
    keyed = LLMApp(pool=kit.fake_pool(kit.fake_settings(api_keys=KEYS)))
    assert kinds(keyed) == [UsageMiddleware, AuthMiddleware, MetricsMiddleware, AdminMiddleware]
    limited = LLMApp(pool=kit.fake_pool(kit.fake_settings(api_keys=KEYS, limits=LimitsConfig(max_concurrent=4))))
    assert kinds(limited) == [UsageMiddleware, AuthMiddleware, LimitsMiddleware, MetricsMiddleware, AdminMiddleware]
    bare = LLMApp(pool=kit.fake_pool(kit.fake_settings(metrics_path=None)), middleware=())
    assert kinds(bare) == []
    async with kit.running(plain, bare):
        assert (await kit.drive(plain, "POST", "/chat/completions", json=kit.CHAT)).status == 200  # no keys: open
        assert (await kit.drive(plain, "GET", "/metrics")).status == 200
        assert (await kit.drive(bare, "GET", "/metrics")).status == 404


async def test_verify_goes_with_the_default_layers_only(kit: Any) -> None:
    async def verify(key: str) -> KeyInfo | None:
        return None

    with pytest.raises(ValueError, match="default_middleware"):
        LLMApp(pool=kit.fake_pool(), middleware=(), verify=verify)
    assert kinds(LLMApp(pool=kit.fake_pool(), verify=verify)) == [
        UsageMiddleware,
        AuthMiddleware,
        LimitsMiddleware,
        MetricsMiddleware,
        AdminMiddleware,
    ]


async def test_streams_pass_every_layer_unbuffered(kit: Any, tmp_path: Path) -> None:
    settings = kit.fake_settings(
        api_keys=KEYS, limits=LimitsConfig(max_concurrent=2, tokens_per_day=1000), usage_ledger=str(tmp_path / "l.db")
    )
    llm = LLMApp(pool=kit.fake_pool(settings, engine=kit.SlowEngine, pieces=tuple("abcdefgh")))
    assert kinds(llm) == [UsageMiddleware, AuthMiddleware, LimitsMiddleware, MetricsMiddleware, AdminMiddleware]
    stamps: list[float] = []
    loop = asyncio.get_running_loop()
    async with kit.running(llm):
        reply = await kit.drive(
            llm,
            "POST",
            "/chat/completions",
            json={**kit.CHAT, "stream": True},
            headers=[("x-api-key", "sk-compose-1")],
            on_chunk=lambda chunk: stamps.append(loop.time()),
        )
    assert reply.status == 200 and reply.body.endswith(b"data: [DONE]\n\n") and len(stamps) >= 9
    assert stamps[-2] - stamps[0] >= 6 * kit.SlowEngine.step  # each token left as it was made


async def test_a_keys_file_without_keys_lets_no_one_in(kit: Any, tmp_path: Path) -> None:
    empty = tmp_path / "keys.txt"
    empty.write_text("# nobody yet\n")
    llm = LLMApp(pool=kit.fake_pool(kit.fake_settings(api_keys_file=str(empty))))
    async with kit.running(llm):
        assert (await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT)).status == 401
        assert (await kit.drive(llm, "GET", "/health")).status == 200


async def test_a_host_layer_inside_the_defaults_sees_the_key_name(kit: Any) -> None:
    seen: list[str | None] = []

    def audit(app: Any) -> Any:
        async def layer(scope: Any, receive: Any, send: Any) -> None:
            seen.append(scope["state"].get(KEY))
            await app(scope, receive, send)

        return layer

    pool = kit.fake_pool(kit.fake_settings(api_keys=KEYS))
    llm = LLMApp(pool=pool, middleware=[*default_middleware(pool), audit])
    async with kit.running(llm):
        await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=[("x-api-key", "sk-compose-1")])
        await kit.drive(llm, "GET", "/health")
    assert seen == ["team", None]


async def test_a_host_wraps_the_app_from_outside_with_its_classifier(kit: Any) -> None:
    llm = LLMApp(pool=kit.fake_pool(), adapters=kit.ALL, middleware=())
    outside = AuthMiddleware(llm, verify=KeyStore([("sk-out-1", KeyInfo("out"))]), classify=llm.classify)
    async with kit.running(llm):
        refused = await kit.drive(
            outside, "POST", "/messages", json=kit.MESSAGES, headers=[("anthropic-version", "2023-06-01")]
        )
        ok = await kit.drive(
            outside,
            "POST",
            "/messages",
            json=kit.MESSAGES,
            headers=[("x-api-key", "sk-out-1"), ("anthropic-version", "2023-06-01")],
        )
    assert refused.status == 401 and refused.json()["error"]["type"] == "authentication_error"
    assert ok.status == 200 and ok.json()["content"][0]["text"] == "Hello there"


async def test_every_layer_wraps_a_plain_asgi_app(kit: Any) -> None:
    seen: list[Any] = []

    async def plain(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["state"].get(KEY))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"hi"})

    metrics, records = Metrics(), []  # type: ignore[var-annotated]
    app: Any = MetricsMiddleware(plain, metrics=metrics)
    app = LimitsMiddleware(app, limiter=Limiter(Limits(requests_per_minute=2)), exempt=["/metrics"])
    app = AuthMiddleware(app, verify=KeyStore([("sk-plain-1", KeyInfo("plain", operator=True))]))
    app = UsageMiddleware(app, sinks=[records.append, metrics.observe])
    key = [("authorization", "Bearer sk-plain-1")]
    assert (await kit.drive(app, "GET", "/hello", headers=key)).body == b"hi"
    missing = await kit.drive(app, "GET", "/hello")
    assert missing.status == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    assert (await kit.drive(app, "GET", "/hello", headers=key)).status == 200
    assert (await kit.drive(app, "GET", "/hello", headers=key)).status == 429
    assert "asgi_llm_requests_total" in (await kit.drive(app, "GET", "/metrics", headers=key)).body.decode()
    assert seen == ["plain", "plain"]
    assert [(r.status, r.key, r.endpoint) for r in records] == [
        (200, "plain", "/hello"),
        (401, None, "/hello"),
        (200, "plain", "/hello"),
        (429, "plain", "/hello"),
        (200, "plain", "/metrics"),
    ]


async def test_mounted_under_a_prefix_in_starlette(kit: Any) -> None:
    llm = LLMApp(pool=kit.fake_pool(kit.fake_settings(api_keys=KEYS)))
    host = Starlette(routes=[Mount("/v1", app=llm)])
    async with (
        kit.running(llm),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=host), base_url="http://test") as http,
    ):
        assert (await http.get("/v1/health")).status_code == 200
        assert (await http.get("/v1/models")).status_code == 401
        assert (await http.get("/v1/metrics", headers={"x-api-key": "sk-compose-1"})).status_code == 200


def test_keys_from_the_environment_a_file_and_the_cli(tmp_path: Path) -> None:
    file = tmp_path / "keys.txt"
    file.write_text("# team keys\nalice=sk-alice-1\n\nsk-bare-key==\n")
    settings = Settings.from_env({"ASGI_LLM_API_KEYS": "ci=sk-ci-1, sk-anon-2", "ASGI_LLM_API_KEYS_FILE": str(file)})
    assert [k.name for k in settings.api_keys] == ["ci", settings.api_keys[1].name]
    assert settings.api_keys[1].name.startswith("key-") and settings.api_keys[1].key.get_secret_value() == "sk-anon-2"
    every = settings.all_api_keys()
    assert [(k.name, k.key.get_secret_value()) for k in every[2:]] == [
        ("alice", "sk-alice-1"),
        (every[3].name, "sk-bare-key=="),
    ]
    assert settings.auth_enabled and not Settings().auth_enabled
    assert "sk-ci-1" not in repr(settings) + str(settings.model_dump())

    args = cli.build_parser().parse_args(["serve", "--api-key", "sk-cli-1", "--api-key", "ops=sk-cli-2"])
    from_cli = cli.settings_from_args(args)
    assert [k.name for k in from_cli.api_keys][1:] == ["ops"]
    assert {k.key.get_secret_value() for k in from_cli.api_keys} == {"sk-cli-1", "sk-cli-2"}


def test_keys_in_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "asgi-llm.toml"
    config.write_text(
        '[[api_keys]]\nname = "team"\nkey = "sk-toml-1"\nmodels = ["default"]\nprotocols = ["openai"]\n'
        "[api_keys.limits]\nrequests_per_minute = 5\ntokens_per_day = 1000\n\n"
        "[limits]\nmax_tokens = 256\n"
    )
    settings = Settings.from_file(config)
    (key,) = settings.api_keys
    assert (key.models, key.protocols, key.limits and key.limits.tokens_per_day) == (("default",), ("openai",), 1000)
    assert settings.limits.max_tokens == 256
    with pytest.raises(ValueError, match="unique"):
        Settings(api_keys=(*settings.api_keys, *settings.api_keys))


def test_the_middleware_package_exports_exactly_its_public_names() -> None:
    module = importlib.import_module("asgi_llm.middleware")
    public = {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, type(os))}
    public.discard("annotations")
    assert set(module.__all__) == public


async def test_each_request_is_routed_once(kit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The match made when a request arrives serves its layers (protocol, envelope, metrics
    label) and its endpoint alike: one router walk per request, found or not."""
    llm = LLMApp(pool=kit.fake_pool(), adapters=kit.ALL)
    walks: list[str] = []
    match = llm._router.match
    monkeypatch.setattr(llm._router, "match", lambda path, *rest: walks.append(path) or match(path, *rest))
    async with kit.running(llm):
        chat = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT)
        missing = await kit.drive(llm, "GET", "/api/no-such-route")
        wrong_method = await kit.drive(llm, "GET", "/chat/completions")
    assert chat.status == 200 and chat.json()["object"] == "chat.completion"
    assert missing.status == 404 and wrong_method.status == 405
    assert walks == ["/chat/completions", "/api/no-such-route", "/chat/completions"]
