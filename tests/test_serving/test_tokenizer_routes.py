"""`/tokenize`, `/detokenize` and `/apply-template` in llama-server's shapes (with vLLM's `count`
and `max_model_len`), over the fake engine's byte tokenizer: every field's effect, the model a
request without one gets, the refusals, and keys. The real model's answers are in
tests/test_e2e/test_tokenizer_model.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from asgi_llm import ApiKeyConfig, LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.core import Engine, TokenizerOwner
from asgi_llm.engines.fake import ByteTokenizer, FakeEngine
from asgi_llm.engines.upstream import UpstreamEngine

pytestmark = pytest.mark.anyio

BOS = ByteTokenizer.BOS
TEXT = "añ🦊"
USER = [{"role": "user", "content": "hi"}]
KEYS = (
    ApiKeyConfig(name="all", key=SecretStr("sk-all")),
    ApiKeyConfig(name="second", key=SecretStr("sk-second"), models=("second",)),
)


@contextlib.asynccontextmanager
async def serving(**settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    models = (ModelConfig(id="first", path="a.gguf", n_ctx=1024), ModelConfig(id="second", path="b.gguf", n_ctx=512))
    pool = ModelPool(
        Settings(models=models, **settings), engine_factory=lambda config, thread: FakeEngine(config, thread)
    )
    app = LLMApp(pool=pool, adapters=(OPENAI,))
    transport = httpx.ASGITransport(app=app)
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        await pool.wait_ready()
        yield http


async def post(path: str, body: dict[str, Any], status: int = 200) -> Any:
    async with serving() as http:
        reply = await http.post(path, json=body)
    assert reply.status_code == status, reply.text
    return reply.json()


async def test_tokenize_gives_ids_with_vllms_count_and_the_models_context() -> None:
    ids = list(TEXT.encode())
    assert await post("/tokenize", {"content": TEXT}) == {"tokens": ids, "count": len(ids), "max_model_len": 1024}


async def test_with_pieces_each_token_has_its_piece_and_bytes_that_are_no_text_are_a_list() -> None:
    reply = await post("/tokenize", {"content": "añ", "with_pieces": True})
    assert reply["tokens"] == [{"id": 97, "piece": "a"}, {"id": 0xC3, "piece": [0xC3]}, {"id": 0xB1, "piece": [0xB1]}]
    assert reply["count"] == 3


async def test_add_special_puts_the_bos_first() -> None:
    assert (await post("/tokenize", {"content": "a", "add_special": True}))["tokens"] == [BOS, 97]
    assert (await post("/tokenize", {"content": "a", "add_special": False}))["tokens"] == [97]


async def test_parse_special_reads_control_tokens_in_the_text_unless_turned_off() -> None:
    assert (await post("/tokenize", {"content": "<s>a"}))["tokens"] == [BOS, 97]
    assert (await post("/tokenize", {"content": "<s>a", "parse_special": False}))["tokens"] == list(b"<s>a")


async def test_detokenize_writes_control_tokens_out_and_round_trips() -> None:
    ids = (await post("/tokenize", {"content": TEXT, "add_special": True}))["tokens"]
    assert await post("/detokenize", {"tokens": ids}) == {"content": "<s>" + TEXT}
    assert await post("/detokenize", {"tokens": []}) == {"content": ""}


async def test_apply_template_renders_the_chat_and_reads_the_fields_chat_reads() -> None:
    assert await post("/apply-template", {"messages": USER}) == {"prompt": "<user>hi\n<assistant>"}
    prefilled = [*USER, {"role": "assistant", "content": "Sure"}]
    assert (await post("/apply-template", {"messages": prefilled}))["prompt"].endswith("<assistant>Sure\n<assistant>")
    refused = await post("/apply-template", {"messages": USER, "chat_template_kwargs": {"x": 1}}, 400)
    assert refused["error"]["param"] == "chat_template_kwargs.x"  # as chat refuses it


async def test_a_request_without_a_model_asks_the_first_one_the_key_may_use() -> None:
    assert (await post("/tokenize", {"content": "a"}))["max_model_len"] == 1024  # the first model
    assert (await post("/tokenize", {"content": "a", "model": "second"}))["max_model_len"] == 512
    async with serving(api_keys=KEYS) as http:
        limited = await http.post("/tokenize", json={"content": "a"}, headers={"authorization": "Bearer sk-second"})
        assert limited.json()["max_model_len"] == 512  # the only model this key may use
        other = await http.post(
            "/tokenize", json={"content": "a", "model": "first"}, headers={"authorization": "Bearer sk-second"}
        )
        assert other.status_code == 403


async def test_each_route_needs_a_key_like_models_does() -> None:
    async with serving(api_keys=KEYS) as http:
        for path, body in (
            ("/tokenize", {"content": "a"}),
            ("/detokenize", {"tokens": [97]}),
            ("/apply-template", {"messages": USER}),
        ):
            assert (await http.post(path, json=body)).status_code == 401
            keyed = await http.post(path, json=body, headers={"authorization": "Bearer sk-all"})
            assert keyed.status_code == 200, keyed.text


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/tokenize", {}, "content"),
        ("/tokenize", {"content": 7}, "content"),
        ("/tokenize", {"content": "a", "with_pieces": "yes"}, "with_pieces"),
        ("/tokenize", {"content": "a", "add_special_tokens": False}, "add_special_tokens"),  # vLLM's name: not taken
        ("/detokenize", {}, "tokens"),
        ("/detokenize", {"tokens": "a"}, "tokens"),
        ("/detokenize", {"tokens": [97, -1]}, "tokens[1]"),
        ("/detokenize", {"tokens": [97, BOS + 1]}, "tokens[1]"),  # outside the vocabulary
        ("/apply-template", {}, "messages"),
        ("/apply-template", {"messages": USER, "temperature": 0.5}, "temperature"),  # shapes no prompt
        ("/apply-template", {"messages": USER, "stream": True}, "stream"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(path: str, body: dict[str, Any], param: str) -> None:
    error = (await post(path, body, 400))["error"]
    assert error["param"] == param, error


async def test_an_unknown_model_is_a_404() -> None:
    error = (await post("/tokenize", {"content": "a", "model": "nope"}, 404))["error"]
    assert (error["code"], error["param"]) == ("model_not_found", "model")


class CoreOnly:
    """An engine with only what every engine has, as an upstream one: no tokenizer to ask."""

    def __init__(self, config: ModelConfig) -> None:
        fake = FakeEngine(config)
        self.context_length, self.progress, self.waiting, self.memory = config.n_ctx, 0.0, 0, None
        self.health, self.describe, self.load, self.close = fake.health, fake.describe, fake.load, fake.close
        self.generate, self.count_tokens = fake.generate, fake.count_tokens


def test_an_upstream_engine_declares_no_tokenizer() -> None:
    engine = UpstreamEngine(ModelConfig(id="far", base_url="http://upstream.invalid/v1"))
    assert isinstance(engine, Engine) and not isinstance(engine, TokenizerOwner)
    assert isinstance(CoreOnly(ModelConfig(id="m")), Engine) and not isinstance(CoreOnly(ModelConfig()), TokenizerOwner)


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize", "/apply-template"])
async def test_a_model_whose_engine_has_no_tokenizer_refuses_naming_the_routes(path: str) -> None:
    body = {"/tokenize": {"content": "a"}, "/detokenize": {"tokens": [97]}, "/apply-template": {"messages": USER}}
    pool = ModelPool(Settings(models=(ModelConfig(id="far", path="a.gguf"),)), engine_factory=lambda c, t: CoreOnly(c))
    app = LLMApp(pool=pool, adapters=(OPENAI,))
    async with app.lifespan(), httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        reply = await http.post(path, json=body[path])
    error = reply.json()["error"]
    assert (reply.status_code, error["param"]) == (400, "model") and "/tokenize" in error["message"], reply.text
