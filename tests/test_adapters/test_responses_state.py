"""Responses state: `resolve` replays a stored conversation, `record` stores one, and the
retrieve / delete / input_items routes read it back. A dict stands in for the app's store."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from asgi_llm.adapters.base import InfoContext, Meta, Parsed, StateRoute
from asgi_llm.adapters.openai.common import render_error
from asgi_llm.adapters.openai.responses import routes as openai_responses
from asgi_llm.core import (
    ChatRequest,
    Finish,
    GenerationEvent,
    InvalidRequest,
    Message,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from asgi_llm.http.routing import Router

pytestmark = pytest.mark.anyio

SpecValidate = Callable[[Any, str], None]


class DictStore:
    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}

    async def get(self, key: str) -> dict[str, Any] | None:
        return self.data.get(key)

    async def put(self, key: str, value: dict[str, Any]) -> None:
        self.data[key] = json.loads(json.dumps(value))  # JSON-able, and no aliasing with the caller

    async def delete(self, key: str) -> bool:
        return self.data.pop(key, None) is not None


def _finish(prompt: int = 10) -> Finish:
    return Finish("stop", Usage(prompt, 2))


async def _turn(
    store: DictStore, request_id: str, body: dict[str, Any], events: Sequence[GenerationEvent]
) -> tuple[Parsed[ChatRequest, Any], dict[str, Any]]:
    """One request through the hooks the way the app drives them: parse, resolve, render, record."""
    parsed = await openai_responses.resolve(openai_responses.parse({"model": "m", **body}), store)
    response = openai_responses.render(parsed, Meta(request_id, 1700000000, "m"), events)
    await openai_responses.record(parsed, response, store)
    return parsed, response


async def test_chaining_replays_the_conversation_with_only_the_new_instructions() -> None:
    store = DictStore()
    await _turn(
        store, "one", {"instructions": "Be terse.", "input": "Hi, I'm Ann."}, [TextDelta("Hello Ann."), _finish()]
    )
    parsed, response = await _turn(
        store,
        "two",
        {"instructions": "Be kind.", "input": "What's my name?", "previous_response_id": "resp_one"},
        [TextDelta("Ann."), _finish()],
    )
    assert parsed.request.messages == (
        Message("system", "Be kind."),
        Message("user", "Hi, I'm Ann."),
        Message("assistant", "Hello Ann."),
        Message("user", "What's my name?"),
    )
    assert response["previous_response_id"] == "resp_one" and response["instructions"] == "Be kind."


async def test_chaining_follows_a_chain_and_tool_calls() -> None:
    store = DictStore()
    tools = [{"type": "function", "name": "clock", "parameters": {"type": "object", "properties": {}}}]
    call = [ToolCallStart("call_1", "clock"), ToolCallDelta("{}"), ToolCallEnd(), Finish("tool_calls", Usage(5, 3))]
    await _turn(store, "one", {"input": "Time?", "tools": tools}, call)
    output = {"type": "function_call_output", "call_id": "call_1", "output": "12:00"}
    await _turn(
        store,
        "two",
        {"input": [output], "tools": tools, "previous_response_id": "resp_one"},
        [TextDelta("Noon."), _finish()],
    )
    parsed, _ = await _turn(store, "three", {"input": "Thanks", "previous_response_id": "resp_two"}, [_finish()])
    assert parsed.request.messages == (
        Message("user", "Time?"),
        Message("assistant", "", tool_calls=(ToolCall("call_1", "clock", "{}"),)),
        Message("tool", "12:00", tool_call_id="call_1"),
        Message("assistant", "Noon."),
        Message("user", "Thanks"),
    )


async def test_unknown_previous_response_is_404_naming_the_param() -> None:
    parsed = openai_responses.parse({"model": "m", "input": "x", "previous_response_id": "resp_nope"})
    with pytest.raises(openai_responses.PreviousResponseNotFound) as caught:
        await openai_responses.resolve(parsed, DictStore())
    status, body = render_error(caught.value)
    assert status == 404
    assert body["error"]["code"] == "previous_response_not_found"
    assert body["error"]["param"] == "previous_response_id"
    assert "resp_nope" in body["error"]["message"]


async def test_without_previous_response_resolve_changes_nothing() -> None:
    parsed = openai_responses.parse({"model": "m", "input": "x"})
    assert await openai_responses.resolve(parsed, DictStore()) is parsed


async def test_store_false_is_not_recorded() -> None:
    store = DictStore()
    await _turn(store, "one", {"input": "x", "store": False}, [_finish()])
    assert store.data == {}


async def test_record_keeps_the_response_and_numbers_the_input_items() -> None:
    store = DictStore()
    items = [{"role": "user", "content": "a"}, {"type": "message", "id": "msg_mine", "role": "user", "content": "b"}]
    _, response = await _turn(store, "one", {"input": items}, [TextDelta("c"), _finish()])
    stored = store.data["resp_one"]
    assert stored["response"] == response
    assert [item["id"] for item in stored["input_items"]] == ["msg_one_in0", "msg_mine"]


async def test_an_unfinished_stream_is_not_recorded() -> None:
    store = DictStore()
    await openai_responses.record(openai_responses.parse({"model": "m", "input": "x"}), None, store)
    assert store.data == {}


def _route(path: str, method: str) -> StateRoute:
    [route] = [
        r for r in openai_responses.ROUTES if isinstance(r, StateRoute) and r.path == path and method in r.methods
    ]
    return route


def _ctx(response_id: str) -> InfoContext:
    return InfoContext(catalog=(), params={"response_id": response_id}, headers={})


async def test_retrieve_input_items_and_delete(spec_validate: SpecValidate) -> None:
    store = DictStore()
    await _turn(store, "one", {"input": "Hi"}, [TextDelta("Hello"), _finish()])
    await _turn(store, "two", {"input": "Again", "previous_response_id": "resp_one"}, [TextDelta("Hi"), _finish()])

    status, body = await _route("/responses/{response_id}", "GET").handle(_ctx("resp_two"), store)
    assert status == 200 and body == store.data["resp_two"]["response"]
    spec_validate(body, "Response")

    status, listing = await _route("/responses/{response_id}/input_items", "GET").handle(_ctx("resp_two"), store)
    assert status == 200
    spec_validate(listing, "ResponseItemList")
    texts = [item["content"][0]["text"] for item in listing["data"]]
    assert texts == ["Again", "Hello", "Hi"]  # newest first: this input, then the conversation before it
    assert (listing["first_id"], listing["last_id"]) == (listing["data"][0]["id"], listing["data"][-1]["id"])

    status, deleted = await _route("/responses/{response_id}", "DELETE").handle(_ctx("resp_two"), store)
    assert (status, deleted) == (200, {"id": "resp_two", "object": "response", "deleted": True})
    assert "resp_two" not in store.data


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/responses/{response_id}", "GET"),
        ("/responses/{response_id}", "DELETE"),
        ("/responses/{response_id}/input_items", "GET"),
    ],
)
async def test_unknown_response_is_404_not_found(path: str, method: str, spec_validate: SpecValidate) -> None:
    with pytest.raises(openai_responses.ResponseNotFound) as caught:
        await _route(path, method).handle(_ctx("resp_nope"), DictStore())
    status, body = render_error(caught.value)
    assert (status, body["error"]["code"]) == (404, "not_found")
    spec_validate(body, "ErrorResponse")


async def test_count_takes_the_model_and_conversation_of_a_previous_response(spec_validate: SpecValidate) -> None:
    store = DictStore()
    await _turn(store, "one", {"input": "Hi"}, [TextDelta("Hello"), _finish()])
    parsed = openai_responses.parse_count({"input": "More", "previous_response_id": "resp_one"})
    resolved = await openai_responses.resolve(parsed, store)
    assert resolved.request.model == "m"
    assert [m.content for m in resolved.request.messages] == ["Hi", "Hello", "More"]
    body = openai_responses.render_count(resolved, 7)
    assert body == {"object": "response.input_tokens", "input_tokens": 7}
    spec_validate(body, "TokenCountsResource")


@pytest.mark.parametrize(
    ("method", "path", "expected", "params"),
    [
        ("POST", "/responses", 0, {}),
        ("POST", "/responses/input_tokens", 1, {}),
        ("GET", "/responses/resp_1/input_items", 2, {"response_id": "resp_1"}),
        ("GET", "/responses/resp_1", 3, {"response_id": "resp_1"}),
        ("DELETE", "/responses/resp_1", 4, {"response_id": "resp_1"}),
        ("POST", "/responses/resp_1/cancel", 5, {"response_id": "resp_1"}),
    ],
)
def test_routes_do_not_shadow_each_other(method: str, path: str, expected: int, params: dict[str, str]) -> None:
    routes = openai_responses.ROUTES
    match = Router([(r.path, r.methods, r, None) for r in routes]).match(path, method)
    assert match is not None and match.target is routes[expected] and match.params == params


TOOLS = [{"type": "function", "name": "clock", "parameters": {"type": "object", "properties": {}}}]
CALLED = [ToolCallStart("call_1", "clock"), ToolCallDelta("{}"), ToolCallEnd(), Finish("tool_calls", Usage(5, 3))]


@pytest.mark.parametrize(
    ("new_input", "param", "message"),
    [
        ("And now?", "input", "No tool output found for function call call_1."),
        (
            [{"type": "function_call_output", "call_id": "call_9", "output": "12:00"}],
            "input[0].call_id",
            "No tool call found for function call output with call_id call_9.",
        ),
    ],
)
async def test_chained_calls_and_outputs_pair_up(new_input: Any, param: str, message: str) -> None:
    store = DictStore()
    await _turn(store, "one", {"input": "Time?", "tools": TOOLS}, CALLED)
    chained = openai_responses.parse({"model": "m", "input": new_input, "previous_response_id": "resp_one"})
    with pytest.raises(InvalidRequest) as caught:
        await openai_responses.resolve(chained, store)
    assert (caught.value.param, caught.value.message, caught.value.status) == (param, message, 400)


@pytest.mark.parametrize("status", ["queued", "in_progress"])
async def test_chaining_on_an_unfinished_background_response_is_400(status: str) -> None:
    store = DictStore()
    await _turn(store, "one", {"input": "Hi"}, [TextDelta("Hello"), _finish()])
    store.data["resp_one"]["response"].update(status=status, background=True, output=[])
    chained = openai_responses.parse({"model": "m", "input": "More", "previous_response_id": "resp_one"})
    with pytest.raises(InvalidRequest) as caught:
        await openai_responses.resolve(chained, store)
    assert caught.value.param == "previous_response_id" and caught.value.status == 400
    assert status.replace("_", " ") in caught.value.message
    store.data["resp_one"]["response"]["status"] = "completed"
    assert (await openai_responses.resolve(chained, store)).request.messages[-1] == Message("user", "More")


async def _listing(store: DictStore, **query: str) -> dict[str, Any]:
    ctx = InfoContext(catalog=(), params={"response_id": "resp_two"}, headers={}, query=query)
    status, body = await _route("/responses/{response_id}/input_items", "GET").handle(ctx, store)
    assert status == 200
    return body  # type: ignore[no-any-return]


async def _five_items() -> tuple[DictStore, list[str]]:
    """resp_two's conversation: Hi, Hello, Again, Hi again, More (oldest first), and their ids."""
    store = DictStore()
    await _turn(store, "one", {"input": "Hi"}, [TextDelta("Hello"), _finish()])
    await _turn(
        store,
        "two",
        {
            "input": [
                {"role": "user", "content": "Again"},
                {"role": "assistant", "content": "Hi again"},
                {"role": "user", "content": "More"},
            ],
            "previous_response_id": "resp_one",
        },
        [TextDelta("Ok"), _finish()],
    )
    return store, [item["id"] for item in store.data["resp_two"]["input_items"]]


