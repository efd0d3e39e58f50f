"""What one API key can see of the others: model lists hold only the models a key may use, and a
stored Response exists only for the key that created it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from asgi_llm import ApiKeyConfig, LLMApp
from asgi_llm.storage.state import MemoryStore, owned_by

pytestmark = pytest.mark.anyio

ALICE, BOB, NARROW = "sk-alice-0123456789", "sk-bob-0123456789", "sk-narrow-0123456789"
KEYS = (
    ApiKeyConfig(name="alice", key=SecretStr(ALICE)),
    ApiKeyConfig(name="bob", key=SecretStr(BOB)),
    ApiKeyConfig(name="narrow", key=SecretStr(NARROW), models=("default",)),  # an alias of `fake`
)
ANTHROPIC = [("anthropic-version", "2023-06-01")]


def bearer(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]


def keyed_app(kit: Any) -> LLMApp:
    return LLMApp(pool=kit.fake_pool(kit.fake_settings(api_keys=KEYS)), adapters=kit.ALL)


async def test_model_lists_hold_only_the_models_a_key_may_use(kit: Any) -> None:
    llm = keyed_app(kit)
    async with kit.running(llm):
        wide = await kit.drive(llm, "GET", "/models", headers=bearer(ALICE))
        narrow = await kit.drive(llm, "GET", "/models", headers=bearer(NARROW))
        claude = await kit.drive(llm, "GET", "/models", headers=bearer(NARROW) + ANTHROPIC)
        tags = await kit.drive(llm, "GET", "/api/tags", headers=bearer(NARROW))
        ps = await kit.drive(llm, "GET", "/api/ps", headers=bearer(NARROW))
        visible = await kit.drive(llm, "GET", "/models/fake", headers=bearer(NARROW))
        hidden = await kit.drive(llm, "GET", "/models/other", headers=bearer(NARROW))
    assert sorted(m["id"] for m in wide.json()["data"]) == ["fake", "other"]
    assert [m["id"] for m in narrow.json()["data"]] == ["fake"]
    assert [m["id"] for m in claude.json()["data"]] == ["fake"]
    assert [m["name"].split(":")[0] for m in tags.json()["models"]] == ["fake"]
    assert all(m["name"].split(":")[0] == "fake" for m in ps.json()["models"])
    assert visible.status == 200 and visible.json()["id"] == "fake"
    assert hidden.status == 404 and hidden.json()["error"]["type"] == "invalid_request_error"


async def test_a_stored_response_exists_only_for_the_key_that_created_it(kit: Any) -> None:
    llm = keyed_app(kit)
    body = {"model": "fake", "input": "Hi", "store": True}
    async with kit.running(llm):
        created = await kit.drive(llm, "POST", "/responses", json=body, headers=bearer(ALICE))
        rid = created.json()["id"]
        own = await kit.drive(llm, "GET", f"/responses/{rid}", headers=bearer(ALICE))
        items = await kit.drive(llm, "GET", f"/responses/{rid}/input_items", headers=bearer(ALICE))
        other = await kit.drive(llm, "GET", f"/responses/{rid}", headers=bearer(BOB))
        other_items = await kit.drive(llm, "GET", f"/responses/{rid}/input_items", headers=bearer(BOB))
        follow = {"model": "fake", "input": "And?", "previous_response_id": rid}
        continued = await kit.drive(llm, "POST", "/responses", json=follow, headers=bearer(BOB))
        deleted_by_other = await kit.drive(llm, "DELETE", f"/responses/{rid}", headers=bearer(BOB))
        still_there = await kit.drive(llm, "GET", f"/responses/{rid}", headers=bearer(ALICE))
        deleted = await kit.drive(llm, "DELETE", f"/responses/{rid}", headers=bearer(ALICE))
    assert created.status == 200 and own.status == 200 and own.json()["id"] == rid
    assert items.status == 200 and items.json()["data"]
    for reply in (other, other_items, continued, deleted_by_other):
        assert reply.status == 404, reply.json()
        assert rid in reply.json()["error"]["message"]  # the same answer as for an id that never existed
    assert still_there.status == 200
    assert deleted.status == 200 and deleted.json()["deleted"] is True


async def test_an_owned_view_keeps_owners_apart_and_no_owner_sees_the_whole_store() -> None:
    shared = MemoryStore()
    alice, bob, everyone = owned_by(shared, "alice"), owned_by(shared, "bob"), owned_by(shared, None)
    await alice.put("resp_1", {"who": "alice"})
    await bob.put("resp_1", {"who": "bob"})
    assert (await alice.get("resp_1"), await bob.get("resp_1")) == ({"who": "alice"}, {"who": "bob"})
    assert await everyone.get("resp_1") is None and everyone is shared
    assert await owned_by(shared, "ali").get("ce:resp_1") is None  # no prefix spells another owner's
    assert await bob.delete("resp_1") and await alice.get("resp_1") == {"who": "alice"}


_ENVELOPE_MESSAGE = {  # the message of a 400 in each protocol's own error envelope
    "/chat/completions": lambda body: body["error"]["message"],
    "/responses": lambda body: body["error"]["message"],
    "/messages": lambda body: body["type"] == "error" and body["error"]["message"],
    "/api/chat": lambda body: body["error"],
}
_BAD_BODIES = [
    ("nests deeper than 128", b'{"model": "fake", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("nests deeper than 128", b'{"model": "fake", "x": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"}"),
    ("lone UTF-16 surrogate", b'{"model": "fake", "x": "\\ud800"}'),
    ("not valid JSON", b'{"model": "fake",'),
    ("key 'model' twice", b'{"model": "fake", "model": "other"}'),  # the allow-list and the app must agree
]


@pytest.mark.parametrize("path", sorted(_ENVELOPE_MESSAGE))
@pytest.mark.parametrize("key", [ALICE, NARROW], ids=["any-model key", "allow-listed key"])
async def test_a_bad_body_is_the_same_400_whichever_key_sends_it(kit: Any, path: str, key: str) -> None:
    """A key with a model allow-list has its body read before the app: by the same decoder."""
    llm = keyed_app(kit)
    headers = bearer(key) + (ANTHROPIC if path == "/messages" else [])
    async with kit.running(llm):
        for expected, body in _BAD_BODIES:
            reply = await kit.drive(llm, "POST", path, body=body, headers=headers)
            assert reply.status == 400, (expected, reply.body[:300])
            assert expected in _ENVELOPE_MESSAGE[path](reply.json())


async def test_an_allow_listed_keys_body_is_decoded_once(kit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from asgi_llm.http import body as body_module

    calls: list[bytes] = []
    decode = body_module.decode_json
    monkeypatch.setattr(body_module, "decode_json", lambda raw: calls.append(raw) or decode(raw))
    llm = keyed_app(kit)
    request = {"model": "default", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
    async with kit.running(llm):
        narrow = await kit.drive(llm, "POST", "/chat/completions", json=request, headers=bearer(NARROW))
        refused = await kit.drive(llm, "POST", "/chat/completions", json={**request, "model": "other"}, headers=bearer(NARROW))
    assert narrow.status == 200 and narrow.json()["object"] == "chat.completion"
    assert refused.status == 403 and refused.json()["error"]["param"] == "model"
    assert len(calls) == 2  # one per request: auth's look ahead, which the endpoint then reuses
