"""What a Responses client that keeps no state sends back: the output items as they came (ids,
statuses, annotations and logprobs included), and with `include: ["reasoning.encrypted_content"]`
its reasoning, sealed in the item and read back on the next turn."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response

from asgi_llm.adapters.base import Meta
from asgi_llm.adapters.openai.responses import routes as openai_responses
from asgi_llm.core import Finish, InvalidRequest, ReasoningDelta, TextDelta, Unsupported, Usage

META = Meta(request_id="0123456789abcdef01234567", created=1_700_000_000, model="m")
HI = {"role": "user", "content": "Hi"}
THOUGHT = "The user greets; greet back, briefly. ünïcode too."
EVENTS = [ReasoningDelta(THOUGHT), TextDelta("Hello!"), Finish("stop", Usage(5, 3))]
ENCRYPTED = "reasoning.encrypted_content"


def turn(include: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    body = {"model": "m", "input": "Hi", "store": False, **fields}
    return body if include is None else {**body, "include": include}


def test_reasoning_sealed_in_one_turn_is_read_back_in_the_next() -> None:
    parsed = openai_responses.parse(turn([ENCRYPTED]))
    response = openai_responses.render(parsed, META, EVENTS)
    Response.model_validate(response)
    reasoning = response["output"][0]
    assert reasoning["type"] == "reasoning" and THOUGHT not in reasoning["encrypted_content"]
    sent_back = {k: v for k, v in reasoning.items() if k != "content"}  # the sealed text alone
    follow = openai_responses.parse(turn([ENCRYPTED], input=[HI, sent_back, response["output"][1], HI]))
    assistant = [m for m in follow.request.messages if m.role == "assistant"]
    assert [(m.reasoning, m.content) for m in assistant] == [(THOUGHT, "Hello!")]


def test_without_the_include_no_reasoning_is_sealed_and_the_stream_agrees() -> None:
    plain = openai_responses.render(openai_responses.parse(turn()), META, EVENTS)
    assert "encrypted_content" not in plain["output"][0]
    parsed = openai_responses.parse(turn([ENCRYPTED], stream=True))
    stream = openai_responses.encoder(parsed, META)
    stream.open()
    frames = b"".join(stream.event(e) for e in EVENTS) + stream.close()
    done = [line for line in frames.decode().splitlines() if '"response.output_item.done"' in line]
    assert '"encrypted_content"' in done[0]  # the reasoning item, as it closed
    assert stream.final() == openai_responses.render(parsed, META, EVENTS)


@pytest.mark.parametrize(
    ("sealed", "error"),
    [("gAAAAABn-another-servers-fernet-token", Unsupported), ("asgi-llm:reasoning:v1:%%%", InvalidRequest)],
)
def test_reasoning_sealed_elsewhere_or_broken_is_refused_by_name(sealed: str, error: type[Exception]) -> None:
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": sealed}
    with pytest.raises(error) as refused:
        openai_responses.parse(turn(input=[item, HI]))
    assert getattr(refused.value, "param", None) == "input[0].encrypted_content"


def test_the_output_sent_back_as_it_came_is_read_and_unknown_keys_in_items_are_not() -> None:
    response = openai_responses.render(openai_responses.parse(turn()), META, EVENTS)
    again = openai_responses.parse(turn(input=[HI, *response["output"], HI]))
    assert [m.role for m in again.request.messages] == ["user", "assistant", "user"]
    for body, param in [
        (turn(input=[{"role": "user", "content": "Hi", "foo": 1}]), "input[0].foo"),
        (
            turn(input=[{"role": "user", "content": [{"type": "input_text", "text": "Hi", "x": 1}]}]),
            "input[0].content[0].x",
        ),
        (turn(tools=[{"type": "function", "name": "f", "foo": True}]), "tools[0].foo"),
    ]:
        with pytest.raises(InvalidRequest) as refused:
            openai_responses.parse(body)
        assert refused.value.param == param and "Unrecognized parameter" in refused.value.message
