"""Golden files for the Anthropic adapter, and every rendered shape checked against the official SDK.

Each folder under `golden/anthropic_messages/` is one case, chosen by its inputs:
`events.json` (a generation: `parsed.json`, `response.json`, `stream.txt`), `count.json`
(a token count: `parsed.json`, `response.json`) or a model-listing `request.json` naming
its handler (`response.json`, against `catalog.json`). Run with `UPDATE_GOLDEN=1` to
rewrite the expected outputs, then read the diff.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message, ModelInfo, RawMessageStreamEvent
from pydantic import TypeAdapter

from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.anthropic import (
    messages as anthropic_messages,
)
from asgi_llm.adapters.anthropic import (
    models as anthropic_models,
)
from asgi_llm.adapters.anthropic import (
    stream as anthropic_stream,
)
from asgi_llm.adapters.anthropic.common import render_error
from asgi_llm.adapters.base import InfoContext, Meta, Parsed
from asgi_llm.core import GenerationEvent, LLMError, ModelCard

META = Meta(request_id="test", created=1700000000, model="m")
GOLDEN = Path(__file__).parent / "golden" / "anthropic_messages"
GENERATIONS = sorted(p for p in GOLDEN.iterdir() if (p / "events.json").is_file())
STREAM_EVENT: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)

LoadJson = Callable[[Path, str], Any]
CheckOutputs = Callable[[Path, Parsed[Any, Any], Any, bytes | None], None]
CoreEvents = Callable[[Any], list[GenerationEvent]]
StreamBytes = Callable[[Path], bytes]
LoadCatalog = Callable[[str], list[ModelCard]]


@pytest.fixture
def stream_bytes(load_json: LoadJson, core_events: CoreEvents) -> StreamBytes:
    """`stream_bytes(case)`: what `MessageStream` sends for the case's request and events."""

    def encode(case: Path) -> bytes:
        stream = anthropic_stream.MessageStream(anthropic_messages.parse(load_json(case, "request.json")), META)
        events = core_events(load_json(case, "events.json"))
        return stream.open() + b"".join(stream.event(e) for e in events) + stream.close()

    return encode


def test_golden(
    anthropic_messages_case: Path,
    load_json: LoadJson,
    check_outputs: CheckOutputs,
    core_events: CoreEvents,
    stream_bytes: StreamBytes,
    check_json: Callable[[Path, str, Any], None],
    load_catalog: LoadCatalog,
) -> None:
    case = anthropic_messages_case
    request = load_json(case, "request.json")
    if (case / "events.json").is_file():
        parsed = anthropic_messages.parse(request)
        response = anthropic_messages.render(parsed, META, core_events(load_json(case, "events.json")))
        check_outputs(case, parsed, response, stream_bytes(case))
    elif (case / "count.json").is_file():
        parsed = anthropic_messages.parse_count(request)
        count = load_json(case, "count.json")["input_tokens"]
        check_outputs(case, parsed, anthropic_messages.render_count(parsed, count), None)
    else:
        handler = getattr(anthropic_models, request["handler"])
        ctx = InfoContext(load_catalog("anthropic_messages"), request["params"], {"anthropic-version": "2023-06-01"})
        try:
            status, body = handler(ctx)
        except LLMError as error:
            status, body = render_error(error)
        check_json(case, "response.json", {"status": status, "body": body})


# -- the SDK's own types ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", GENERATIONS, ids=[c.name for c in GENERATIONS])
def test_response_is_an_sdk_message(case: Path, load_json: LoadJson) -> None:
    body = load_json(case, "response.json")
    message = Message.model_validate(body)
    assert message.stop_reason is not None
    assert message.model_dump(exclude_unset=True) == body  # nothing dropped or renamed


_BLOCK_DELTAS = {
    "text": {"text_delta"},
    "thinking": {"thinking_delta", "signature_delta"},
    "tool_use": {"input_json_delta"},
}


@pytest.mark.parametrize("case", GENERATIONS, ids=[c.name for c in GENERATIONS])
def test_stream_events_are_sdk_events_in_order(
    case: Path,
    load_json: LoadJson,
    stream_bytes: StreamBytes,
    parse_named_sse: Callable[[bytes], list[dict[str, Any]]],
) -> None:
    payloads = parse_named_sse(stream_bytes(case))
    names = [payload["type"] for payload in payloads]
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
    assert next_index == len(load_json(case, "response.json")["content"])


def _sdk(body: bytes, content_type: str) -> anthropic.Anthropic:
    reply = httpx2.Response(200, content=body, headers={"content-type": content_type})
    transport = httpx2.MockTransport(lambda request: reply)
    return anthropic.Anthropic(api_key="unused", max_retries=0, http_client=httpx2.Client(transport=transport))


@pytest.mark.parametrize("case", GENERATIONS, ids=[c.name for c in GENERATIONS])
def test_sdk_assembles_the_stream_into_the_non_stream_reply(
    case: Path, load_json: LoadJson, stream_bytes: StreamBytes
) -> None:
    """The SDK's own accumulator, fed our exact bytes, rebuilds exactly what `render` returns."""
    request = load_json(case, "request.json")
    kwargs = {k: request[k] for k in ("model", "max_tokens", "messages")}
    with _sdk(stream_bytes(case), "text/event-stream").messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    expected = Message.model_validate(load_json(case, "response.json"))
    assert final.model_dump(exclude_none=True) == expected.model_dump(exclude_none=True)
    assert text == "".join(block.text for block in expected.content if block.type == "text")
    plain = _sdk((case / "response.json").read_bytes(), "application/json").messages.create(**kwargs)
    assert plain == expected


def test_models_are_sdk_model_infos(load_catalog: LoadCatalog) -> None:
    catalog = load_catalog("anthropic_messages")
    status, body = anthropic_models.list_models(InfoContext(catalog, {}, {}))
    assert status == 200 and body["has_more"] is False
    infos = [ModelInfo.model_validate(item) for item in body["data"]]
    assert [i.id for i in infos] == [c.id for c in catalog] == [body["first_id"], body["last_id"]]
    assert infos[0].created_at.timestamp() == catalog[0].created


def test_model_routes_answer_anthropic_clients_only() -> None:
    routes = [r for r in ANTHROPIC.routes if r.path.startswith("/models")]
    assert len(routes) == 2 and all(getattr(r, "requires_header", None) == "anthropic-version" for r in routes)
