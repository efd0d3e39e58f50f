"""The coupling rule beside the size rule: no module writes another object's attributes from
outside the module that defines that object's class. Reading them is fine; changing them is the
owner's business: call a method of it (`entry.ready(engine)`, not `entry.state = "ready"`), so a
class's invariants are kept by its own module, and a split along the size rule keeps them too.

A write is an assignment (plain, augmented or annotated), a `del` or a `setattr` of `obj.name`,
where `obj` is not the `self` (or `cls`) of the method it is in. The walk cannot know an object's
class, so it judges by the attribute's name: a write stays inside its owner's module when a class
of that module owns an attribute of that name (assigns `self.name`, or declares it in its body:
a dataclass field). Any other write is a violation, unless `EXCEPTIONS` names its module and the
object written to, and says why.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("asgi_llm", "adapters", "contrib")

_CONTEXT = """`RequestContext` (http/context.py) is the request's record that every layer and the
endpoint share by design (ARCHITECTURE.md, `asgi_llm.http`): the layer that learns a field fills
it (the app its route match and description, the auth layer's body read-ahead, the limits
layer's `max_tokens` cap, the tracing layer's notes, the in-process client's call), as a
Starlette host fills `request.state`. A method per field would only rename the assignment."""

_LOG_RECORD = """`logging.LogRecord`: the standard library's way for a filter to put a field on a
record (the request id), and for a formatter to word a copy of it."""

_THREAD_LOCAL = """A `threading.local` is a slot per thread: setting it is its whole interface (the
SQLite connection of each worker thread; the lines llama.cpp logs on the loading thread)."""

_C_STRUCTS = """llama.cpp's parameter and batch structs (ctypes): a C API is called with structs
filled field by field."""

_FORMAT_CHECKER = """jsonschema's `FormatChecker` starts empty or from a draft's checks; its
`checkers` mapping is its documented way to start from another checker's."""

_EXCEPTION_CAUSE = """An exception's `__cause__`, set as `raise ... from` sets it: the error is
sent to the request's channel, not raised."""

_SCHEDULER = """The continuous-batching scheduler's records: `Job` and `Ticket` (jobs.py) and `Slot`
(batching.py) are plain records that the scheduler's modules keep on the inference thread.
jobs.py holds the contracts apart from batching.py so that the scheduler's pure parts import no
model (ARCHITECTURE.md), and cache_reading.py (where a prompt starts from) and lora.py (which
jobs may decode together) are the scheduler's steps, split out by size; `Ticket.open` is the
count of a request's choices that the engine side (runtime.py, reranking.py) sets as it submits
them, and the runtime sets the scheduler's LoRA gate when it builds it. To become methods of the
records when the engine's modules are next reworked (they are being changed now for the prompt
cache on disk and streamed tool calls)."""

EXCEPTIONS: dict[tuple[str, str], str] = {
    ("asgi_llm/app.py", "context"): _CONTEXT,
    ("asgi_llm/client.py", "self._context"): _CONTEXT,
    ("asgi_llm/http/body.py", "context"): _CONTEXT,
    ("asgi_llm/middleware/admin.py", "context"): _CONTEXT,
    ("asgi_llm/middleware/limits.py", "context"): _CONTEXT,
    ("asgi_llm/middleware/metrics.py", "context"): _CONTEXT,
    ("asgi_llm/middleware/tracing.py", "context"): _CONTEXT,
    ("asgi_llm/logs.py", "record"): _LOG_RECORD,
    ("asgi_llm/storage/sqlite.py", "self._local"): _THREAD_LOCAL,
    ("asgi_llm/engines/llamacpp/native.py", "_CAPTURE"): _THREAD_LOCAL,
    ("asgi_llm/engines/llamacpp/native.py", "params"): _C_STRUCTS,
    ("asgi_llm/engines/llamacpp/native.py", "native"): _C_STRUCTS,
    ("asgi_llm/engines/llamacpp/projector.py", "params"): _C_STRUCTS,
    ("asgi_llm/engines/llamacpp/projector.py", "self._options.video_params"): _C_STRUCTS,
    ("asgi_llm/engines/decoding/formats.py", "checker"): _FORMAT_CHECKER,
    ("asgi_llm/engines/llamacpp/batching.py", "error"): _EXCEPTION_CAUSE,
    **{
        (f"asgi_llm/engines/llamacpp/{module}.py", obj): _SCHEDULER
        for module, objects in {
            "batching": ("job", "job.ticket", "ticket", "leader", "follower"),
            "cache_reading": ("job", "follower", "target", "slot", "slot.job"),
            "media_reading": ("job",),
            "speculation": ("job",),
            "lora": ("slot",),
            "reranking": ("ticket",),
            "runtime": ("ticket", "self.scheduler"),
        }.items()
        for obj in objects
    },
}
"""(module, the object written to, as written) → why that module may write it."""


def _modules() -> Iterator[Path]:
    for folder in FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    """What `node` writes or deletes, tuples and starred targets unpacked."""
    found: list[ast.expr] = []
    if isinstance(node, (ast.Assign, ast.Delete)):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
        found = [node.target]
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        found = [node.optional_vars]
    elif isinstance(node, ast.comprehension):
        found = [node.target]
    while found:
        target = found.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            found.extend(target.elts)
        elif isinstance(target, ast.Starred):
            found.append(target.value)
        else:
            yield target


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def owned(tree: ast.Module) -> set[str]:
    """The attribute names the module's classes own: assigned on `self` in their methods, or
    declared in their bodies."""
    names: set[str] = set()
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        for statement in cls.body:
            for target in _targets(statement):
                if isinstance(target, ast.Name):
                    names.add(target.id)
        for node in ast.walk(cls):
            for target in _targets(node):
                if isinstance(target, ast.Attribute) and _is_self(target.value):
                    names.add(target.attr)
    return names


def writes(tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """Each write to another object's attribute: (line, the object as written, the attribute)."""
    for node in ast.walk(tree):
        for target in _targets(node):
            if isinstance(target, ast.Attribute) and not _is_self(target.value):
                yield target.lineno, ast.unparse(target.value), target.attr
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            obj, name = (node.args + [ast.Constant(None)] * 2)[:2]
            attr = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else "?"
            if not _is_self(obj):
                yield node.lineno, ast.unparse(obj), attr


def violations(module: str, source: str) -> list[tuple[int, str, str]]:
    """The writes of `module` (`source`) outside the owners' modules, exceptions aside."""
    tree = ast.parse(source)
    own = owned(tree)
    return [
        (line, obj, attr) for line, obj, attr in writes(tree) if attr not in own and (module, obj) not in EXCEPTIONS
    ]


MODULES = [path.relative_to(ROOT).as_posix() for path in _modules()]


@pytest.mark.parametrize("module", MODULES)
def test_no_module_writes_another_objects_attributes(module: str) -> None:
    found = violations(module, (ROOT / module).read_text(encoding="utf-8"))
    assert found == [], "\n".join(
        f"{module}:{line}: writes {obj}.{attr}, an attribute of a class defined elsewhere: call a method of"
        " its own instead (or name the write in EXCEPTIONS, tests/test_static/test_coupling.py, with why)"
        for line, obj, attr in found
    )


def test_every_exception_is_still_needed() -> None:
    """An exception no write uses any more is removed, so the list says only what is true."""
    used = set()
    for module in MODULES:
        tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
        own = owned(tree)
        used |= {(module, obj) for _, obj, attr in writes(tree) if attr not in own}
    assert set(EXCEPTIONS) - used == set()


def test_the_walk_finds_writes_from_outside_and_not_the_owners() -> None:
    source = """
class Entry:
    def __init__(self):
        self.state = "new"

    def ready(self):
        self.state = "ready"


def outside(entry, pool, other):
    entry.state = "ready"  # its class is defined here: the owner's module
    pool.users += 1
    other.a, (other.b, *other.c) = 1, (2, 3)
    del other.d
    setattr(other, "e", 5)
    for other.f in ():
        pass
"""
    found = {(obj, attr) for _, obj, attr in violations("sample.py", source)}
    assert found == {("pool", "users"), ("other", "a"), ("other", "b"), ("other", "c"), ("other", "d")} | {
        ("other", "e"),
        ("other", "f"),
    }
