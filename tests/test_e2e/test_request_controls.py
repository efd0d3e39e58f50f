"""Request controls through the official SDKs and the real model: each is honoured or refused
with a 400 naming it, in the calling protocol's shape — never accepted and ignored.

SmolLM2 does not reason: turning reasoning off is honoured as it stands, turning it on refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import ollama
import openai
import pytest

from .conftest import MODEL, N_CTX

HI = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def claude(server) -> Iterator[anthropic.Anthropic]:  # type: ignore[no-untyped-def]
    with anthropic.Anthropic(base_url=server.url, api_key="not-checked", max_retries=0) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def llama(server) -> Iterator[ollama.Client]:  # type: ignore[no-untyped-def]
    with ollama.Client(host=server.url) as sdk:
        yield sdk


def test_openai_reasoning_effort_and_unknown_fields(client: openai.OpenAI) -> None:
    off = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4, reasoning_effort="none")
    assert off.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as on:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4, reasoning_effort="high")
    assert on.value.status_code == 400 and on.value.body["param"] == "reasoning_effort"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4, extra_body={"mirostat": 2})
    assert unknown.value.body["param"] == "mirostat"  # type: ignore[index]
    held = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4, extra_body={"grammar": 'root ::= "a"'})
    assert held.choices[0].message.content == "a" and held.choices[0].finish_reason == "stop"  # llama.cpp's GBNF field
    with pytest.raises(openai.BadRequestError) as responses:
        client.responses.create(model=MODEL, input="Hi", max_output_tokens=16, reasoning={"effort": "high"})
    assert responses.value.body["param"] == "reasoning.effort"  # type: ignore[index]


def test_anthropic_thinking(claude: anthropic.Anthropic) -> None:
    off = claude.messages.create(model=MODEL, max_tokens=4, messages=HI, thinking={"type": "disabled"})  # type: ignore[arg-type]
    assert off.content and off.content[0].type == "text"
    with pytest.raises(anthropic.BadRequestError) as on:
        claude.messages.create(
            model=MODEL, max_tokens=2048, messages=HI, thinking={"type": "enabled", "budget_tokens": 1024}  # type: ignore[arg-type]
        )
    assert on.value.status_code == 400 and "does not reason" in str(on.value.body)


def test_ollama_think_num_ctx_and_options(llama: ollama.Client) -> None:
    assert llama.chat(model=MODEL, messages=HI, think=False, options={"num_predict": 4}).message.content
    with pytest.raises(ollama.ResponseError) as on:
        llama.chat(model=MODEL, messages=HI, think=True, options={"num_predict": 4})
    assert on.value.status_code == 400 and "does not reason" in on.value.error
    fits = llama.generate(model=MODEL, prompt="Hi", options={"num_predict": 4, "num_ctx": N_CTX})
    assert fits.done_reason in ("stop", "length")
    with pytest.raises(ollama.ResponseError) as too_big:
        llama.generate(model=MODEL, prompt="Hi", options={"num_predict": 4, "num_ctx": N_CTX * 4})
    assert too_big.value.status_code == 400 and "num_ctx" in too_big.value.error
    with pytest.raises(ollama.ResponseError) as mirostat:
        llama.generate(model=MODEL, prompt="Hi", options={"num_predict": 4, "mirostat": 2})
    assert mirostat.value.status_code == 400 and "options.mirostat" in mirostat.value.error
