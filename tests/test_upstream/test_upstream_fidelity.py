"""What a gateway keeps of its upstream's answer: which stop sequence ended a choice (matched here,
on the text as it arrives), and the prompt's size before the first event (counted beforehand, or
held back until the first usage chunk). Pure parts, and the prompt count against scripted
upstream dialects; tests/test_e2e/test_upstream/test_gateway_fidelity.py runs real ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from asgi_llm.core import ChatRequest, CompletionRequest, Finish, Message, PromptRead, SamplingParams, TextDelta, Usage
from asgi_llm.engines.upstream.prompt_size import PromptSizer
from asgi_llm.engines.upstream.stream import ChunkTranslator, translator_for

pytestmark = pytest.mark.anyio


def chunk(text: str | None = None, *, index: int = 0, reason: str | None = None, usage: Any = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index, "delta": {"content": text} if text else {}, "finish_reason": reason}
    return {"choices": [choice], **({"usage": usage} if usage else {})}


def feed(translator: ChunkTranslator, *chunks: dict[str, Any]) -> list[Any]:
    events = [event for c in chunks for event in translator.feed(c)]
    return events + translator.finish()


def text_of(events: list[Any], index: int = 0) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta) and e.index == index)


def test_a_stop_sequence_split_over_chunks_ends_the_choice_and_is_named() -> None:
    translator = ChunkTranslator(1, request_id="r", prompt_estimate=5, stops=("STOP", "\n\n"))
    events = [
        e for c in (chunk("Hello, wor"), chunk("ld ST"), chunk("OP and"), chunk(" more")) for e in translator.feed(c)
    ]
    assert translator.cut  # the rest of the upstream's answer is not wanted
    events += translator.finish()
    assert text_of(events) == "Hello, world "
    (finish,) = [e for e in events if isinstance(e, Finish)]
    assert (finish.reason, finish.stop_sequence) == ("stop", "STOP")
    assert finish.usage == Usage(5, 3)  # no usage came: the prompt's size as known, a token a chunk


def test_the_earliest_stop_wins_and_text_that_only_looked_like_one_goes_out() -> None:
    translator = ChunkTranslator(1, request_id="r", prompt_estimate=1, stops=("lo", "abc"))
    events = feed(translator, chunk("xab"), chunk("x hello"))
    assert text_of(events) == "xabx hel"
    assert [e.stop_sequence for e in events if isinstance(e, Finish)] == ["lo"]


def test_an_upstream_that_ends_on_its_own_keeps_its_reason_and_its_usage() -> None:
    translator = ChunkTranslator(1, request_id="r", prompt_estimate=1, stops=("never",))
    usage = {"prompt_tokens": 9, "completion_tokens": 2}
    events = feed(translator, chunk("ne"), chunk("ver"[:2], reason="length"), chunk(usage=usage) | {"choices": []})
    assert text_of(events) == "neve" and not translator.cut
    (finish,) = [e for e in events if isinstance(e, Finish)]
    assert (finish.reason, finish.stop_sequence, finish.usage) == ("length", None, Usage(9, 2))


def test_each_choice_stops_on_its_own_and_the_stream_is_cut_once_all_have_ended() -> None:
    translator = ChunkTranslator(2, request_id="r", prompt_estimate=1, stops=("!",))
    translator.feed(chunk("a!", index=0))
    assert not translator.cut
    translator.feed(chunk("b", index=1, reason="stop"))
    assert translator.cut
    finishes = [e for e in translator.finish() if isinstance(e, Finish)]
    assert [(f.index, f.stop_sequence) for f in finishes] == [(0, "!"), (1, None)]


def test_a_prompt_counted_beforehand_opens_the_stream() -> None:
    translator = ChunkTranslator(1, request_id="r", prompt_estimate=1, prompt=42)
    assert translator.feed(chunk()) == []  # nothing to send yet: nor is the count sent alone
    assert translator.feed(chunk("hi")) == [PromptRead(42), TextDelta("hi")]
    assert translator.feed(chunk(" there")) == [TextDelta(" there")]


def test_without_a_count_the_events_wait_for_the_first_usage() -> None:
    translator = ChunkTranslator(1, request_id="r", prompt_estimate=1, hold=True)
    assert translator.feed(chunk("hi")) == [] and translator.feed(chunk(" you", reason="stop")) == []
    released = translator.feed({"choices": [], "usage": {"prompt_tokens": 17, "completion_tokens": 2}})
    assert released == [PromptRead(17), TextDelta("hi"), TextDelta(" you")]
    assert [type(e) for e in translator.finish()] == [Finish]


def test_an_upstream_that_never_reports_usage_releases_at_its_end_with_the_estimate() -> None:
    translator = ChunkTranslator(1, request_id="r", prompt_estimate=6, hold=True)
    assert translator.feed(chunk("hi", reason="stop")) == []
    assert translator.finish()[:2] == [PromptRead(6), TextDelta("hi")]


def test_only_a_stream_that_opens_with_the_prompt_size_holds() -> None:
    asked = ChatRequest(model="m", messages=(Message("user", "hi"),), sampling=SamplingParams(stop=("x",)))
    assert translator_for(asked, None).feed(chunk("a")) == [TextDelta("a")]
    held = ChatRequest(model="m", messages=(Message("user", "hi"),), prompt_size_first=True)
    assert translator_for(held, None).feed(chunk("a")) == []
    assert translator_for(held, 3).feed(chunk("a")) == [PromptRead(3), TextDelta("a")]


# -- counting the prompt ------------------------------------------------------------------------


@dataclass
class Reply:
    status_code: int
    body: Any

    def json(self) -> Any:
        return self.body


class Upstream:
    """Answers the tokenizer routes of one dialect, at the paths that dialect serves them."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.asked: list[str] = []

    async def post(self, url: str, *, json: Any, timeout: Any = None, auth: Any = None) -> Reply:
        path = url.removeprefix("http://u")
        self.asked.append(path)
        answer = self.routes.get(path)
        return Reply(200, answer(json)) if answer is not None else Reply(404, {"error": "no"})


