"""Shapes real Anthropic clients send, each honoured or refused by name: a tool's `strict`,
`eager_input_streaming` and `defer_loading`, MCP tools' long names, a `tool_use` block's
`caller` (Claude's replies carry it), `output_config.effort`, and the SDK tool runner's `thread`,
refused so that the runner falls back to sending the whole conversation."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.lib.tools import beta_async_tool

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.anthropic import common as anthropic_common
from asgi_llm.adapters.anthropic import messages as anthropic_messages
from asgi_llm.core import InvalidRequest, Unsupported
from asgi_llm.engines.fake import FakeEngine

USER = [{"role": "user", "content": "hi"}]
TOOL = {"name": "f", "input_schema": {"type": "object"}}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 8, "messages": USER, **fields}


def refused(data: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        anthropic_messages.parse(data)
    return caught.value


@pytest.mark.parametrize("field", ["strict", "eager_input_streaming"])
@pytest.mark.parametrize("value", [True, False])
def test_strict_and_eager_streaming_hold_either_way(field: str, value: bool) -> None:
    # A call is decoded under its tool's input_schema, and its input streams as it is decoded.
    tools = anthropic_messages.parse(body(tools=[{**TOOL, field: value}])).request.tools
    assert tools == anthropic_messages.parse(body(tools=[TOOL])).request.tools


def test_a_deferred_tool_is_refused_and_an_eager_one_taken() -> None:
    assert anthropic_messages.parse(body(tools=[{**TOOL, "defer_loading": False}])).request.tools
    error = refused(body(tools=[{**TOOL, "defer_loading": True}]))
    assert isinstance(error, Unsupported) and error.param == "tools[0].defer_loading"


def test_tool_names_run_to_128_characters_as_mcp_tools_need() -> None:
    name = "mcp__server__" + "t" * 115
    assert [t.name for t in anthropic_messages.parse(body(tools=[{**TOOL, "name": name}])).request.tools] == [name]
    error = refused(body(tools=[{**TOOL, "name": name + "x"}]))
    assert error.param == "tools[0].name" and "1 to 128" in error.message


def replayed(caller: dict[str, Any]) -> dict[str, Any]:
    call = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}, "caller": caller}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
    return body(tools=[TOOL], messages=[*USER, {"role": "assistant", "content": [call]}, result])


def test_a_direct_caller_on_a_replayed_call_is_inert() -> None:
    plain = replayed({"type": "direct"})
    del plain["messages"][1]["content"][0]["caller"]
    assert anthropic_messages.parse(replayed({"type": "direct"})).request == anthropic_messages.parse(plain).request


@pytest.mark.parametrize(
    ("caller", "param"),
    [
        ({"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}, "messages[1].content[0].caller.type"),
        ({"type": "direct", "tool_id": "srvtoolu_1"}, "messages[1].content[0].caller.tool_id"),
        ({"type": "direct", "x": 1}, "messages[1].content[0].caller.x"),
    ],
)
def test_a_call_made_by_code_execution_is_refused(caller: dict[str, Any], param: str) -> None:
    assert refused(replayed(caller)).param == param


def test_a_caller_belongs_to_tool_use_blocks_only() -> None:
    text = {"type": "text", "text": "hi", "caller": {"type": "direct"}}
    assert refused(body(messages=[{"role": "user", "content": [text]}])).param == "messages[0].content[0].caller"


def test_high_effort_is_the_default_and_served_another_is_refused() -> None:
    assert anthropic_messages.parse(body(output_config={"effort": "high"})).request == (
        anthropic_messages.parse(body()).request
    )
    error = refused(body(output_config={"effort": "low"}))
    assert isinstance(error, Unsupported) and error.param == "output_config.effort"
    assert refused(body(output_config={"effort": "extreme"})).param == "output_config.effort"


@pytest.mark.parametrize(
    "field",
    [
        {"thinking": {"type": "enabled", "budget_tokens": 1024, "display": "summarized"}},
        {"speed": "fast"},
        {"inference_geo": "us"},
        {"context_management": {"edits": []}},
    ],
)
def test_fields_that_would_change_the_reply_stay_refused(field: dict[str, Any]) -> None:
    data = body(**field)
    data["max_tokens"] = 2048
    assert refused(data).param == next(iter(field)) + (".display" if "thinking" in field else "")


def test_a_thread_is_refused_with_the_details_the_sdk_falls_back_on() -> None:
    error = refused(body(thread={"type": "create"}))
    assert error.param == "thread"
    status, rendered = anthropic_common.render_error(error)
    assert status == 400
    assert rendered["error"]["details"] == {"error_code": "thread_unsupported_request", "unsupported": []}
    assert "details" not in anthropic_common.render_error(InvalidRequest("No.", param="model"))[1]["error"]


@pytest.mark.anyio
async def test_the_sdks_tool_runner_falls_back_from_threads_and_runs() -> None:
    sent: list[dict[str, Any]] = []

    async def record(request: httpx2.Request) -> None:
        sent.append(json.loads(await request.aread()))

    pool = ModelPool(
        Settings(models=(ModelConfig(id="m", path="m.gguf", n_ctx=512),)),
        engine_factory=lambda config, thread: FakeEngine(config, thread),
    )
    app = LLMApp(pool=pool, adapters=(ANTHROPIC,))

    async def at_v1(scope: Any, receive: Any, send: Any) -> None:  # the app as mounted at /v1
        await app({**scope, "root_path": "/v1", "path": scope["path"].removeprefix("/v1")}, receive, send)

    transport = httpx2.ASGITransport(app=at_v1)

    @beta_async_tool
    async def lookup(query: str) -> str:
        """Look something up."""
        return query

    async with (
        app.lifespan(),
        httpx2.AsyncClient(transport=transport, event_hooks={"request": [record]}) as http,
    ):
        client = anthropic.AsyncAnthropic(api_key="k", base_url="http://test", http_client=http, max_retries=0)
        runner = client.beta.messages.tool_runner(model="m", max_tokens=16, messages=USER, tools=[lookup])  # type: ignore[list-item]
        reply = await runner.until_done()
    assert [block.text for block in reply.content if block.type == "text"] == ["Hello there"]
    assert [m.get("thread") for m in sent] == [{"type": "create"}, None]
