"""The official ollama client against the real model behind real uvicorn, Ollama's routes at the root."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import ollama
import pytest

MODEL = "SmolLM2-135M-Instruct"
HI = [{"role": "user", "content": "Say hello."}]
GREEDY = {"temperature": 0, "num_predict": 12}


@pytest.fixture(scope="module")
def client(server) -> Iterator[ollama.Client]:
    sdk = ollama.Client(host=server.url, timeout=60)
    yield sdk
    sdk.close()


def test_root_says_ollama_is_running(server) -> None:
    reply = httpx.get(server.url + "/", timeout=10)
    assert (reply.status_code, reply.text) == (200, "Ollama is running")
    assert reply.headers["content-type"].startswith("text/plain")
    assert httpx.head(server.url + "/", timeout=10).status_code == 200
    assert httpx.get(f"{server.url}/api/version", timeout=10).json()["version"]


def test_host_and_openai_routes_still_answer(server) -> None:
    assert httpx.get(f"{server.url}/home", timeout=10).text == "host home"
    assert httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"][0]["id"] == MODEL


def test_chat_streamed_and_whole_agree(client: ollama.Client) -> None:
    whole = client.chat(model=MODEL, messages=HI, options=GREEDY, stream=False)
    parts = list(client.chat(model=MODEL, messages=HI, options=GREEDY, stream=True))
    assert isinstance(whole, ollama.ChatResponse)
    assert whole.message.role == "assistant" and whole.message.content
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    last = parts[-1]
    assert last.done_reason in ("stop", "length") and last.done_reason == whole.done_reason
    assert last.eval_count == whole.eval_count and 0 < (last.eval_count or 0) <= GREEDY["num_predict"]
    # as Ollama counts: the prompt tokens evaluated, no more the second time (what the first read is cached)
    assert 0 < (last.prompt_eval_count or 0) <= (whole.prompt_eval_count or 0)
    assert last.total_duration and last.eval_duration is not None and last.total_duration >= last.eval_duration
    assert whole.model == last.model == MODEL
    assert whole.created_at and whole.created_at.endswith("Z")


def test_chat_by_alias_and_default_tag(client: ollama.Client) -> None:
    by_alias = client.chat(model="default", messages=HI, options=GREEDY)
    by_tag = client.chat(model=f"{MODEL}:latest", messages=HI, options=GREEDY)
    assert by_alias.message.content == by_tag.message.content
    assert by_alias.model == MODEL


def test_chat_with_tools_and_tool_history(client: ollama.Client) -> None:
    def get_weather(city: str) -> str:
        """Get the current weather.

        Args:
          city: The city to look up
        """
        return "18 degrees"

    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "18 degrees", "tool_name": "get_weather"},
    ]
    reply = client.chat(model=MODEL, messages=history, tools=[get_weather], options=GREEDY)
    assert reply.done and reply.message.role == "assistant"
    assert (reply.prompt_eval_count or 0) > 0


def test_stream_is_ndjson(server) -> None:
    body = {"model": MODEL, "messages": HI, "options": {"num_predict": 4}}
    with httpx.stream("POST", f"{server.url}/api/chat", json=body, timeout=60) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("application/x-ndjson")
        lines = list(reply.iter_lines())
    assert len(lines) >= 2 and all(line.startswith("{") for line in lines)


def test_generate_templated_streamed_and_whole(client: ollama.Client) -> None:
    whole = client.generate(model=MODEL, prompt="Why is the sky blue?", system="Be brief.", options=GREEDY)
    parts = list(
        client.generate(model=MODEL, prompt="Why is the sky blue?", system="Be brief.", options=GREEDY, stream=True)
    )
    assert isinstance(whole, ollama.GenerateResponse) and whole.response
    assert "".join(p.response or "" for p in parts) == whole.response
    assert parts[-1].done and parts[-1].eval_count == whole.eval_count


def test_generate_raw(client: ollama.Client) -> None:
    prompt = "<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n"
    raw = client.generate(model=MODEL, prompt=prompt, raw=True, options={"temperature": 0, "num_predict": 4})
    assert raw.done and raw.done_reason in ("stop", "length") and (raw.eval_count or 0) <= 4


def test_empty_prompt_loads_the_model(client: ollama.Client) -> None:
    assert client.generate(model=MODEL).done_reason == "load"
    assert client.chat(model=MODEL, messages=[]).done_reason == "load"
    assert list(client.generate(model=MODEL, stream=True))[-1].done_reason == "load"


def _running(client: ollama.Client) -> set[str]:
    return {m.model or "" for m in client.ps().models}


def test_keep_alive_zero_unloads_and_empty_prompt_loads(client: ollama.Client) -> None:
    lazy = "chat-only"
    try:
        assert client.generate(model=lazy, keep_alive="10m").done_reason == "load"
        loaded = {m.model: m for m in client.ps().models}[f"{lazy}:latest"]
        assert loaded.expires_at is not None and 0 < loaded.expires_at.timestamp() - time.time() <= 600
        assert client.chat(model=lazy, messages=[], keep_alive=0).done_reason == "unload"
        deadline = time.monotonic() + 10
        while f"{lazy}:latest" in _running(client) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"{lazy}:latest" not in _running(client)
        # keep_alive 0 held for that request only: one without it reloads and stays, as in Ollama
        client.chat(model=lazy, messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 1})
        time.sleep(0.2)
        stays = {m.model: m for m in client.ps().models}.get(f"{lazy}:latest")
        assert stays is not None and (stays.expires_at is None or stays.expires_at.timestamp() > time.time() + 3600)
    finally:
        client.generate(model=lazy, keep_alive=-1)  # back to the configured policy: stay loaded


def test_embed(client: ollama.Client) -> None:
    one = client.embed(model=MODEL, input="The sky is blue.")
    assert isinstance(one, ollama.EmbedResponse)
    assert len(one.embeddings) == 1 and len(one.embeddings[0]) == 576
    assert (one.prompt_eval_count or 0) > 0
    two = client.embed(model=MODEL, input=["a cat", "a dog"])
    assert [len(e) for e in two.embeddings] == [576, 576]
    legacy = client.embeddings(model=MODEL, prompt="The sky is blue.")
    assert list(legacy.embedding) == pytest.approx(list(one.embeddings[0]), abs=1e-6)


def test_list_show_ps(client: ollama.Client) -> None:
    names = [m.model for m in client.list().models]
    assert f"{MODEL}:latest" in names
    shown = client.show(MODEL)
    assert shown.capabilities and {"completion", "tools", "embedding"} <= set(shown.capabilities)
    # What the GGUF header says, read without llama.cpp: the training context, not the served one.
    assert shown.modelinfo is not None and shown.modelinfo["llama.context_length"] == 8192
    # The served one is a parameter, as a Modelfile's `PARAMETER num_ctx` would say (conftest's N_CTX).
    assert shown.parameters is not None and shown.parameters.split() == ["num_ctx", "2048"]
    assert shown.modelinfo["general.parameter_count"] == 134_515_008
    assert shown.template is not None and shown.template.startswith(
        "{{- range .Messages }}<|im_start|>"
    )  # ChatML, in Go
    assert "tokenizer.ggml.tokens" not in shown.modelinfo and "tokenizer.chat_template" not in shown.modelinfo
    assert shown.details is not None and shown.details.format == "gguf"
    details = (shown.details.family, shown.details.families, shown.details.parameter_size)
    assert details == ("llama", ["llama"], "135M") and shown.details.quantization_level == "Q4_1"
    listed = {m.model: m for m in client.list().models}[f"{MODEL}:latest"]
    assert listed.details == shown.details
    running = {m.model: m for m in client.ps().models}
    assert running[f"{MODEL}:latest"].context_length == 2048


@pytest.mark.parametrize("stream", [False, True])
def test_unknown_model_is_404(client: ollama.Client, stream: bool) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        reply = client.chat(model="llama3.2", messages=HI, stream=stream)
        if stream:
            list(reply)  # type: ignore[arg-type]
    assert caught.value.status_code == 404
    assert "llama3.2" in caught.value.error
    with pytest.raises(ollama.ResponseError) as shown:
        client.show("llama3.2")
    assert shown.value.status_code == 404


def test_pulling_a_served_model_succeeds_at_once_and_any_other_is_404(client: ollama.Client) -> None:
    assert client.pull(MODEL).status == "success"
    assert [p.status for p in client.pull("default", stream=True)] == ["success"]
    with pytest.raises(ollama.ResponseError) as caught:
        list(client.pull("llama3.2", stream=True))
    assert caught.value.status_code == 404 and "llama3.2" in caught.value.error


def test_an_empty_schema_format_constrains_the_output(server) -> None:
    """`format: {}` is a JSON schema that any JSON value meets, not "no format": the reply is JSON."""
    body = {"model": MODEL, "prompt": "Fill in the JSON", "format": {}, "stream": False, "options": GREEDY}
    reply = httpx.post(f"{server.url}/api/generate", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    json.loads(reply.json()["response"])  # any JSON value, whole: the grammar ends inside itself


@pytest.mark.parametrize("stream", [False, True])
def test_durations_are_measured_from_the_request_start(client: ollama.Client, stream: bool) -> None:
    began = time.perf_counter_ns()
    reply = client.generate(model=MODEL, prompt="Count to five.", options=GREEDY, stream=stream)
    last = list(reply)[-1] if stream else reply  # type: ignore[arg-type]
    took = time.perf_counter_ns() - began
    assert isinstance(last, ollama.GenerateResponse) and last.total_duration is not None
    parts = (last.load_duration or 0) + (last.prompt_eval_duration or 0) + (last.eval_duration or 0)
    assert 0 < parts <= last.total_duration <= took  # never the fraction of a second `created` rounds away
    assert (last.prompt_eval_duration or 0) > 0 and (last.eval_duration or 0) > 0  # a whole reply's too
    assert (last.eval_duration or 0) < last.total_duration  # the prompt's share is not counted as output


def test_invalid_format_schema_is_400(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model=MODEL, messages=HI, format={"type": "objet"})
    assert caught.value.status_code == 400 and "format" in caught.value.error


@pytest.mark.parametrize(
    ("path", "content"),
    [
        ("/api/chat", b'{"model": '),
        ("/api/chat", b'["not", "an", "object"]'),
        ("/api/chat", b'{"model": "SmolLM2-135M-Instruct", "messages": "hi"}'),
        ("/api/generate", b'{"model": "SmolLM2-135M-Instruct", "options": {"temperature": "hot"}}'),
        ("/api/embed", b'{"model": "SmolLM2-135M-Instruct", "input": 5}'),
        ("/api/show", b"{}"),
        ("/api/show", b'{"model": "SmolLM2-135M-Instruct", "bogus": 1}'),
        ("/api/show", b'{"model": "SmolLM2-135M-Instruct", "verbose": true}'),
        ("/api/pull", b'{"model": "SmolLM2-135M-Instruct", "bogus": 1}'),
        ("/api/embeddings", b'{"model": "SmolLM2-135M-Instruct", "prompt": "hi", "options": {"temperature": 0.5}}'),
        ("/api/embeddings", b'{"model": "SmolLM2-135M-Instruct", "prompt": "hi", "options": {"num_ctx": 999999}}'),
        ("/api/generate", b'{"model": "SmolLM2-135M-Instruct", "prompt": "hi", "raw": true, "system": "Be brief."}'),
    ],
)
def test_malformed_body_is_400(server, path: str, content: bytes) -> None:
    reply = httpx.post(server.url + path, content=content, headers={"content-type": "application/json"}, timeout=30)
    assert reply.status_code == 400, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    body = reply.json()
    assert set(body) == {"error", "request_id"} and isinstance(body["error"], str) and body["error"]
    assert "Traceback" not in reply.text and ".gguf" not in reply.text


def test_unknown_route_and_method(server) -> None:
    missing = httpx.post(f"{server.url}/api/push", json={"model": "x"}, timeout=10)  # models are never pushed
    assert missing.status_code == 404 and set(missing.json()) == {"error", "request_id"}
    wrong = httpx.get(f"{server.url}/api/chat", timeout=10)
    assert wrong.status_code == 405 and set(wrong.json()) == {"error", "request_id"}