ASGI_LLM = {
    "/v1/apply-template": lambda body: {"prompt": "<user>" + body["messages"][0]["content"]},
    "/v1/tokenize": lambda body: {"tokens": list(range(len(body["content"]))), "count": len(body["content"])},
}
LLAMA_SERVER = {
    "/apply-template": lambda body: {"prompt": "<u>" + body["messages"][0]["content"]},
    "/tokenize": lambda body: {"tokens": list(range(len(body["content"])))},
}
VLLM = {"/tokenize": lambda body: {"count": 11, "max_model_len": 4096} if "messages" in body else None}
CHAT = ChatRequest(model="m", messages=(Message("user", "hello"),), prompt_size_first=True)


@pytest.mark.parametrize(
    ("routes", "count", "first_asks"),
    [
        (ASGI_LLM, len("<user>hello"), ["/v1/apply-template", "/v1/tokenize"]),
        (LLAMA_SERVER, len("<u>hello"), ["/v1/apply-template", "/apply-template", "/tokenize"]),
        (VLLM, 11, ["/v1/apply-template", "/apply-template", "/tokenize"]),
        ({}, None, ["/v1/apply-template", "/apply-template", "/tokenize"]),
    ],
    ids=["asgi-llm", "llama-server", "vllm", "none"],
)
async def test_each_dialect_is_found_once_and_asked_directly_after(
    routes: Any, count: int | None, first_asks: list[str]
) -> None:
    upstream, sizer = Upstream(routes), PromptSizer("m", 5.0)
    assert await sizer.size(upstream, "http://u/v1", None, CHAT) == count
    assert upstream.asked == first_asks
    upstream.asked.clear()
    assert await sizer.size(upstream, "http://u/v1", None, CHAT) == count
    assert len(upstream.asked) == (0 if count is None else 1 if routes is VLLM else 2)


async def test_a_request_that_needs_no_size_asks_nothing() -> None:
    upstream = Upstream(ASGI_LLM)
    plain = ChatRequest(model="m", messages=(Message("user", "hello"),))
    assert await PromptSizer("m", 5.0).size(upstream, "http://u/v1", None, plain) is None
    assert upstream.asked == []
    text = CompletionRequest(model="m", prompts=("once upon",), sampling=SamplingParams(stop=("\n",)))
    assert await PromptSizer("m", 5.0).size(upstream, "http://u/v1", None, text) == len("once upon")
    assert upstream.asked == ["/v1/tokenize"]  # a completion's prompt is tokenized as it is


async def test_a_failing_count_is_no_count() -> None:
    class Broken(Upstream):
        async def post(self, url: str, *, json: Any, timeout: Any = None, auth: Any = None) -> Reply:
            raise ConnectionError("refused")

    sizer, broken = PromptSizer("m", 5.0), Broken(ASGI_LLM)
    assert await sizer.size(broken, "http://u/v1", None, CHAT) is None
    working = Upstream(ASGI_LLM)  # back: asked again, not remembered as unable
    assert await sizer.size(working, "http://u/v1", None, CHAT) == len("<user>hello")
