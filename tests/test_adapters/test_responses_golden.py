"""Golden files for the OpenAI Responses adapter, every output checked against OpenAI's spec.

Each case folder under `golden/openai_responses/` holds `request.json` and `events.json`
(core events; a last `{"type": "error"}` ends the stream with an error instead) and the
expected `parsed.json`, `response.json` (the non-stream render, or the failed response the
stream ended with) and `stream.txt` (the exact SSE bytes). Run with `UPDATE_GOLDEN=1` to
rewrite the expected outputs, then read the diff.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from asgi_llm.adapters.base import Meta, Parsed
from asgi_llm.adapters.openai.responses import routes as openai_responses
from asgi_llm.core import ChatRequest, GenerationEvent, Overloaded

SpecValidate = Callable[[Any, str], None]
LoadJson = Callable[[Path, str], Any]
CheckOutputs = Callable[[Path, Parsed[Any, Any], Any, bytes | None], None]
ParseNamedSSE = Callable[[bytes], list[dict[str, Any]]]
Replay = Callable[[Path], tuple[Parsed[ChatRequest, Any], list[GenerationEvent], bool, bytes, Any]]

META = Meta(request_id="test", created=1700000000, model="m")

EVENT_SCHEMAS = {
    "response.created": "ResponseCreatedEvent",
    "response.in_progress": "ResponseInProgressEvent",
    "response.output_item.added": "ResponseOutputItemAddedEvent",
    "response.output_item.done": "ResponseOutputItemDoneEvent",
    "response.content_part.added": "ResponseContentPartAddedEvent",
    "response.content_part.done": "ResponseContentPartDoneEvent",
    "response.output_text.delta": "ResponseTextDeltaEvent",
    "response.output_text.done": "ResponseTextDoneEvent",
    "response.reasoning_text.delta": "ResponseReasoningTextDeltaEvent",
    "response.reasoning_text.done": "ResponseReasoningTextDoneEvent",
    "response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaEvent",
    "response.function_call_arguments.done": "ResponseFunctionCallArgumentsDoneEvent",
    "response.completed": "ResponseCompletedEvent",
    "response.incomplete": "ResponseIncompleteEvent",
    "response.failed": "ResponseFailedEvent",
}
ENDS = ("response.completed", "response.incomplete", "response.failed")


@pytest.fixture
def replay(load_json: LoadJson, core_events: Callable[[Any], list[GenerationEvent]]) -> Replay:
    """`replay(case)`: the parsed request, its core events, whether the stream fails, its bytes and final response."""

    def replay_case(case: Path) -> tuple[Parsed[ChatRequest, Any], list[GenerationEvent], bool, bytes, Any]:
        parsed = openai_responses.parse(load_json(case, "request.json"))
        raw = load_json(case, "events.json")
        fails = bool(raw) and raw[-1]["type"] == "error"
        events = core_events(raw[:-1] if fails else raw)
        stream = openai_responses.encoder(parsed, META)
        body = stream.open() + b"".join(stream.event(e) for e in events)
        body += stream.error(Overloaded("The server is busy.")) if fails else stream.close()
        return parsed, events, fails, body, stream.final()

    return replay_case


def test_golden(openai_responses_case: Path, replay: Replay, check_outputs: CheckOutputs) -> None:
    parsed, events, fails, body, final = replay(openai_responses_case)
    rendered = final if fails else openai_responses.render(parsed, META, events)
    check_outputs(openai_responses_case, parsed, rendered, body)
    assert final == rendered  # the stream ends with exactly the non-stream response


def test_response_matches_spec(openai_responses_case: Path, spec_validate: SpecValidate, load_json: LoadJson) -> None:
    spec_validate(load_json(openai_responses_case, "response.json"), "Response")


def test_stream_events_match_spec(
    openai_responses_case: Path, spec_validate: SpecValidate, parse_named_sse: ParseNamedSSE
) -> None:
    for event in parse_named_sse((openai_responses_case / "stream.txt").read_bytes()):
        spec_validate(event, EVENT_SCHEMAS[event["type"]])
        spec_validate(event, "ResponseStreamEvent")


def test_stream_is_consistent(openai_responses_case: Path, parse_named_sse: ParseNamedSSE) -> None:
    events = parse_named_sse((openai_responses_case / "stream.txt").read_bytes())
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] in ENDS and all(e["type"] not in ENDS for e in events[:-1])
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    final = events[-1]["response"]
    added, done = _check_items(events[2:-1])
    assert [item["id"] for item in final["output"]] == [item["id"] for item in added]
    assert {e["response"]["id"] for e in (events[0], events[1], events[-1])} == {"resp_test"}
    if final["status"] != "failed":
        assert final["output"] == done


def _check_items(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Items are added in output order, every event names an open item, deltas add up to the done text."""
    added: list[dict[str, Any]] = []
    done: dict[int, dict[str, Any]] = {}
    texts: dict[int, str] = {}
    for event in events:
        index = event["output_index"]
        if event["type"] == "response.output_item.added":
            assert index == len(added) and event["item"]["status"] == "in_progress"
            added.append(event["item"])
            continue
        assert index < len(added) and index not in done, event
        if "item_id" in event:
            assert event["item_id"] == added[index]["id"]
        if event["type"].endswith(".delta"):
            texts[index] = texts.get(index, "") + event["delta"]
        elif event["type"] in ("response.output_text.done", "response.reasoning_text.done"):
            assert event["text"] == texts.pop(index, "")
        elif event["type"] == "response.function_call_arguments.done":
            assert event["arguments"] == texts.pop(index, "") and event["name"] == added[index]["name"]
        elif event["type"] == "response.output_item.done":
            assert event["item"]["id"] == added[index]["id"] and event["item"]["status"] != "in_progress"
            done[index] = event["item"]
    return added, [done[i] for i in sorted(done)]


def test_spec_checks_are_not_vacuous(
    spec_validate: SpecValidate, load_json: LoadJson, parse_named_sse: ParseNamedSSE
) -> None:
    case = Path(__file__).parent / "golden" / "openai_responses" / "string_input"
    body = load_json(case, "response.json")
    for broken in (
        {k: v for k, v in body.items() if k != "tools"},
        {**body, "usage": None},
        {**body, "status": "done"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            spec_validate(broken, "Response")
    events = parse_named_sse((case / "stream.txt").read_bytes())
    delta = next(e for e in events if e["type"] == "response.output_text.delta")
    with pytest.raises(jsonschema.ValidationError):
        spec_validate({k: v for k, v in delta.items() if k != "logprobs"}, "ResponseTextDeltaEvent")
