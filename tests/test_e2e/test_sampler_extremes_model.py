"""The samplers' extremes with the real model: what the protocols allow answers 200, and a grammar
that the bias (or the grammar itself) leaves no token to continue with neither raises nor takes the
process down. Before, `temperature: 2.76e-272` was a 500, `1e-45` with top_k drew the last token
of the vocabulary, and a grammar with nothing left to pick made llama.cpp abort the process."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import httpx
import pytest

from asgi_llm.core import SamplingParams
from asgi_llm.engines.llamacpp.jobs import BatchToken
from asgi_llm.engines.llamacpp.native import Decoder, Model
from asgi_llm.engines.llamacpp.sampling import Sampling

QUESTION = [{"role": "user", "content": "Name three colours of the sea."}]
JSON = {"content-type": "application/json"}


def post(server: Any, path: str, body: dict[str, Any]) -> httpx.Response:
    """`body` as Python's json writes it (NaN included, as a client's may)."""
    return httpx.post(server.url + path, content=json.dumps(body), headers=JSON, timeout=60)


def anthropic_text(server: Any, temperature: float) -> str:
    body = {"model": "default", "max_tokens": 12, "messages": QUESTION, "temperature": temperature}
    reply = post(server, "/v1/messages", body)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["content"][0]["text"])


def openai_text(server: Any, **sampling: Any) -> str:
    body = {"model": "default", "max_tokens": 12, "messages": QUESTION, **sampling}
    reply = post(server, "/v1/chat/completions", body)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def test_a_temperature_that_rounds_to_0_is_greedy(server: Any) -> None:
    """The fuzzed Anthropic body, and the smallest float32 temperature through llama.cpp's chain (top_k)."""
    greedy = anthropic_text(server, 0)
    assert greedy
    assert anthropic_text(server, 2.76e-272) == greedy
    assert openai_text(server, temperature=5e-324) == openai_text(server, temperature=0) == greedy
    assert openai_text(server, temperature=1e-45, top_k=40) == greedy


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": 1e300, "top_k": 10**30},
        {"temperature": 0.8, "top_k": 0, "top_p": 0.0, "min_p": 1.0, "repeat_penalty": 1e300},
        {"temperature": 1e-300, "repeat_penalty": 5e-324, "presence_penalty": -1e300, "frequency_penalty": -1e300},
    ],
    ids=["hot", "cut to one", "penalties past their bounds"],
)
def test_ollama_options_past_every_bound_answer(server: Any, options: dict[str, Any]) -> None:
    """Ollama bounds neither the temperature nor the penalties: every finite value is honoured."""
    body = {"model": "default", "messages": QUESTION, "stream": False, "options": {"num_predict": 8, **options}}
    reply = post(server, "/api/chat", body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["done"] is True and reply.json()["eval_count"] >= 1


def prompted(model: Model, decoder: Decoder) -> tuple[int, int]:
    """A question decoded: the row of its last token's logits, and the position after it."""
    decoder.clear()
    prompt = model.tokenize("Answer yes or no: is the sea wet? Answer:", add_bos=True)
    decoder.decode([BatchToken(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
    return len(prompt) - 1, len(prompt)


@pytest.mark.parametrize(
    "sampling", [{"temperature": 0}, {"temperature": 0.8}, {"temperature": 0.8, "top_k": 40}], ids=str
)
def test_a_bias_against_every_token_under_a_grammar_leaves_its_best_allowed(
    loaded: tuple[Model, Decoder], sampling: dict[str, Any]
) -> None:
    """No token the grammar allows survives the bias: the model's favourite among those it allows
    is taken, and the output goes on to the grammar's end."""
    model, decoder = loaded
    row, position = prompted(model, decoder)
    banned = tuple((token, -math.inf) for token in range(model.n_vocab))
    params = SamplingParams(logit_bias=banned, **sampling)
    choice = Sampling(model, decoder.logits, params, 0, grammar='root ::= " yes" | " no"')
    free = Sampling(model, decoder.logits, SamplingParams(temperature=0), 0, grammar='root ::= " yes" | " no"')
    expected = free.sample(row, decoder.context, 8)
    output = []
    token = choice.sample(row, decoder.context, 8)
    assert token == expected, "the grammar's best allowed token, by the model's own logits"
    while not model.is_end(token):
        output.append(token)
        assert len(output) < 8, "the grammar ends the output"
        decoder.decode([BatchToken(token, position, 0, True)])
        position, row = position + 1, 0
        token = choice.sample(row, decoder.context, 8)
    assert b"".join(model.piece(t) for t in output) in (b" yes", b" no")


def test_a_grammar_that_no_token_can_continue_ends_the_output(
    loaded: tuple[Model, Decoder], caplog: pytest.LogCaptureFixture
) -> None:
    """A NUL is in no token the grammar takes: where llama.cpp aborted the process on the pick,
    the output ends (outside its grammar) with a warning."""
    model, decoder = loaded
    row, _ = prompted(model, decoder)
    for params in (SamplingParams(temperature=0), SamplingParams(temperature=0.8, top_k=40)):
        choice = Sampling(model, decoder.logits, params, 0, grammar='root ::= "\\x00"')
        with caplog.at_level(logging.WARNING, logger="asgi_llm.engine"):
            assert choice.sample(row, decoder.context, 8) == model.eos
        assert "allows no token" in caplog.text


def test_nan_is_not_a_json_number_and_gets_a_400(server: Any) -> None:
    """Python's json writes NaN for a client, and decodes it: we refuse it rather than sample with it."""
    options = {"num_predict": 8, "frequency_penalty": math.nan}
    reply = post(server, "/api/chat", {"model": "default", "messages": QUESTION, "stream": False, "options": options})
    assert reply.status_code == 400 and "NaN" in reply.json()["error"]
