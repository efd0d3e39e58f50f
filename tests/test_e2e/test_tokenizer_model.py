"""`/tokenize`, `/detokenize` and `/apply-template` with the real model: multilingual text and
emoji round-trip, pieces split inside a character come back as bytes, `count` and
`max_model_len` are vLLM's, `add_special` adds the BOS a model's vocabulary asks for, and the
prompt apply-template shows is the one chat decodes, to the byte."""

from __future__ import annotations

import functools
import shutil
import struct
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from asgi_llm import ModelConfig
from asgi_llm.config.sources import default_model_path
from asgi_llm.core import ChatRequest, Message
from asgi_llm.engines.inference_thread import InferenceThread
from asgi_llm.engines.llamacpp import LlamaCppEngine

from .conftest import MODEL, Server

pytestmark = pytest.mark.model
TEXT = "Ünïcödé — 日本語 — 🦊👍🏽"
CHAT = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": TEXT},
]
ADD_BOS = b"tokenizer.ggml.add_bos_token"
GGUF_BOOL = 7


def post(server: Server, path: str, body: dict[str, Any], status: int = 200) -> Any:
    reply = httpx.post(f"{server.url}/v1{path}", json=body, timeout=60)
    assert reply.status_code == status, reply.text
    return reply.json()


def test_tokenize_then_detokenize_round_trips_multilingual_text_and_emoji(server: Server) -> None:
    for named in ({}, {"model": MODEL}, {"model": "default"}):  # none: the first model; an alias
        tokens = post(server, "/tokenize", {"content": TEXT, **named})["tokens"]
        assert len(tokens) > 10 and all(isinstance(t, int) for t in tokens)
        assert post(server, "/detokenize", {"tokens": tokens, **named}) == {"content": TEXT}


def test_with_pieces_gives_each_tokens_text_or_the_bytes_of_a_part_of_a_character(server: Server) -> None:
    plain = post(server, "/tokenize", {"content": TEXT})
    reply = post(server, "/tokenize", {"content": TEXT, "with_pieces": True})
    assert [t["id"] for t in reply["tokens"]] == plain["tokens"]
    pieces = [t["piece"] for t in reply["tokens"]]
    assert any(isinstance(p, list) for p in pieces) and any(isinstance(p, str) for p in pieces)  # the emoji split
    joined = b"".join(p.encode() if isinstance(p, str) else bytes(p) for p in pieces)
    assert joined == TEXT.encode()


def test_count_and_max_model_len_are_vllms(server: Server) -> None:
    engine = server.pool.loaded(MODEL)
    assert engine is not None
    reply = post(server, "/tokenize", {"content": TEXT})
    assert reply["count"] == len(reply["tokens"])
    assert reply["max_model_len"] == engine.context_length
    control = post(server, "/tokenize", {"content": "<|im_start|>user"})  # control tokens read as themselves
    assert control["count"] == 2
    assert post(server, "/tokenize", {"content": "<|im_start|>user", "parse_special": False})["count"] > 2


@pytest.mark.parametrize(
    "body",
    [
        {"messages": CHAT},
        {"messages": [*CHAT, {"role": "assistant", "content": "Fox"}]},  # a prefill: continued, in the prompt
        {"messages": CHAT, "tools": [{"type": "function", "function": {"name": "look_up", "parameters": {}}}]},
    ],
    ids=["chat", "prefill", "tools"],
)
def test_apply_template_is_the_prompt_chat_counts(server: Server, body: dict[str, Any]) -> None:
    prompt = post(server, "/apply-template", body)["prompt"]
    assert prompt.startswith("<|im_start|>system\nAnswer in one word.") and TEXT in prompt
    chat = post(server, "/chat/completions", {**body, "model": MODEL, "max_tokens": 1, "temperature": 0})
    tokenized = post(server, "/tokenize", {"content": prompt, "add_special": True})  # as chat does
    assert tokenized["count"] == chat["usage"]["prompt_tokens"]
    assert post(server, "/detokenize", {"tokens": tokenized["tokens"]}) == {"content": prompt}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/tokenize", {}, "content"),
        ("/tokenize", {"content": ["a"]}, "content"),
        ("/tokenize", {"content": "a", "add_special": 1}, "add_special"),
        ("/detokenize", {"tokens": [1, 10**6]}, "tokens[1]"),  # outside the vocabulary
        ("/detokenize", {"tokens": [True]}, "tokens[0]"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(server: Server, path: str, body: dict[str, Any], param: str) -> None:
    assert post(server, path, body, 400)["error"]["param"] == param


def test_an_unknown_model_is_a_404(server: Server) -> None:
    assert post(server, "/tokenize", {"content": "a", "model": "nope"}, 404)["error"]["code"] == "model_not_found"


@pytest.fixture(scope="module")
def adds_bos(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The packaged model with its vocabulary's `add_bos_token` turned on (SmolLM2's is off)."""
    path = tmp_path_factory.mktemp("bos") / "adds-bos.gguf"
    shutil.copyfile(default_model_path(), path)
    with path.open("r+b") as file:
        header = file.read(16 << 20)
        at = header.index(ADD_BOS) + len(ADD_BOS)
        assert struct.unpack_from("<I", header, at)[0] == GGUF_BOOL
        file.seek(at + 4)
        file.write(b"\x01")
    return str(path)


@pytest.fixture
async def bos_engine(adds_bos: str) -> AsyncIterator[tuple[LlamaCppEngine, InferenceThread]]:
    thread = InferenceThread()
    thread.start()
    engine = LlamaCppEngine(
        ModelConfig(id="adds-bos", path=adds_bos, n_ctx=512, n_threads=1, prompt_cache_mib=0), thread
    )
    try:
        await engine.load()
        yield engine, thread
    finally:
        await engine.close()
        await thread.stop()


@pytest.mark.anyio
async def test_add_special_adds_the_bos_and_apply_template_is_what_chat_decodes_to_the_byte(
    bos_engine: tuple[LlamaCppEngine, InferenceThread],
) -> None:
    engine, thread = bos_engine
    runtime, vocabulary = engine.runtime, engine.tokenizer()
    assert runtime is not None
    bos = runtime.model.bos
    plain = await vocabulary.tokenize(TEXT, add_special=False, parse_special=True)
    assert await vocabulary.tokenize(TEXT, add_special=True, parse_special=True) == [bos, *plain]
    conversation = (Message("system", "Answer in one word."), Message("user", TEXT), Message("assistant", "Fox"))
    for messages in (conversation[:2], conversation):
        request = ChatRequest(model="adds-bos", messages=messages)
        prompt = await vocabulary.render_chat(request)
        ((decoded, _),) = await thread.call(functools.partial(runtime.prompts.of, request))  # on its thread
        added = not prompt.startswith(runtime.prompts.template.bos_token or "\0")  # chat's own rule for the BOS
        assert decoded == await vocabulary.tokenize(prompt, add_special=added, parse_special=True)
        assert b"".join(await vocabulary.pieces(decoded[1:] if added else decoded)) == prompt.encode()
