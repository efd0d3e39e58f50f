"""The soak's traffic (benchmarks/soak.py): requests of every protocol and feature, the
conversations sharing one system prompt, and reading a reply byte by byte under a watchdog."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

SYSTEM = (
    "You are Harbor, the support assistant of Northwind Outfitters, a small shop that sells hiking, "
    "camping and climbing gear online and in two stores, one in Portland and one in Denver. Answer in "
    "plain, friendly words and keep every answer short: two or three sentences unless the customer asks "
    "for more. Orders ship within two business days from the Denver warehouse; standard shipping is free "
    "above fifty dollars and takes three to six days, express takes one or two days and costs twelve "
    "dollars. Customers may return unused items within sixty days for a full refund, and worn items within "
    "thirty days for store credit, except climbing ropes and harnesses, which cannot be returned once used "
    "for safety reasons. Tents and sleeping bags carry a two-year warranty against defects in seams, "
    "zippers and poles. Never promise a delivery date, never ask for a card number, and never invent a "
    "product we do not sell. When you do not know an answer, say so and offer to pass the question to a "
    "person on the team, who replies within one business day. Store hours are nine to seven on weekdays "
    "and ten to five on weekends. Rentals of tents, stoves and snowshoes are available in both stores by "
    "the day or the week, with a deposit returned when the gear comes back clean and dry."
)
QUESTIONS = ("Can I return a used harness?", "How long does express shipping take?", "Do you rent snowshoes?",
             "What does the tent warranty cover?", "Is shipping free for a forty dollar order?",
             "When is the Denver store open on Sunday?", "Can I get store credit for worn boots?",
             "Do you sell kayaks?", "How do I get my rental deposit back?", "Who answers hard questions?")  # fmt: skip
STORY = "Write a very long story about a lighthouse keeper and a storm."
KEEP_TALKING = {"0": -100, "2": -100}  # the packaged model's end-of-turn tokens (OpenAI only)
TOOLS = (
    {"name": "get_weather", "description": "Current weather in a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}},
    {"name": "check_stock", "description": "Whether a product is in stock.",
     "parameters": {"type": "object", "properties": {"product": {"type": "string"}}, "required": ["product"]}},
)  # fmt: skip
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
          "required": ["city", "population"], "additionalProperties": False}  # fmt: skip
FEATURES = {
    "openai.chat": ("plain", "n", "tools-forced", "tools-auto", "schema", "disconnect"),
    "openai.completions": ("plain", "n", "disconnect"),
    "openai.responses": ("plain", "tools-forced", "tools-auto", "schema", "disconnect"),
    "anthropic": ("plain", "tools-forced", "tools-auto", "schema", "disconnect"),
    "ollama": ("plain", "tools-auto", "schema", "disconnect"),
}
CONVERSATIONS = 10


# -- requests, one builder per protocol ---------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """One request, protocol-neutral: what a builder turns into a wire body."""

    system: str | None
    messages: tuple[dict[str, str], ...]
    max_tokens: int
    temperature: float
    stream: bool
    feature: str = "plain"
    n: int = 1


def openai_chat(ask: Ask) -> dict[str, Any]:
    system = [{"role": "system", "content": ask.system}] if ask.system else []
    body: dict[str, Any] = {"messages": [*system, *ask.messages], "max_tokens": ask.max_tokens}
    if ask.feature.startswith("tools"):
        body["tools"] = [{"type": "function", "function": t} for t in TOOLS]
        forced = {"type": "function", "function": {"name": TOOLS[0]["name"]}}
        body["tool_choice"] = forced if ask.feature == "tools-forced" else "auto"
    if ask.feature == "schema":
        spec = {"name": "city", "schema": SCHEMA, "strict": True}
        body["response_format"] = {"type": "json_schema", "json_schema": spec}
    return body


def openai_completions(ask: Ask) -> dict[str, Any]:
    prompt = "".join(f"{m['role']}: {m['content']}\n" for m in ask.messages) + "assistant:"
    return {"prompt": f"{ask.system}\n\n{prompt}" if ask.system else prompt, "max_tokens": ask.max_tokens}


def openai_responses(ask: Ask) -> dict[str, Any]:
    body: dict[str, Any] = {"input": list(ask.messages), "max_output_tokens": ask.max_tokens, "store": False}
    if ask.system:
        body["instructions"] = ask.system
    if ask.feature.startswith("tools"):
        body["tools"] = [{"type": "function", **t} for t in TOOLS]
        forced = {"type": "function", "name": TOOLS[0]["name"]}
        body["tool_choice"] = forced if ask.feature == "tools-forced" else "auto"
    if ask.feature == "schema":
        body["text"] = {"format": {"type": "json_schema", "name": "city", "schema": SCHEMA, "strict": True}}
    return body


def anthropic(ask: Ask) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": list(ask.messages), "max_tokens": ask.max_tokens}
    if ask.system:
        body["system"] = ask.system
    if ask.feature.startswith("tools"):
        body["tools"] = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                         for t in TOOLS]  # fmt: skip
        forced = {"type": "tool", "name": TOOLS[0]["name"]}
        body["tool_choice"] = forced if ask.feature == "tools-forced" else {"type": "auto"}
    if ask.feature == "schema":
        body["output_config"] = {"format": {"type": "json_schema", "schema": SCHEMA}}
    return body


def ollama(ask: Ask) -> dict[str, Any]:
    system = [{"role": "system", "content": ask.system}] if ask.system else []
    body: dict[str, Any] = {"messages": [*system, *ask.messages], "options": {"num_predict": ask.max_tokens}}
    if ask.feature.startswith("tools"):
        body["tools"] = [{"type": "function", "function": t} for t in TOOLS]
    if ask.feature == "schema":
        body["format"] = SCHEMA
    return body


BUILDERS: dict[str, tuple[str, Callable[[Ask], dict[str, Any]]]] = {
    "openai.chat": ("/v1/chat/completions", openai_chat),
    "openai.completions": ("/v1/completions", openai_completions),
    "openai.responses": ("/v1/responses", openai_responses),
    "anthropic": ("/v1/messages", anthropic),
    "ollama": ("/api/chat", ollama),
}


@dataclass(frozen=True)
class Call:
    kind: str  # family, feature, stream or json: how results are grouped
    path: str
    body: dict[str, Any]
    framing: str  # sse, ndjson or json
    check: str | None  # json (every text a JSON object), tool (a call with JSON object arguments), or None
    leave_after: int | None  # a client that disconnects after this many chunks


def call(family: str, ask: Ask, rng: random.Random) -> Call:
    path, build = BUILDERS[family]
    body = {"model": "default", **build(ask), "stream": ask.stream}
    options = body["options"] if family == "ollama" else body
    options["temperature"] = ask.temperature
    if ask.n > 1:
        body["n"] = ask.n
    if ask.feature == "disconnect" and family.startswith("openai.c"):
        body["logit_bias"] = KEEP_TALKING
    framing = ("ndjson" if family == "ollama" else "sse") if ask.stream else "json"
    check = {"schema": "json", "tools-forced": "tool"}.get(ask.feature)
    leave = rng.randint(1, 8) if ask.feature == "disconnect" else None
    kind = f"{family} {ask.feature} {'stream' if ask.stream else 'json'}"
    return Call(kind, path, body, framing, check, leave)


# -- reading replies ----------------------------------------------------------------------------


@dataclass
class Reading:
    """What a reply said, from its chunks or its one body, whatever the protocol."""

    texts: dict[int, str] = field(default_factory=dict)
    tools: dict[tuple[int, int], Any] = field(default_factory=dict)  # (choice, index) -> arguments
    error: str | None = None
    chunks: int = 0

    def text(self, index: int, piece: str | None) -> None:
        if piece:
            self.texts[index] = self.texts.get(index, "") + piece

    def tool(self, key: tuple[int, int], piece: Any) -> None:
        old = self.tools.get(key, "")
        self.tools[key] = piece if isinstance(piece, dict) else old + (piece or "")

    def absorb(self, event: dict[str, Any]) -> None:
        self.chunks += 1
        kind = event.get("type")
        if event.get("error") or kind in ("error", "response.failed"):
            self.error = json.dumps(event.get("error") or event)[:300]
        for choice in event.get("choices") or ():  # OpenAI chat and completions
            self._openai(choice)
        if isinstance(event.get("message"), dict) and "type" not in event:  # Ollama
            self._ollama(event["message"])
        if kind == "message" or kind == "content_block_start":  # Anthropic, whole or a block's start
            for i, block in enumerate(event.get("content") or [event["content_block"]]):
                self._anthropic_block(event.get("index", i), block)
        if kind == "content_block_delta":
            delta = event["delta"]
            self.text(0, delta.get("text"))
            if "partial_json" in delta:
                self.tool((0, event["index"]), delta["partial_json"])
        if kind in ("response.completed", "response.incomplete") or event.get("object") == "response":  # Responses
            self._responses((event.get("response") or event)["output"])

    def _openai(self, choice: dict[str, Any]) -> None:
        i = choice.get("index", 0)
        message = choice.get("message") or choice.get("delta") or {}
        self.text(i, message.get("content") if message else choice.get("text"))
        for j, tool in enumerate(message.get("tool_calls") or ()):
            self.tool((i, tool.get("index", j)), tool["function"].get("arguments"))

    def _ollama(self, message: dict[str, Any]) -> None:
        self.text(0, message.get("content"))
        for tool in message.get("tool_calls") or ():
            self.tool((0, len(self.tools)), tool["function"]["arguments"])

    def _anthropic_block(self, index: int, block: dict[str, Any]) -> None:
        if block.get("type") == "tool_use":
            self.tools[(0, index)] = block["input"] if block.get("input") else ""
        self.text(0, block.get("text"))

    def _responses(self, output: list[dict[str, Any]]) -> None:
        self.texts.clear()  # the final object repeats what the deltas said
        self.tools.clear()
        for item in output:
            if item.get("type") == "function_call":
                self.tools[(0, len(self.tools))] = item["arguments"]
            for part in item.get("content") or () if item.get("type") == "message" else ():
                self.text(0, part.get("text"))

    def invalid(self, check: str | None) -> str | None:
        """Why the output breaks its constraint, or None."""
        if check == "json":
            bad = [t for t in self.texts.values() if not _is_object(t)] or ([] if self.texts else ["no text"])
            return f"not a JSON object: {bad[0][:120]!r}" if bad else None
        if check == "tool":
            bad = [a for a in self.tools.values() if not _is_object(a)] or ([] if self.tools else ["no tool call"])
            return f"bad tool call: {str(bad[0])[:120]!r}" if bad else None
        return None


def _is_object(value: Any) -> bool:
    if isinstance(value, dict):
        return True
    try:
        return isinstance(json.loads(value), dict)
    except (TypeError, ValueError):
        return False


# -- one request, watched -----------------------------------------------------------------------


@dataclass
class Result:
    kind: str
    outcome: str  # ok, disconnected, hung, or an error label (a status, "stream error", "invalid", "transport")
    seconds: float
    longest_gap: float
    reading: Reading
    detail: str = ""


class Hung(Exception):
    pass


class Clock:
    """When the last byte came, and the longest silence so far."""

    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.gap = 0.0

    def tick(self) -> None:
        now = time.monotonic()
        self.gap, self.last = max(self.gap, now - self.last), now


async def lines(response: httpx.Response, clock: Clock) -> AsyncIterator[bytes]:
    pending = b""
    async for piece in response.aiter_bytes():
        clock.tick()
        *complete, pending = (pending + piece).split(b"\n")
        for line in complete:
            yield line
    if pending:
        yield pending


async def exchange(client: httpx.AsyncClient, c: Call, clock: Clock, reading: Reading) -> tuple[str, str]:
    headers = {"anthropic-version": "2023-06-01"} if c.path == "/v1/messages" else {}
    async with client.stream("POST", c.path, json=c.body, headers=headers) as response:
        clock.tick()
        if response.status_code != 200:
            return str(response.status_code), (await response.aread()).decode(errors="replace")[:300]
        whole: list[bytes] = []
        async for line in lines(response, clock):
            if c.framing == "json":
                whole.append(line)
            elif line.startswith(b"data: {") or (c.framing == "ndjson" and line.startswith(b"{")):
                reading.absorb(json.loads(line.removeprefix(b"data: ")))
                if c.leave_after is not None and reading.chunks >= c.leave_after and not reading.error:
                    return "disconnected", ""
        if whole:
            reading.absorb(json.loads(b"\n".join(whole)))
    if reading.error:
        return "stream error", reading.error
    why = reading.invalid(c.check)
    return ("invalid", why) if why else ("ok", "")


async def watched(client: httpx.AsyncClient, c: Call, hang: float) -> Result:
    clock, reading = Clock(), Reading()
    task = asyncio.ensure_future(exchange(client, c, clock, reading))
    while not task.done():
        await asyncio.wait({task}, timeout=max(0.05, clock.last + hang - time.monotonic()))
        if not task.done() and time.monotonic() - clock.last >= hang:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return Result(c.kind, "hung", time.monotonic() - clock.started, hang, reading, f"{reading.chunks} chunks")
    try:
        outcome, detail = task.result()
    except httpx.TransportError as exc:
        outcome, detail = "transport", f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 (a reply this script cannot read: shown, and the soak goes on)
        outcome, detail = "unreadable", f"{type(exc).__name__}: {exc}"[:300]
    clock.tick()
    return Result(c.kind, outcome, clock.last - clock.started, clock.gap, reading, detail)


# -- traffic ------------------------------------------------------------------------------------


@dataclass
class Conversation:
    topic: int
    messages: list[dict[str, str]] = field(default_factory=list)
    turns: int = 4


class Traffic:
    """Turns of ten conversations sharing the system prompt (`share` of the requests), else one-offs."""

    def __init__(self, rng: random.Random, share: float) -> None:
        self.rng, self.share = rng, share
        self.idle = [Conversation(n) for n in range(CONVERSATIONS)]

    def next(self) -> tuple[Call, Callable[[Result], None]]:
        if self.idle and self.rng.random() < self.share:
            return self._turn(self.idle.pop(self.rng.randrange(len(self.idle))))
        return self._one_off(), lambda result: None

    def _turn(self, talk: Conversation) -> tuple[Call, Callable[[Result], None]]:
        rng = self.rng
        if not talk.messages:
            talk.turns = rng.randint(3, 6)
        question = QUESTIONS[(talk.topic + len(talk.messages) // 2) % len(QUESTIONS)]
        asked = [*talk.messages, {"role": "user", "content": question}]
        family = rng.choice(("openai.chat", "openai.responses", "anthropic", "ollama"))
        ask = Ask(SYSTEM, tuple(asked), rng.randint(12, 40), rng.choice((0.0, 0.0, 0.7, 1.0)), rng.random() < 0.5)

        def after(result: Result) -> None:
            reply = result.reading.texts.get(0, "")
            done = result.outcome != "ok" or not reply or len(asked) // 2 + 1 >= talk.turns
            talk.messages = [] if done else [*asked, {"role": "assistant", "content": reply}]
            self.idle.append(talk)

        return call(family, ask, rng), after

    def _one_off(self) -> Call:
        rng = self.rng
        family = rng.choices(list(FEATURES), weights=(3, 1, 2, 2, 2))[0]
        feature = rng.choice(FEATURES[family])
        stream = feature == "disconnect" or rng.random() < 0.5
        question = STORY if feature == "disconnect" else rng.choice(QUESTIONS)
        if feature == "schema":
            question = "Name a large city and its population, as JSON."
        elif feature.startswith("tools"):
            question = rng.choice(("What is the weather in Lyon?", "Are the Denver tents in stock?", "Hello!"))
        tokens = {"plain": (8, 32), "n": (8, 16), "disconnect": (200, 200)}.get(feature, (32, 64))
        system = SYSTEM if rng.random() < 0.5 else None
        temperature = rng.choice((0.0, 0.3, 0.8, 1.0))
        ask = Ask(system, ({"role": "user", "content": question},), rng.randint(*tokens), temperature, stream,
                  feature, rng.randint(2, 3) if feature == "n" else 1)  # fmt: skip
        return call(family, ask, rng)
