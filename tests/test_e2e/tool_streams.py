"""What every streamed tool call must look like through the Anthropic SDK's `messages.stream`,
forced or begun on its own: shared by the forced and the auto calls' tests."""

from __future__ import annotations

import json
from typing import Any


def anthropic_streamed_call(events: list[Any], final: Any) -> Any:
    """Check one streamed `tool_use` block against the SDK's own events and final message: a
    `content_block_start` naming `get_weather`, several `input_json_delta`s on its index, its stop,
    the message's events in order, the helper's snapshot of the pieces, and a final input that the
    pieces make. Returns that input."""
    kinds = [e.type for e in events if e.type not in ("input_json", "text")]  # the helper's own extras
    start = next(e for e in events if e.type == "content_block_start")
    assert start.content_block.type == "tool_use" and start.content_block.name == "get_weather"
    deltas = [e for e in events if e.type == "content_block_delta"]
    assert len(deltas) > 1 and all(d.delta.type == "input_json_delta" and d.index == start.index for d in deltas)
    (stop,) = [e for e in events if e.type == "content_block_stop"]
    assert stop.index == start.index
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    partial = "".join(d.delta.partial_json for d in deltas)
    helper = [e for e in events if e.type == "input_json"]  # the helper's own reading of the pieces
    assert "".join(e.partial_json for e in helper) == partial and helper[-1].snapshot == json.loads(partial)
    (use,) = [block for block in final.content if block.type == "tool_use"]
    assert final.stop_reason == "tool_use" and use.id == start.content_block.id
    assert use.input == json.loads(partial)
    return use.input
