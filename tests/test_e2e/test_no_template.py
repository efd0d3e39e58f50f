"""A model whose GGUF has no chat template (gemma-3-270m, a base model): chats are formatted with
the ChatML fallback, which is logged once at load and reported by `/api/show` and
`/admin/models`; replies end at the fallback's literal `<|im_end|>`, which this vocabulary
spells with six tokens; a `chat_template` in the config still wins; completions are untouched."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import ChatRequest, Finish, Message, SamplingParams

from .gemma import GEMMA, GEMMA_TURNS, TEMPLATED, ServeHost, gemma_path, gemma_server
from .local_engine import local_engine

pytestmark = pytest.mark.model
END = "<|im_end|>"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
BUDGET = 60  # the reply ends (at the marker) well inside it
OLLAMA_CHATML = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def gemma(serve_host: ServeHost) -> Iterator[str]:
    with gemma_server(serve_host) as (url, _):
        yield url


@pytest.fixture(scope="module")
def client(gemma: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gemma}/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


def post(url: str, body: dict[str, Any]) -> Any:
    reply = httpx.post(url, json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.anyio
async def test_the_fallback_is_logged_once_at_load_in_our_own_logger(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    config = ModelConfig(id=GEMMA, path=gemma_path(), n_ctx=256, n_threads=1, parallel=1, prompt_cache_mib=0)
    async with local_engine(config) as engine:
        for _ in range(2):  # requests log nothing more
            chat = ChatRequest(model=GEMMA, messages=(Message("user", "Hi"),), sampling=SamplingParams(max_tokens=4))
            assert isinstance([e async for e in engine.generate(chat)][-1], Finish)
    told = [r for r in caplog.records if "chat template" in r.getMessage()]
    assert [(r.name, r.levelno) for r in told] == [("asgi_llm.engine", logging.WARNING)]
    assert all(
        f"'{END}'" in r.getMessage() and "chatml fallback" in r.getMessage() and GEMMA in r.getMessage() for r in told
    )
    # no handler of ours: where the record goes is the host's to set
    assert logging.getLogger("asgi_llm").handlers == logging.getLogger("asgi_llm.engine").handlers == []
    out, err = capfd.readouterr()
    assert "chat template" not in out + err


@pytest.mark.anyio
async def test_a_template_in_the_config_wins_and_nothing_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    config = ModelConfig(
        path=gemma_path(), n_ctx=256, n_threads=1, parallel=1, prompt_cache_mib=0, chat_template=GEMMA_TURNS
    )
    async with local_engine(config) as engine:
        assert engine.runtime is not None
        used = engine.runtime.prompts.used
        assert (used.origin, used.fallback, used.end) == ("config", False, None)
        chat = ChatRequest(model="m", messages=(Message("user", "Hi"),), sampling=SamplingParams(max_tokens=4))
        assert engine.runtime.prompts.chat_text(chat) == "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    assert not [r for r in caplog.records if "chat template" in r.getMessage()]


def test_the_vocabulary_has_no_end_marker_token(gemma: str) -> None:
    assert post(f"{gemma}/v1/tokenize", {"model": GEMMA, "content": END})["count"] == 6
    assert post(f"{gemma}/v1/tokenize", {"model": GEMMA, "content": "<end_of_turn>"})["count"] == 1  # its own


def test_a_chat_stops_at_the_literal_end_marker(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=GEMMA, messages=QUESTION, max_tokens=BUDGET, temperature=0)  # type: ignore[arg-type]
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.content and "<|" not in choice.message.content
    assert reply.usage is not None and reply.usage.completion_tokens < BUDGET
    chunks = list(
        client.chat.completions.create(model=GEMMA, messages=QUESTION, max_tokens=BUDGET, temperature=0, stream=True)  # type: ignore[arg-type]
    )
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == choice.message.content
    assert not any("<" in p for p in pieces)  # no part of the marker leaks
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_the_end_marker_is_an_end_of_turn_not_a_stop_sequence(gemma: str) -> None:
    with anthropic.Anthropic(base_url=gemma, api_key="unused", max_retries=0, timeout=60) as claude:
        greedy: dict[str, Any] = {
            "model": GEMMA,
            "max_tokens": BUDGET,
            "messages": QUESTION,
            "extra_body": {"temperature": 0},
        }
        reply = claude.messages.create(**greedy)
        asked = claude.messages.create(**greedy, stop_sequences=["capital"])
    assert (reply.stop_reason, reply.stop_sequence) == ("end_turn", None)
    assert reply.usage.output_tokens < BUDGET and END not in reply.content[0].text  # type: ignore[union-attr]
    # a request's own stop sequence is still reported as one
    assert (asked.stop_reason, asked.stop_sequence) == ("stop_sequence", "capital")


def test_completions_are_unaffected(client: openai.OpenAI) -> None:
    prompt = f"<|im_start|>user\n{QUESTION[0]['content']}{END}\n<|im_start|>assistant\n"
    reply = client.completions.create(model=GEMMA, prompt=prompt, max_tokens=24, temperature=0)
    assert END in reply.choices[0].text and reply.choices[0].finish_reason == "length"


def test_admin_models_says_which_template_serves_each_model(gemma: str) -> None:
    listing = {m["id"]: m["chat_template"] for m in httpx.get(f"{gemma}/v1/admin/models", timeout=10).json()["data"]}
    assert listing == {
        GEMMA: {"origin": "fallback", "name": "chatml", "fallback": True, "ends_at": END},
        TEMPLATED: {"origin": "config", "name": "chat_template", "fallback": False, "ends_at": None},
    }


def test_api_show_names_the_fallback(gemma: str) -> None:
    with ollama.Client(host=gemma, timeout=60) as llama:
        shown, configured = llama.show(GEMMA), llama.show(TEMPLATED)
    assert shown.template == OLLAMA_CHATML  # Ollama's own Go template for ChatML, the one in use
    assert shown.modelinfo is not None and configured.modelinfo is not None
    assert (shown.modelinfo["asgi_llm.chat_template"], shown.modelinfo["asgi_llm.chat_template.fallback"]) == (
        "chatml",
        True,
    )
    assert shown.parameters is not None and shown.parameters.split() == [
        "num_ctx",
        "1024",
        "stop",
        f'"{END}"',
    ]  # its served n_ctx (gemma.py)
    assert (
        shown.modelfile is not None and "no chat template" in shown.modelfile and "chatml fallback" in shown.modelfile
    )
    assert configured.template == GEMMA_TURNS and configured.modelinfo["asgi_llm.chat_template.fallback"] is False
    assert configured.parameters is not None and (configured.parameters.split(), configured.modelfile) == (
        ["num_ctx", "512"],
        "",
    )


def test_the_fallback_formats_the_prompt_and_the_config_template_wins(gemma: str) -> None:
    ours = post(f"{gemma}/v1/apply-template", {"model": GEMMA, "messages": QUESTION})["prompt"]
    theirs = post(f"{gemma}/v1/apply-template", {"model": TEMPLATED, "messages": QUESTION})["prompt"]
    assert ours == f"<|im_start|>user\n{QUESTION[0]['content']}{END}\n<|im_start|>assistant\n"
    assert theirs.startswith("<start_of_turn>user\n") and theirs.endswith("<start_of_turn>model\n")
