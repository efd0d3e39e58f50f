"""The official openai SDK against the real model behind real uvicorn, mounted at /v1 in a host app."""

from __future__ import annotations

import base64
import math
import struct

import httpx
import openai
import pytest
from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

MODEL = "SmolLM2-135M-Instruct"
HI = [{"role": "user", "content": "Say hello."}]


def test_host_routes_keep_working(server) -> None:
    assert httpx.get(f"{server.url}/home").text == "host home"
    assert httpx.get(f"{server.url}/hello/ada").json() == {"hello": "ada"}


def test_chat_completion(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="default", messages=HI, max_tokens=8, temperature=0)
    assert isinstance(reply, ChatCompletion)
    assert reply.id.startswith("chatcmpl-")
    assert reply.model == MODEL
    choice = reply.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage is not None and reply.usage.completion_tokens <= 8
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_chat_is_deterministic_at_temperature_zero(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=12, temperature=0)
    again = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=12, temperature=0)
    assert first.choices[0].message.content == again.choices[0].message.content
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens > 0  # the shared prefix was reused


def test_chat_stream(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="default", messages=HI, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"] or finishes == ["stop"]
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    plain = client.chat.completions.create(model="default", messages=HI, max_tokens=6, temperature=0)
    assert text == plain.choices[0].message.content
    assert usage_chunk.usage.completion_tokens == plain.usage.completion_tokens  # type: ignore[union-attr]


def test_chat_stop_sequence_is_not_returned(client: openai.OpenAI) -> None:
    full = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=16, temperature=0)
    text = full.choices[0].message.content or ""
    words = text.split()
    assert len(words) >= 2, text
    stop = " " + words[1]
    cut = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=16, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_chat_n_and_logprobs(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=4, n=2, seed=7, logprobs=True, top_logprobs=2
    )
    assert [c.index for c in reply.choices] == [0, 1]
    for choice in reply.choices:
        assert choice.logprobs is not None and choice.logprobs.content
        first = choice.logprobs.content[0]
        assert first.logprob <= 0 and len(first.top_logprobs) == 2
        assert bytes(first.bytes or []).decode("utf-8", "replace") == first.token
    assert reply.usage is not None and reply.usage.completion_tokens <= 8


def test_completions(client: openai.OpenAI) -> None:
    reply = client.completions.create(model=MODEL, prompt=["Once upon a time", "The sky is"], max_tokens=5, temperature=0)
    assert isinstance(reply, Completion)
    assert [c.index for c in reply.choices] == [0, 1]
    assert all(c.text for c in reply.choices)
    echoed = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=3, temperature=0, echo=True)
    assert echoed.choices[0].text.startswith("The sky is")
    assert echoed.choices[0].text == "The sky is" + reply.choices[1].text[: len(echoed.choices[0].text) - 10]


def test_completions_stream(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(model=MODEL, prompt="The sky is", max_tokens=5, temperature=0, stream=True))
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_embeddings_base64_by_default_and_float(client: openai.OpenAI) -> None:
    default = client.embeddings.create(model=MODEL, input=["hello world", "goodbye"])
    assert isinstance(default, CreateEmbeddingResponse)
    assert [d.index for d in default.data] == [0, 1]
    vector = default.data[0].embedding
    assert len(vector) == 576
    assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-3)
    floats = client.embeddings.create(model=MODEL, input="hello world", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(vector, abs=1e-6)
    assert default.usage.prompt_tokens > floats.usage.prompt_tokens
    raw = httpx.post(
        f"{client.base_url}embeddings", json={"model": MODEL, "input": "hello world", "encoding_format": "base64"}
    ).json()
    decoded = struct.unpack(f"<{len(vector)}f", base64.b64decode(raw["data"][0]["embedding"]))
    assert decoded == pytest.approx(vector, abs=1e-6)


def test_embeddings_from_token_ids(client: openai.OpenAI) -> None:
    reply = client.embeddings.create(model=MODEL, input=[[1, 2, 3], [4, 5]], encoding_format="float")
    assert reply.usage.prompt_tokens == 5 and len(reply.data) == 2


def test_models(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == [MODEL, "chat-only"]
    model = client.models.retrieve("default")
    assert isinstance(model, Model) and model.id == MODEL and model.object == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-9", messages=HI)
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"


def test_embeddings_on_a_model_without_them_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="chat-only", input="hello")
    assert caught.value.param == "model"
    assert "embeddings" in caught.value.message


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_longer_than_context_is_400_before_streaming(client: openai.OpenAI, stream: bool) -> None:
    long = [{"role": "user", "content": "lorem ipsum " * 2000}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=long, max_tokens=4, stream=stream)
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.status_code == 400


def test_health_reports_the_backend_it_got(server) -> None:
    health = httpx.get(f"{server.url}/v1/health", timeout=60).json()
    model = health["models"][0]
    assert model["state"] == "ready"
    backend = model["backend"]
    assert backend["gpu_offload"] in (True, False)
    assert backend["n_ctx"] == 2048 and backend["n_threads"] >= 1 and backend["n_params"] > 100_000_000


def test_echo_with_logprobs_scores_the_prompt_too(client: openai.OpenAI) -> None:
    """What scoring tools (lm-evaluation-harness) need: each prompt token's logprob given the
    ones before it, the first having none, aligned with the echoed text."""
    prompt = "The capital of France is Paris"
    echoed = client.completions.create(model=MODEL, prompt=prompt, max_tokens=0, echo=True, logprobs=2, temperature=0)
    scores = echoed.choices[0].logprobs
    assert scores is not None and scores.tokens and scores.token_logprobs and scores.text_offset and scores.top_logprobs
    assert echoed.choices[0].text == prompt == "".join(scores.tokens)
    assert scores.token_logprobs[0] is None and scores.top_logprobs[0] is None
    assert scores.text_offset == [sum(len(t) for t in scores.tokens[:i]) for i in range(len(scores.tokens))]
    assert all(lp is not None and lp < 0 for lp in scores.token_logprobs[1:])
    generated = client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=1, logprobs=2, temperature=0
    )
    guess = generated.choices[0].logprobs
    assert guess is not None and guess.tokens == [" Paris"] and guess.token_logprobs
    assert scores.tokens[-1] == " Paris"
    assert abs(scores.token_logprobs[-1] - guess.token_logprobs[0]) < 0.05  # the same context, read twice
