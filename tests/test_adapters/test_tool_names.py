"""Tool and format names: told apart, and spelled as OpenAI and Anthropic define them (64 and 128 long)."""

from __future__ import annotations

import pytest

from asgi_llm.adapters.json_output import checked_name, tool_names
from asgi_llm.core import InvalidRequest


def where(i: int) -> str:
    return f"tools[{i}].name"


def test_distinct_names_of_letters_digits_underscores_and_dashes_pass() -> None:
    tool_names(["get_weather", "look-up", "A1", "x" * 64], where)
    assert checked_name("out_1", "text.format.name") == "out_1"


@pytest.mark.parametrize(
    ("names", "param", "says"),
    [
        (["f", "g", "f"], "tools[2].name", "'f' is given twice"),
        (["ok", "a b"], "tools[1].name", "'a b'"),
        ([""], "tools[0].name", "''"),
        (["x" * 65], "tools[0].name", "1 to 64"),
        (["café"], "tools[0].name", "'café'"),
    ],
)
def test_a_name_given_twice_or_misspelled_is_refused_naming_its_place(names: list[str], param: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        tool_names(names, where)
    assert caught.value.param == param
    assert says in caught.value.message


def test_a_longer_limit_takes_longer_names_and_says_so() -> None:
    tool_names(["mcp__server__" + "t" * 115], where, longest=128)  # 128 characters: Anthropic's limit
    with pytest.raises(InvalidRequest) as caught:
        tool_names(["x" * 129], where, longest=128)
    assert caught.value.param == "tools[0].name" and "1 to 128" in caught.value.message
    with pytest.raises(InvalidRequest):
        checked_name("x" * 65, "text.format.name")  # OpenAI's stays 64


def test_without_the_pattern_only_repeats_are_refused() -> None:
    tool_names(["a b", "ünïcode"], where, pattern=False)
    with pytest.raises(InvalidRequest) as caught:
        tool_names(["a b", "a b"], where, pattern=False)
    assert caught.value.param == "tools[1].name"
