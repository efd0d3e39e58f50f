"""What the app says about its layers (the OpenAPI document: public paths, `/metrics`, the admin
routes) comes from the layers as built, however the host wrote the factory."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm import KeyInfo, LLMApp
from asgi_llm.middleware import AuthMiddleware, KeyStore, Metrics, MetricsMiddleware
from asgi_llm.middleware.admin import AdminMiddleware

pytestmark = pytest.mark.anyio

KEYS = KeyStore([("sk-built-1", KeyInfo("ops", operator=True))])


def test_layers_made_by_any_factory_are_described(kit: Any) -> None:
    pool = kit.fake_pool()
    layers = [
        lambda app: AuthMiddleware(app, verify=KEYS, public=["/models/", "health"]),
        lambda app: MetricsMiddleware(app, metrics=Metrics(), path="/stats"),
        lambda app: AdminMiddleware(app, pool=pool),
    ]
    doc = LLMApp(pool=pool, middleware=layers).openapi()
    assert doc["paths"]["/models"]["get"]["security"] == [] == doc["paths"]["/health"]["get"]["security"]
    assert "security" not in doc["paths"]["/chat/completions"]["post"]
    assert "/stats" in doc["paths"] and "/metrics" not in doc["paths"]
    assert "/admin/models" in doc["paths"]


def test_without_those_layers_nothing_is_claimed(kit: Any) -> None:
    doc = LLMApp(pool=kit.fake_pool(), middleware=[lambda app: app]).openapi()
    assert "security" not in doc and "/metrics" not in doc["paths"] and "/admin/models" not in doc["paths"]
    assert "security" not in doc["paths"]["/models"]["get"]  # no key is ever asked for


async def test_the_described_paths_are_the_served_ones(kit: Any) -> None:
    pool = kit.fake_pool()
    llm = LLMApp(pool=pool, middleware=[lambda app: MetricsMiddleware(app, metrics=Metrics(), path="/stats")])
    async with kit.running(llm):
        assert (await kit.drive(llm, "GET", "/stats")).status == 200
        assert (await kit.drive(llm, "GET", "/metrics")).status == 404
    assert "/stats" in llm.openapi()["paths"]
