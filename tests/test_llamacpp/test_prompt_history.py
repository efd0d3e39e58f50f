"""The rendered chat prompt keeps what the conversation holds: an assistant's earlier tool calls
whether or not tools are offered now, and a message's `name`, which reaches the template."""

from __future__ import annotations

import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import ChatRequest, Message, ToolCall, ToolSpec
from asgi_llm.engines.llamacpp.prompts import Prompts

PLAIN = (
    "{% for m in messages %}<{{ m.role }}{% if m.name %} name={{ m.name }}{% endif %}>"
    "{{ m.content }}</{{ m.role }}>\n{% endfor %}"
)
"""A template with no place for tools (the word is nowhere in it), as SmolLM2's."""

WITH_TOOLS = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}[call {{ c.function.name }}]{% endfor %}</{{ m.role }}>\n{% endfor %}"
    "{% if tools %}{{ tools | length }} tools{% endif %}"
)
"""A template that writes tool calls itself."""

HISTORY = (
    Message(role="user", content="Hi"),
    Message(role="assistant", content="", tool_calls=(ToolCall("call_1", "get_weather", "{}"),)),
    Message(role="tool", content="42", tool_call_id="call_1"),
)
WEATHER = ToolSpec("get_weather", "The weather.", {"type": "object"})


class FakeModel:
    """What `Prompts` reads of a model to render a chat: no tokenizing but the reasoning marker's."""

    bos, eos = 1, 2

    def __init__(self) -> None:
        self.metadata: dict[str, object] = {}  # no template of its own: the config's serves

    def token_text(self, token: int) -> str:
        return {1: "<s>", 2: "</s>"}[token]

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        return [5, 6]  # "<think>" is no single token here: no reasoning


def prompts(template: str) -> Prompts:
    return Prompts(FakeModel(), ModelConfig(chat_template=template), context_length=512)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "offer",
    [
        pytest.param({}, id="no-tools"),
        pytest.param({"tools": (WEATHER,), "tool_choice": "none"}, id="tool-choice-none"),
        pytest.param({"tools": (WEATHER,)}, id="tools-offered"),
    ],
)
def test_earlier_calls_stay_in_a_prompt_whose_template_has_no_place_for_tools(offer: dict[str, object]) -> None:
    text = prompts(PLAIN).chat_text(ChatRequest(model="m", messages=HISTORY, **offer))  # type: ignore[arg-type]
    assert '<assistant>{"name": "get_weather", "arguments": {}}</assistant>' in text
    assert "<tool>42</tool>" in text


@pytest.mark.parametrize("offer", [{}, {"tools": (WEATHER,), "tool_choice": "none"}])
def test_a_template_that_writes_calls_writes_them_without_tools_offered(offer: dict[str, object]) -> None:
    text = prompts(WITH_TOOLS).chat_text(ChatRequest(model="m", messages=HISTORY, **offer))  # type: ignore[arg-type]
    assert "<assistant>[call get_weather]</assistant>" in text
    assert '"get_weather"' not in text  # written once, by the template, not also as text


def test_a_messages_name_reaches_the_template() -> None:
    request = ChatRequest(model="m", messages=(Message(role="user", content="Hi", name="alice"),))
    assert "<user name=alice>Hi</user>" in prompts(PLAIN).chat_text(request)
