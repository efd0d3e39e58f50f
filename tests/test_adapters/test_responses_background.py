"""A background response's shapes, pure: the object answered at once, its stream's opening
(`response.created`, `response.queued`) and the objects it is stored as when cancelled or failed,
checked against OpenAI's OpenAPI spec; the kept events are the stream's, numbered without a gap."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from asgi_llm.adapters.base import Meta
from asgi_llm.adapters.openai.responses import routes as openai_responses
from asgi_llm.adapters.openai.responses.output import ResponsesStream, frames
from asgi_llm.core import Finish, InternalError, TextDelta, Usage

SpecValidate = Callable[[Any, str], None]
META = Meta(request_id="0123456789abcdef01234567", created=1_700_000_000, model="m")


def _stream() -> ResponsesStream:
    parsed = openai_responses.parse({"model": "m", "input": "hi", "background": True})
    assert parsed.background
    encoder = openai_responses.encoder(parsed, META)
    assert isinstance(encoder, ResponsesStream)
    return encoder


def test_the_queued_answer_and_the_streams_opening_match_the_spec(spec_validate: SpecValidate) -> None:
    encoder = _stream()
    queued = encoder.queue()
    spec_validate(queued, "Response")
    assert (queued["status"], queued["background"], queued["output"]) == ("queued", True, [])
    created, waiting = encoder.kept()
    spec_validate(created, "ResponseCreatedEvent")
    spec_validate(waiting, "ResponseQueuedEvent")
    assert [created["sequence_number"], waiting["sequence_number"]] == [0, 1]
    encoder.open()
    encoder.event(TextDelta("Hel"))
    spec_validate(encoder.snapshot("in_progress"), "Response")
    encoder.event(TextDelta("lo"))
    encoder.event(Finish("stop", Usage(3, 2)))
    encoder.close()
    events = encoder.kept()
    assert events[0]["type"] == "response.in_progress"  # created and queued went out before
    assert [e["sequence_number"] for e in events] == list(range(2, 2 + len(events)))
    assert events[-1]["response"]["status"] == "completed" and events[-1]["response"]["background"] is True
    text = frames(events).decode()
    assert text.count("event: ") == len(events)
    assert json.loads(text.split("data: ")[1].split("\n")[0]) == events[0]


def test_cancelled_and_failed_objects_match_the_spec(spec_validate: SpecValidate) -> None:
    cancelled = _stream()
    cancelled.queue()
    cancelled.open()
    cancelled.event(TextDelta("partial"))
    stopped = cancelled.snapshot("cancelled")
    spec_validate(stopped, "Response")
    assert stopped["status"] == "cancelled" and stopped["output"][0]["status"] == "incomplete"
    assert cancelled.final() == stopped
    failed = _stream().snapshot("failed", InternalError("boom"))
    spec_validate(failed, "Response")
    assert failed["error"] == {"code": "server_error", "message": "boom"}
