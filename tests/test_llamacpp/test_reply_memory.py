"""The memory of past replies: what followed each long run of tokens, bounded to the latest."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from asgi_llm.engines.llamacpp.lookup import PromptLookup
from asgi_llm.engines.llamacpp.reply_memory import KEY, ReplyMemory

CONTEXT = list(range(100, 100 + KEY))


def test_a_learned_reply_is_followed_from_the_same_context() -> None:
    memory = ReplyMemory(1000)
    memory.learn([*CONTEXT, 1, 2, 3, 4, 5])
    assert memory.follow(CONTEXT, 3) == [1, 2, 3]
    assert memory.follow([7, *CONTEXT], 10) == [1, 2, 3, 4, 5]  # only the last KEY tokens count
    assert memory.follow([*CONTEXT[1:], 1], 2) == [2, 3]  # from inside the reply too
    assert memory.follow(CONTEXT, 0) == []
    assert memory.follow([*CONTEXT[:-1], 999], 4) == []  # one token of the context differs
    assert memory.follow(CONTEXT[1:], 4) == []  # too short a context to know
    assert len(memory) == 5


def test_the_latest_reply_wins_where_two_followed_the_same_context() -> None:
    memory = ReplyMemory(1000)
    memory.learn([*CONTEXT, 1, 2])
    memory.learn([*CONTEXT, 8, 9])
    assert memory.follow(CONTEXT, 2) == [8, 9]


@given(replies=st.lists(st.lists(st.integers(0, 3), min_size=KEY + 1, max_size=40), min_size=1, max_size=8))
def test_it_holds_at_most_its_capacity_and_the_latest_reply(replies: list[list[int]]) -> None:
    memory = ReplyMemory(16)
    for reply in replies:
        memory.learn(reply)
        assert len(memory) <= 16
    last = replies[-1]
    # the last run learned is always there: the newer generation is never empty after a learn
    assert memory.follow(last[-KEY - 1 : -1], 1) == [last[-1]]


def test_a_sequence_recalls_what_the_model_wrote_before_and_teaches_its_reply_once() -> None:
    memory = ReplyMemory(1000)
    first = PromptLookup([1, *CONTEXT], memory=memory)
    assert first.recall(4) == [] and first.draft(4) == []  # nothing remembered; its own past has no repeat
    first.extend([50, 51, 52, 53])
    first.remember()
    first.remember()
    assert len(memory) == 4  # the reply with the context it began in, once
    second = PromptLookup([2, *CONTEXT], memory=memory)
    assert second.recall(3) == [50, 51, 52]
    assert second.recall(3, after=[50]) == [51, 52, 53]
    assert second.draft(3) == []  # its own lookup knows only its own past
    second.extend([50, 51])
    assert second.recall(8) == [52, 53]  # then the memory knows no more
    assert PromptLookup([2, *CONTEXT]).recall(3) == []  # without a memory, nothing is recalled
