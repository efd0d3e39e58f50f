"""Renders a GGUF's own Jinja chat template into a prompt (the template is trusted data, but sandboxed)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ...core.errors import InvalidRequest
from ...core.requests import Message, ToolCall, ToolSpec

__all__ = ["ChatTemplate"]


def _raise_exception(message: str) -> None:
    raise InvalidRequest(f"The model's chat template rejected the messages: {message}", param="messages")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tool_call(call: ToolCall) -> dict[str, Any]:
    """The Hugging Face chat-template shape; templates expect arguments as a mapping."""
    try:
        arguments: Any = json.loads(call.arguments)
    except ValueError:
        arguments = call.arguments
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


def _tool_spec(tool: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": dict(tool.parameters)}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


class ChatTemplate:
    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self._template = env.from_string(source)
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        add_generation_prompt: bool = True,
        enable_thinking: bool | None = None,
    ) -> str:
        """`enable_thinking` reaches templates that have the switch (Qwen3's and others'); None
        leaves it undefined, so each template keeps its own default."""
        payload: list[dict[str, Any]] = []
        for m in messages:
            item: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.name is not None:
                item["name"] = m.name
            if m.tool_calls:
                item["tool_calls"] = [_tool_call(call) for call in m.tool_calls]
            if m.tool_call_id is not None:
                item["tool_call_id"] = m.tool_call_id
            if m.reasoning is not None:
                item["reasoning_content"] = m.reasoning
            payload.append(item)
        try:
            switch = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
            return self._template.render(
                messages=payload,
                add_generation_prompt=add_generation_prompt,
                tools=[_tool_spec(t) for t in tools] or None,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **switch,
            )
        except InvalidRequest:
            raise
        except TemplateError as exc:
            raise InvalidRequest(
                f"The model's chat template could not render these messages ({type(exc).__name__}).",
                param="messages",
            ) from None
