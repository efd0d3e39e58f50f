"""Anthropic's custom tools and `tool_choice`, as the core takes them: `ToolSpec`s and a `ToolChoice`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from asgi_llm.core import InvalidRequest, ToolChoice, ToolSpec, Unsupported

from ..json_output import tool_names, tool_parameters
from .common import Wire, WireCacheControl

__all__ = ["WireTool", "WireToolChoice", "custom_tools", "tool_choice"]


class WireTool(Wire):
    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None
    cache_control: WireCacheControl | None = None
    strict: bool | None = None
    """Honoured either way: every call is decoded under its tool's `input_schema`, so its input always conforms."""
    eager_input_streaming: bool | None = None
    """Honoured either way: a call's input streams as it is decoded, and it is decoded valid under its schema,
    so streaming it eagerly (true) and after checking it (false) come to the same."""
    defer_loading: bool | None = None
    """False only (every tool is in the prompt from the start); true needs the tool search tool, which is not here."""


class WireToolChoice(Wire):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


_LONGEST_NAME = 128
"""Anthropic's limit on a tool's name (OpenAI's is 64): MCP tools' names, `mcp__server__tool`, run long."""

_TOOL_CHOICES: dict[str, ToolChoice] = {"auto": "auto", "any": "required", "none": "none"}


def custom_tools(wire: Sequence[WireTool]) -> tuple[ToolSpec, ...]:
    """Each tool checked where it sits (`tools[i]`); names told apart, as calls name their tool."""
    tools = tuple(_tool(tool, i) for i, tool in enumerate(wire))
    tool_names([tool.name for tool in tools], lambda i: f"tools[{i}].name", longest=_LONGEST_NAME)
    return tools


def _tool(tool: WireTool, index: int) -> ToolSpec:
    if tool.type not in (None, "custom"):
        param = f"tools[{index}].type"
        raise Unsupported(f"Server tool '{tool.type}' is not supported; define custom tools.", param=param)
    if tool.input_schema is None:
        param = f"tools[{index}].input_schema"
        raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param)
    if tool.defer_loading:
        param = f"tools[{index}].defer_loading"
        raise Unsupported(f"'{param}' needs a tool search tool, which this server has not; send false.", param=param)
    parameters = tool_parameters(tool.input_schema, f"tools[{index}].input_schema")
    return ToolSpec(name=tool.name, description=tool.description, parameters=parameters)


def tool_choice(choice: WireToolChoice | None, tools: Sequence[ToolSpec]) -> tuple[ToolChoice, bool]:
    """`auto` and `none` hold with no tools (no call can be made); `any` and `tool` need one,
    as Anthropic says; a `name` goes with `tool` only, and `none` takes no parallel switch."""
    if choice is None:
        return "auto", True
    if not tools and choice.type in ("any", "tool"):
        message = f"'tool_choice' of type '{choice.type}' may only be given with 'tools'."
        raise InvalidRequest(message, param="tool_choice")
    if choice.name is not None and choice.type != "tool":
        message = f"'tool_choice.name' is only taken with type 'tool', not '{choice.type}'."
        raise InvalidRequest(message, param="tool_choice.name")
    if choice.disable_parallel_tool_use is not None and choice.type == "none":
        param = "tool_choice.disable_parallel_tool_use"
        raise InvalidRequest(f"'{param}' is not taken with type 'none': no tool is called.", param=param)
    parallel = not choice.disable_parallel_tool_use
    if choice.type != "tool":
        return _TOOL_CHOICES[choice.type], parallel
    if choice.name is None or choice.name not in {t.name for t in tools}:
        raise InvalidRequest("'tool_choice.name' must name one of the request's tools.", param="tool_choice.name")
    return choice.name, parallel
