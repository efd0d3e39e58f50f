"""Golden files for the Anthropic adapter, and every rendered shape checked against the official SDK.

Each folder under `golden/anthropic_messages/` is one case, chosen by its inputs:
`events.json` (a generation: `parsed.json`, `response.json`, `stream.txt`), `count.json`
(a token count: `parsed.json`, `response.json`) or a model-listing `request.json` naming
its handler (`response.json`, against `catalog.json`). Run with `UPDATE_GOLDEN=1` to
rewrite the expected outputs, then read the diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message, ModelInfo, RawMessageStreamEvent
from pydantic import TypeAdapter

from asgi_llm.adapters import anthropic as anthropic_family
from asgi_llm.adapters import anthropic_messages
from asgi_llm.adapters.base import InfoContext, Meta, Parsed
from asgi_llm.core import (
    Finish,
    GenerationEvent,
    LLMError,
    ModelCard,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)

META = Meta(request_id="test", created=1700000000, model="m")
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
GOLDEN = Path(__file__).parent / "golden" / "anthropic_messages"
GENERATIONS = sorted(p for p in GOLDEN.iterdir() if (p / "events.json").is_file())
STREAM_EVENT: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)


def _load(case: Path, name: str) -> Any:
    return json.loads((case / name).read_text(encoding="utf-8"))


def _check_json(case: Path, name: str, actual: Any) -> None:
    actual = json.loads(json.dumps(actual))  # tuples → lists, as the wire sees it
    path = case / name
    if UPDATE:
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert path.is_file(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert actual == _load(case, name)


def _check_bytes(case: Path, name: str, actual: bytes) -> None:
    path = case / name
    if UPDATE:
        path.write_bytes(actual)
    assert path.is_file(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert actual == path.read_bytes()


def _parsed_json(parsed: Parsed[Any]) -> dict[str, Any]:
    return {"request": dataclasses.asdict(parsed.request), "stream": parsed.stream, "options": parsed.options}


def _event(raw: dict[str, Any]) -> GenerationEvent:
    kind, call = raw["type"], raw.get("call_index", 0)
    if kind == "text":
        return TextDelta(raw["text"])
    if kind == "reasoning":
        return ReasoningDelta(raw["text"])
    if kind == "tool_start":
        return ToolCallStart(raw["id"], raw["name"], call_index=call)
    if kind == "tool_delta":
        return ToolCallDelta(raw["arguments"], call_index=call)
    if kind == "tool_end":
        return ToolCallEnd(call_index=call)
    return Finish(raw["reason"], Usage(**raw["usage"]), stop_sequence=raw.get("stop_sequence"))


def _events(case: Path) -> list[GenerationEvent]:
    return [_event(e) for e in _load(case, "events.json")]


def _stream_bytes(case: Path) -> bytes:
    parsed = anthropic_messages.parse(_load(case, "request.json"))
    stream = anthropic_messages.MessageStream(parsed, META)
    return stream.open() + b"".join(stream.event(e) for e in _events(case)) + stream.close()


def _catalog() -> list[ModelCard]:
    raw = _load(GOLDEN, "catalog.json")
    return [ModelCard(**{**card, "aliases": tuple(card["aliases"])}) for card in raw]


def test_golden(anthropic_messages_case: Path) -> None:
    case = anthropic_messages_case
    request = _load(case, "request.json")
    if (case / "events.json").is_file():
        parsed = anthropic_messages.parse(request)
        _check_json(case, "parsed.json", _parsed_json(parsed))
        _check_json(case, "response.json", anthropic_messages.render(parsed, META, _events(case)))
        _check_bytes(case, "stream.txt", _stream_bytes(case))
    elif (case / "count.json").is_file():
        parsed = anthropic_messages.parse_count(request)
        _check_json(case, "parsed.json", _parsed_json(parsed))
        count = _load(case, "count.json")["input_tokens"]
        _check_json(case, "response.json", anthropic_messages.render_count(parsed, count))
    else:
        handler = getattr(anthropic_family, request["handler"])
        try:
            status, body = handler(InfoContext(_catalog(), request["params"], {"anthropic-version": "2023-06-01"}))
        except LLMError as error:
            status, body = anthropic_messages.render_error(error)
        _check_json(case, "response.json", {"status": status, "body": body})


# -- the SDK's own types ---------------------------------------------------------------------------------


def _split_sse(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """`(event name, payload)` pairs, checking the framing: `event:` then `data:`, named after `type`."""
    assert data.endswith(b"\n\n")
    pairs = []
    for chunk in data[:-2].split(b"\n\n"):
        name_line, data_line = chunk.decode("utf-8").split("\n")
        name, payload = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        assert payload["type"] == name
        pairs.append((name, payload))
    return pairs


@pytest.mark.parametrize("case", GENERATIONS, ids=[c.name for c in GENERATIONS])
def test_response_is_an_sdk_message(case: Path) -> None:
    body = _load(case, "response.json")
    message = Message.model_validate(body)
    assert message.stop_reason is not None
    assert message.model_dump(exclude_unset=True) == body  # nothing dropped or renamed


_BLOCK_DELTAS = {
    "text": {"text_delta"},
    "thinking": {"thinking_delta", "signature_delta"},
    "tool_use": {"input_json_delta"},
}


@pytest.mark.parametrize("case", GENERATIONS, ids=[c.name for c in GENERATIONS])
def test_stream_events_are_sdk_events_in_order(case: Path) -> None:
    events = _split_sse(_stream_bytes(case))
    names, payloads = [name for name, _ in events], [payload for _, payload in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    assert payloads[0]["message"]["content"] == [] and payloads[0]["message"]["stop_reason"] is None
    for payload in payloads[:1] + payloads[2:]:
        STREAM_EVENT.validate_python(payload)
    open_block: dict[str, Any] | None = None
    next_index = 0
    for payload in payloads[2:-2]:
        if payload["type"] == "content_block_start":
            assert open_block is None and payload["index"] == next_index
            open_block, next_index = {**payload["content_block"], "deltas": []}, next_index + 1
            continue
        assert open_block is not None and payload["index"] == next_index - 1
        if payload["type"] == "content_block_delta":
            assert payload["delta"]["type"] in _BLOCK_DELTAS[open_block["type"]]
            open_block["deltas"].append(payload["delta"]["type"])
        else:
            assert payload["type"] == "content_block_stop"
            if open_block["type"] == "thinking":  # exactly one signature, just before the stop
                assert open_block["deltas"][-1] == "signature_delta"
                assert open_block["deltas"].count("signature_delta") == 1
            open_block = None
    assert open_block is None
    assert next_index == len(_load(case, "response.json")["content"])


def _sdk(body: bytes, content_type: str) -> anthropic.Anthropic:
    reply = httpx2.Response(200, content=body, headers={"content-type": content_type})
    transport = httpx2.MockTransport(lambda request: reply)
    return anthropic.Anthropic(api_key="unused", max_retries=0, http_client=httpx2.Client(transport=transport))


@pytest.mark.parametrize("case", GENERATIONS, ids=[c.name for c in GENERATIONS])
def test_sdk_assembles_the_stream_into_the_non_stream_reply(case: Path) -> None:
    """The SDK's own accumulator, fed our exact bytes, rebuilds exactly what `render` returns."""
    request = _load(case, "request.json")
    kwargs = {k: request[k] for k in ("model", "max_tokens", "messages")}
    with _sdk(_stream_bytes(case), "text/event-stream").messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    expected = Message.model_validate(_load(case, "response.json"))
    assert final.model_dump(exclude_none=True) == expected.model_dump(exclude_none=True)
    assert text == "".join(block.text for block in expected.content if block.type == "text")
    plain = _sdk((case / "response.json").read_bytes(), "application/json").messages.create(**kwargs)
    assert plain == expected


def test_models_are_sdk_model_infos() -> None:
    catalog = _catalog()
    status, body = anthropic_family.list_models(InfoContext(catalog, {}, {}))
    assert status == 200 and body["has_more"] is False
    infos = [ModelInfo.model_validate(item) for item in body["data"]]
    assert [i.id for i in infos] == [c.id for c in catalog] == [body["first_id"], body["last_id"]]
    assert infos[0].created_at.timestamp() == catalog[0].created


def test_model_routes_answer_anthropic_clients_only() -> None:
    routes = [r for r in anthropic_family.ANTHROPIC.routes if r.path.startswith("/models")]
    assert len(routes) == 2 and all(getattr(r, "requires_header", None) == "anthropic-version" for r in routes)