async def test_input_items_pages_in_either_order(spec_validate: SpecValidate) -> None:
    store, ids = await _five_items()
    assert len(ids) == 5 and len(set(ids)) == 5

    page = await _listing(store, limit="2")
    spec_validate(page, "ResponseItemList")
    assert [i["id"] for i in page["data"]] == ids[::-1][:2]
    assert (page["first_id"], page["last_id"], page["has_more"]) == (ids[4], ids[3], True)

    page = await _listing(store, limit="2", after=page["last_id"])
    assert [i["id"] for i in page["data"]] == [ids[2], ids[1]] and page["has_more"]
    page = await _listing(store, limit="2", after=page["last_id"])
    assert [i["id"] for i in page["data"]] == [ids[0]] and not page["has_more"]

    page = await _listing(store, order="asc", limit="3", after=ids[0])
    assert [i["id"] for i in page["data"]] == ids[1:4]
    assert (page["first_id"], page["last_id"], page["has_more"]) == (ids[1], ids[3], True)
    page = await _listing(store, order="asc", limit="100")
    assert [i["id"] for i in page["data"]] == ids and not page["has_more"]


async def test_input_items_default_to_twenty_newest_first() -> None:
    store = DictStore()
    await _turn(store, "two", {"input": [{"role": "user", "content": str(i)} for i in range(25)]}, [_finish()])
    page = await _listing(store)
    assert [i["content"][0]["text"] for i in page["data"]] == [str(i) for i in range(24, 4, -1)]
    assert page["has_more"]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"order": "newest"}, "order"),
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"after": "msg_nope"}, "after"),
        ({"include[]": "message.output_text.logprobs"}, "include[]"),
        ({"include": "message.input_image.image_url"}, "include"),
    ],
)
async def test_bad_input_items_queries_are_400(query: dict[str, str], param: str) -> None:
    store, _ = await _five_items()
    ctx = InfoContext(catalog=(), params={"response_id": "resp_two"}, headers={}, query=query)
    with pytest.raises(InvalidRequest) as caught:
        await _route("/responses/{response_id}/input_items", "GET").handle(ctx, store)
    assert (caught.value.param, caught.value.status) == (param, 400)


async def test_retrieve_refuses_include() -> None:
    store, _ = await _five_items()
    query = {"include[]": "message.output_text.logprobs"}
    ctx = InfoContext(catalog=(), params={"response_id": "resp_two"}, headers={}, query=query)
    with pytest.raises(InvalidRequest) as caught:
        await _route("/responses/{response_id}", "GET").handle(ctx, store)
    assert (caught.value.param, caught.value.status) == ("include[]", 400)
