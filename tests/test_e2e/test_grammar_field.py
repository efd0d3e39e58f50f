"""llama.cpp's `grammar` field with the real model, through the openai SDK (`extra_body`): every
reply is a whole sentence of the grammar (checked with our recognizer) at a tiny budget and a
normal one, streamed and not, on chat and completions; a bad grammar is a 400 saying where."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from asgi_llm.engines.decoding.gbnf import parse
from asgi_llm.engines.decoding.recognizer import Position

MODEL = "SmolLM2-135M-Instruct"
CITY = 'root ::= "The capital is " name "." (" " word (" " word)* ".")*\nname ::= [A-Z] [a-z]+\nword ::= [a-zA-Z]+\n'
YES_NO = 'root ::= "yes" | "no"'
NO_END = {"0": -100, "2": -100}  # <|endoftext|> and <|im_end|>: the model never ends by itself
ASK = [{"role": "user", "content": "What is the capital of France? Tell me about it."}]


def _sentence(text: str, grammar: str) -> None:
    assert Position(parse(grammar)).advance(text).complete, text


def _chat(client: openai.OpenAI, stream: bool, **fields: Any) -> tuple[str, str | None, int]:
    """The reply's text, finish reason and completion tokens."""
    extra = {"grammar": fields.pop("grammar")}
    if "logit_bias" in fields:
        extra["logit_bias"] = fields.pop("logit_bias")
    if not stream:
        reply = client.chat.completions.create(model=MODEL, messages=ASK, extra_body=extra, **fields)  # type: ignore[call-overload]
        assert reply.usage is not None
        return reply.choices[0].message.content or "", reply.choices[0].finish_reason, reply.usage.completion_tokens
    chunks = list(
        client.chat.completions.create(  # type: ignore[call-overload]
            model=MODEL, messages=ASK, extra_body=extra, stream=True, stream_options={"include_usage": True}, **fields
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = chunks[-1].usage
    assert usage is not None and len(finish) == 1
    return text, finish[0], usage.completion_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("budget", [10, 60])
def test_chat_replies_are_sentences_of_the_grammar(client: openai.OpenAI, stream: bool, budget: int) -> None:
    """With the end-of-text tokens biased away the model never stops by itself: the budget ends
    every reply, closed inside the grammar, and says so (`length`)."""
    text, finish, used = _chat(client, stream, grammar=CITY, max_tokens=budget, logit_bias=NO_END, temperature=0.8)
    _sentence(text, CITY)
    assert finish == "length" and used <= budget


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_grammar_that_ends_ends_the_reply_with_stop(client: openai.OpenAI, stream: bool) -> None:
    text, finish, used = _chat(client, stream, grammar=YES_NO, max_completion_tokens=50)
    assert text in ("yes", "no") and finish == "stop" and used <= 3


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_completions_are_sentences_of_the_grammar(client: openai.OpenAI, stream: bool) -> None:
    grammar = 'root ::= " " [0-9]{1,3} (", " [0-9]{1,3})*\n'
    fields: dict[str, Any] = {
        "model": MODEL,
        "prompt": "Some numbers:",
        "max_tokens": 8,
        "n": 2,
        "extra_body": {"grammar": grammar},
    }
    if not stream:
        choices = [(c.text, c.finish_reason) for c in client.completions.create(**fields).choices]
    else:
        texts, ends = ["", ""], ["", ""]
        for chunk in client.completions.create(stream=True, **fields):
            for c in chunk.choices:
                texts[c.index] += c.text
                ends[c.index] = c.finish_reason or ends[c.index]
        choices = list(zip(texts, ends, strict=True))
    for text, finish in choices:
        _sentence(text, grammar)
        assert finish in ("stop", "length")


def test_a_budget_below_the_shortest_sentence_is_a_400_naming_it(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        _chat(client, True, grammar=CITY, max_completion_tokens=3)
    assert caught.value.param == "max_completion_tokens"
    assert "takes" in caught.value.message


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_bad_grammar_is_a_400_saying_where(client: openai.OpenAI, stream: bool) -> None:
    bad = 'root ::= "The capital is " name\nname ::= [A-Z] [a-z+\n'
    with pytest.raises(openai.BadRequestError) as caught:
        _chat(client, stream, grammar=bad, max_tokens=20)
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["param"] == "grammar" and body["type"] == "invalid_request_error"
    assert "line 2, column 16" in body["message"] and "not closed" in body["message"]
    with pytest.raises(openai.BadRequestError) as loops:
        client.completions.create(model=MODEL, prompt="x", extra_body={"grammar": 'root ::= x\nx ::= x "a" | "b"'})
    assert loops.value.param == "grammar" and "rule 'x' is left-recursive" in loops.value.message


@pytest.mark.parametrize(
    "fields",
    [
        {"response_format": {"type": "json_object"}},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
    ],
    ids=["response_format", "tools"],
)
def test_a_grammar_with_another_form_is_a_400(client: openai.OpenAI, fields: dict[str, Any]) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=ASK, extra_body={"grammar": YES_NO, **fields})
    assert caught.value.param == "grammar"
