"""Compiled grammars kept by their engine: a schema seen again is not compiled again, a changed one
is, the cache stays within its bounds, and a refusal is kept as the same 400."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import (
    ChatRequest,
    InvalidRequest,
    Message,
    OutputFormat,
    Overloaded,
    SamplingParams,
    ToolSpec,
    Unsupported,
)
from asgi_llm.engines.decoding import compiled
from asgi_llm.engines.decoding.compiled import Grammars
from asgi_llm.engines.decoding.constraints import Constraint, compiles, constraint_for
from asgi_llm.engines.decoding.tool_detect import MARKERS, trigger_grammar
from asgi_llm.engines.inference_thread import InferenceThread
from asgi_llm.engines.llamacpp import LlamaCppEngine
from asgi_llm.engines.llamacpp.engine import COMPILES

PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
TOOL = ToolSpec("f", None, {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})


def chat(**fields: Any) -> ChatRequest:
    return ChatRequest("m", (Message("user", "hi"),), **fields)


def structured(schema: dict[str, Any], param: str = "response_format") -> ChatRequest:
    return chat(sampling=SamplingParams(output_format=OutputFormat("json_schema", param, schema)))


def counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[object]:
    """Calls of `compiled.<name>` from now on."""
    calls: list[object] = []
    real = getattr(compiled, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(compiled, name, counted)
    return calls


def test_the_same_schema_is_compiled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    grammars = Grammars()
    rewrites, converts = counting(monkeypatch, "enforceable"), counting(monkeypatch, "schema_gbnf")
    first = constraint_for(structured(PERSON), grammars=grammars)
    again = constraint_for(structured({**PERSON}), grammars=grammars)  # equal, not the same object
    assert first.grammar is not None and again.grammar is first.grammar and again.form is first.form
    assert first.grammar.shape is not None and "root ::=" in first.grammar.gbnf
    assert len(rewrites) == len(converts) == 1


def test_a_changed_schema_param_or_key_order_is_compiled_anew() -> None:
    grammars = Grammars()
    first = grammars.enforced(PERSON, "response_format")
    assert grammars.enforced(PERSON, "response_format") is first
    assert grammars.enforced({**PERSON, "required": ["name"]}, "response_format") is not first
    assert grammars.enforced(PERSON, "tools[0]") is not first
    assert grammars.enforced(PERSON, "response_format", root_type="object") is not first
    swapped = {**PERSON, "properties": dict(reversed(PERSON["properties"].items()))}  # properties keep their order
    written = grammars.schema_grammar(grammars.enforced(swapped, "response_format").form, "response_format")
    assert written is not grammars.schema_grammar(first.form, "response_format")
    assert written.gbnf.index("age") < written.gbnf.index("name")


def test_schemas_that_differ_in_annotations_only_share_their_grammar() -> None:
    grammars = Grammars()
    described = {**PERSON, "description": "someone"}
    first, other = grammars.enforced(PERSON, "p"), grammars.enforced(described, "p")
    assert other is not first  # its check is the client's own schema's
    assert grammars.schema_grammar(other.form, "p") is grammars.schema_grammar(first.form, "p")


def test_tools_are_compiled_once_for_forced_and_auto_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    grammars = Grammars()
    rewrites = counting(monkeypatch, "enforceable")
    forced = [constraint_for(chat(tools=(TOOL,), tool_choice="required"), grammars=grammars) for _ in range(2)]
    auto = [constraint_for(chat(tools=(TOOL,)), grammars=grammars) for _ in range(2)]
    assert forced[0].grammar is not None and forced[1].grammar is forced[0].grammar
    assert auto[0].lazy is not None and auto[1].lazy is not None
    assert auto[0].lazy.grammar is not None and auto[1].lazy.grammar is auto[0].lazy.grammar
    assert len(rewrites) == 1  # one tool's parameters, rewritten once for all four requests


def test_every_trigger_grammar_is_read_before_decoding() -> None:
    for parallel in (False, True):
        lazy = constraint_for(chat(tools=(TOOL,), parallel_tool_calls=parallel)).lazy
        assert lazy is not None and lazy.grammar is not None
        for marker in ("", *MARKERS):
            for text in ("{", " [", '{"name"'):
                gbnf = trigger_grammar(lazy.grammar.gbnf, marker, text, parallel)
                assert lazy.shapes[gbnf] is not None


def test_the_least_recently_used_goes_first() -> None:
    grammars = Grammars(entries=2)
    a = grammars.enforced({"type": "integer"}, "a")
    b = grammars.enforced({"type": "integer"}, "b")
    assert grammars.enforced({"type": "integer"}, "a") is a  # a is now the most recent
    grammars.enforced({"type": "integer"}, "c")
    assert len(grammars) == 2
    assert grammars.enforced({"type": "integer"}, "a") is a
    assert grammars.enforced({"type": "integer"}, "b") is not b  # dropped, made again


def test_characters_are_bounded_and_a_larger_entry_is_not_kept() -> None:
    small, large = {"type": "string", "description": "x" * 40}, {"type": "string", "description": "y" * 500}
    grammars = Grammars(chars=200)
    first = grammars.enforced(small, "a")
    grammars.enforced(small, "b")
    assert len(grammars) == 2 and grammars.weight <= 200
    grammars.enforced(small, "c")  # three would weigh over 200
    assert len(grammars) == 2 and grammars.weight <= 200 and grammars.enforced(small, "a") is not first
    kept = len(grammars)
    assert grammars.enforced(large, "d") is not grammars.enforced(large, "d")
    assert len(grammars) == kept


def test_nothing_is_kept_without_entries() -> None:
    grammars = Grammars(entries=0)
    assert grammars.enforced(PERSON, "p") is not grammars.enforced(PERSON, "p")
    assert len(grammars) == 0 and grammars.weight == 0


@pytest.mark.parametrize(
    ("schema", "kind"),
    [({"type": "array", "uniqueItems": True}, Unsupported), ({"type": 3}, InvalidRequest)],
    ids=["unenforceable", "invalid"],
)
def test_a_refusal_is_kept_and_raised_anew(
    monkeypatch: pytest.MonkeyPatch, schema: dict[str, Any], kind: type[InvalidRequest]
) -> None:
    grammars = Grammars()
    rewrites = counting(monkeypatch, "enforceable")
    errors = []
    for _ in range(2):
        with pytest.raises(kind) as caught:
            constraint_for(structured(schema, "response_format.json_schema.schema"), grammars=grammars)
        errors.append(caught.value)
    assert errors[0] is not errors[1] and type(errors[0]) is type(errors[1]) is kind
    assert errors[0].message == errors[1].message and errors[1].param == "response_format.json_schema.schema"
    assert len(rewrites) == 1 and len(grammars) == 1


def test_a_failure_that_is_no_refusal_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(compiled, "enforceable", broken)
    grammars = Grammars()
    with pytest.raises(RuntimeError):
        grammars.enforced(PERSON, "p")
    assert len(grammars) == 0


def test_a_clients_grammar_is_read_once_and_its_refusal_kept() -> None:
    grammars = Grammars()
    fmt = OutputFormat("grammar", "grammar", grammar='root ::= "yes" | "no"')
    first = constraint_for(chat(sampling=SamplingParams(output_format=fmt)), grammars=grammars)
    again = constraint_for(chat(sampling=SamplingParams(output_format=fmt)), grammars=grammars)
    assert first.grammar is not None and again.grammar is first.grammar and first.held
    for _ in range(2):
        with pytest.raises(InvalidRequest, match="line 1"):
            grammars.own_grammar('root ::= "open', "grammar")


def test_only_schemas_tools_and_grammars_compile() -> None:
    assert not compiles(chat()) and not compiles(chat(tools=(TOOL,), tool_choice="none"))
    assert compiles(chat(tools=(TOOL,))) and compiles(structured(PERSON))


@pytest.mark.anyio
async def test_the_engine_compiles_on_worker_threads_a_few_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off the event loop and the inference thread; at most `COMPILES` at once, and a request that
    waits for its turn longer than it would for a sequence is told to retry (503)."""
    running, most, threads = 0, 0, set()
    convert = compiled.schema_gbnf

    def slow(schema: Any) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        threads.add(threading.current_thread())
        time.sleep(0.6)
        running -= 1
        return str(convert(schema))

    monkeypatch.setattr(compiled, "schema_gbnf", slow)
    engine = LlamaCppEngine(ModelConfig(id="m", path="m.gguf", queue_timeout=0.3), InferenceThread())
    requests = [structured({"type": "string", "maxLength": i + 1}) for i in range(COMPILES + 1)]  # each compiled anew
    outcomes: dict[int, Constraint | Overloaded] = {}

    async def compile_one(i: int) -> None:
        try:
            outcomes[i] = await engine._constraint(requests[i])
        except Overloaded as error:
            outcomes[i] = error

    async with anyio.create_task_group() as tasks:
        for i in range(len(requests)):
            tasks.start_soon(compile_one, i)
            await anyio.sleep(0.01)  # in this order
    assert most == COMPILES and threading.current_thread() not in threads
    assert [isinstance(outcomes[i], Overloaded) for i in range(len(requests))] == [False] * COMPILES + [True]
    first = outcomes[0]
    again = await engine._constraint(requests[0])  # kept: no second compile
    assert isinstance(first, Constraint) and again.grammar is first.grammar


@pytest.mark.anyio
async def test_a_compile_that_fails_gives_its_turn_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in the converter ends its own request; the next ones still get a turn to compile."""

    def broken(schema: Any) -> str:
        raise RuntimeError("a bug")

    monkeypatch.setattr(compiled, "schema_gbnf", broken)
    engine = LlamaCppEngine(ModelConfig(id="m", path="m.gguf", queue_timeout=0.2), InferenceThread())
    for i in range(COMPILES + 2):
        with pytest.raises(Unsupported):  # the converter's fault, refused by name, not a crash
            await engine._constraint(structured({"type": "string", "maxLength": i + 1}))
    monkeypatch.undo()
    assert isinstance(await engine._constraint(structured(PERSON)), Constraint)
