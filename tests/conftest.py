"""Shared fixtures: the anyio backends (asyncio and uvloop) and validation against OpenAI's own OpenAPI spec;
the `model` marker, and the guard that keeps it on every test that loads a model.

The spec lives in the shared folder beside the repository (`../shared/spec`), in CI too.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest
import pytest_timeout
import yaml
from _pytest.mark.expression import Expression
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).resolve().parents[1].parent / "shared" / "spec" / "openai-openapi.yaml"
SPEC_URI = "urn:openai-openapi"

SpecValidate = Callable[[Any, str], None]

DESELECTED = pytest.StashKey[bool]()  # whether -k, -m, --deselect or --lf left tests out
PARTIAL = "asgi_llm_partial"  # an xdist worker's input: whether the run is of some tests only

MODEL_FIXTURES = frozenset(
    {
        "server",  # tests/test_e2e/conftest.py: the packaged model under uvicorn (and `client`, built on it)
        "serve_host",  # ... apps of a test's own settings, served as `server` is
        "asgi_llm_serve",  # ... `asgi-llm serve` in a process of its own
        "loaded",  # ... the packaged model and a context, without the engine
        "asgi_llm_upstream",  # tests/test_e2e/test_upstream/conftest.py: `asgi-llm serve` as an upstream
        "llama_cpp_upstream",  # ... llama-cpp-python's own server
        "gateway",  # ... either of them, behind a gateway
        "start_upstream",  # ... a further `asgi-llm serve` upstream
    }
)
"""Fixtures that load a real model: a test that uses one, directly or through another fixture, is
marked `model`. A module whose tests load a model otherwise says `pytestmark = pytest.mark.model`;
`ModelLoads` fails a test that loads one in this process unmarked. A load in a process the test
starts (`asgi-llm serve`) is out of its sight: such a test is marked by hand."""
SLOW_FIXTURES = frozenset({"redis_server", "postgres_server"})  # tests/test_shared/conftest.py
"""Fixtures that take seconds without a model (private Redis and PostgreSQL servers): a test that
uses one is marked `slow`. Those that start uvicorn, a browser or another process, build the wheel
or search at length say so themselves. `pytest -m "not model and not slow"` is the fast suite."""


@pytest.fixture(
    scope="module", params=[pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"), pytest.param("asyncio")]
)
def anyio_backend(request: pytest.FixtureRequest) -> object:
    """Every async test runs on uvloop, the loop `asgi-llm serve` (uvicorn) picks, and on plain asyncio:
    their callbacks run in different orders, and some bugs show on one only. Module-wide, as anyio's own
    default, so a module's shared async fixture (a loaded engine) starts once per backend."""
    return request.param


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if MODEL_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.model)
        if SLOW_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.slow)


class ModelLoads:
    """Refuses, and fails, a load of a GGUF model through llama.cpp by a test not marked `model`, so
    that `pytest -m "not model"` stays fast: every load passes through `llama_model_load_from_file`.

    It watches from the first test that starts once llama_cpp is imported (collecting the engine's
    tests imports it): importing it here would make every run pay for it, and a run that never
    imports it loads no model."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self.refused: list[str] = []
        self.patch: pytest.MonkeyPatch | None = None

    def watch(self) -> None:
        if self.patch is not None or "llama_cpp.llama_cpp" not in sys.modules:
            return
        import llama_cpp

        self.patch = pytest.MonkeyPatch()
        load = llama_cpp.llama_cpp.llama_model_load_from_file

        def guarded(path: bytes, params: Any) -> Any:
            item = self.item
            if item is not None and item.get_closest_marker("model") is None:
                self.refused.append(path.decode(errors="replace"))
                raise RuntimeError("refused: a test not marked `model` (tests/conftest.py, ModelLoads)")
            return load(path, params)

        for module in (llama_cpp, llama_cpp.llama_cpp):  # the package re-exports it
            self.patch.setattr(module, "llama_model_load_from_file", guarded)

    @staticmethod
    def message(item: pytest.Item) -> str:
        return (
            f"{item.nodeid} loads a GGUF model through llama.cpp but is not marked `model`: add"
            " `pytestmark = pytest.mark.model` to its module, or name its fixture in MODEL_FIXTURES"
            " (tests/conftest.py)"
        )

    def check(self, item: pytest.Item) -> None:
        refused, self.refused = self.refused, []
        if refused:
            pytest.fail(f"{self.message(item)}; it loaded {', '.join(sorted(set(refused)))}", pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        self.watch()
        self.item, self.refused = item, []
        try:
            return (yield)
        finally:
            self.item = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            yield
        finally:
            self.check(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            yield
        finally:
            self.check(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            yield
        finally:
            self.check(item)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(ModelLoads(), "model-loads")
    if _partial(config):
        _measure_nothing(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    guard = config.pluginmanager.get_plugin("model-loads")
    if isinstance(guard, ModelLoads) and guard.patch is not None:
        guard.patch.undo()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[PARTIAL] = _partial(node.config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): a worker per core and one more for the whole tree without
    the model tests (`pytest -m "not model"`, the fast suite, which is most of the tests and little
    of the time), and none otherwise. A third of the fast suite's time is waiting (servers starting,
    PostgreSQL stopped and started, leases running out), so one worker over the cores keeps them
    busy: 47–51 s against 56–66 s on 2 cores. The model tests share servers and loaded models within
    a process and give each llama.cpp every core, and a run of a few tests would spend more on
    starting workers than it saves. `-n N` still asks for N."""
    if config.args_source is not pytest.Config.ArgsSource.TESTPATHS or not _without_models(config.option.markexpr):
        return 0
    preset = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(preset) if preset else len(os.sched_getaffinity(0)) + 1


def _without_models(markexpr: str) -> bool:
    """Whether `-m` leaves out every test marked `model`."""
    if not markexpr:
        return False
    expression = Expression.compile(markexpr)
    return not expression.evaluate(lambda name: name == "model")


def _partial(config: pytest.Config) -> bool:
    """Whether the run leaves out some tests by its arguments or options (an xdist worker, whose
    arguments are the controller's choice, is told: `pytest_configure_node`)."""
    told = getattr(config, "workerinput", {}).get(PARTIAL)
    if told is not None:
        return bool(told)
    options = config.option
    chosen = bool(options.markexpr or options.keyword or options.deselect or getattr(options, "lf", False))
    return chosen or config.args_source is not pytest.Config.ArgsSource.TESTPATHS


def _measure_nothing(config: pytest.Config) -> None:
    """Coverage (pyproject's `--cov`) is for the whole suite, which holds its floor: a run of some
    tests measures nothing, as with `--no-cov`, and runs at full speed (the tracer doubles the fast
    suite's time). pytest-cov has already begun tracing in this process (its hook runs before this
    file is read): stopped, its data dropped, and `no_cov` set before its session starts, where it
    reads it; the processes this one starts (xdist's workers, servers) are not told to measure."""
    coverage = config.pluginmanager.get_plugin("_cov")
    if coverage is None:
        return
    coverage.options.no_cov = True
    os.environ.pop("COVERAGE_PROCESS_CONFIG", None)  # `patch = ["subprocess"]`: children would measure themselves
    controller = coverage.cov_controller
    if controller is not None:
        controller.cov.stop()
        controller.cov.erase()


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash[DESELECTED] = True


def pytest_collection_finish(session: pytest.Session) -> None:
    """The coverage floor is the whole suite's: a run that deselects some tests (a plugin's
    choice, or anything `_partial` does not see) reports coverage but holds no floor."""
    coverage = session.config.pluginmanager.get_plugin("_cov")
    if coverage is not None and session.config.stash.get(DESELECTED, False):
        coverage.options.cov_fail_under = None


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's thread method, which names the hung test before and after it dumps every
    thread's stack and every running loop's unfinished tasks."""
    if settings.method != "thread":
        return None

    def expire() -> None:
        capture = item.config.pluginmanager.get_plugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture(item)  # as pytest-timeout does, so that the line shows
        named = f"\n{item.nodeid} ran past its {settings.timeout:g} s timeout"
        item.config.get_terminal_writer().line(named, red=True)
        dump = pytest_timeout.dump_stacks

        def dump_then_name(terminal: Any) -> None:
            dump(terminal)
            _dump_tasks(terminal)
            terminal.line(named, red=True)  # again below the stacks: a CI log's tail names the test

        pytest_timeout.dump_stacks = dump_then_name  # the run ends with this dump: nothing to restore
        pytest_timeout.timeout_timer(item, settings)  # dumps the stacks, then ends the run

    timer = threading.Timer(settings.timeout, expire)
    timer.name = f"timeout {item.nodeid}"
    timer.daemon = True

    def cancel() -> None:
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # where pytest-timeout's own hook looks
    timer.start()
    return True


def _dump_tasks(terminal: Any) -> None:
    """Where each unfinished task of a running event loop waits: a thread's stack shows a loop idle
    in its C code (uvloop), not which of its tasks never ends. Read from the timer's thread while
    that loop may move: enough to point at the culprit, in a run that ends next."""
    for loop in [found for found in gc.get_objects() if isinstance(found, asyncio.AbstractEventLoop)]:
        if loop.is_closed() or not loop.is_running():
            continue
        try:
            pending = [task for task in list(asyncio.all_tasks(loop)) if not task.done()]
        except RuntimeError:  # the loop's task set changed while read
            continue
        terminal.sep("~", title=f"{len(pending)} unfinished tasks of {type(loop).__name__}")
        for task in pending:
            terminal.line(f"{task.get_name()}: {_awaiting(task.get_coro())}")


def _awaiting(awaited: Any) -> str:
    """A coroutine and what it awaits, down to the innermost (often a bare future)."""
    parts = []
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
        if frame is None:
            parts.append(repr(awaited)[:200])
            break
        parts.append(f"{frame.f_code.co_name} ({Path(frame.f_code.co_filename).name}:{frame.f_lineno})")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    return " -> ".join(parts)


def _null_tolerant(node: Any) -> Any:
    """OpenAPI 3.0's `nullable: true` (still used in places) as JSON Schema 2020-12 understands it."""
    if isinstance(node, list):
        return [_null_tolerant(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _null_tolerant(value) for key, value in node.items() if not (key == "nullable" and value is True)}
    if node.get("nullable") is True:
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


@pytest.fixture(scope="session")
def openai_spec() -> dict[str, Any]:
    """The official OpenAI OpenAPI document, loaded once per session (it is ~3 MB)."""
    if not SPEC_PATH.is_file():
        pytest.fail(f"OpenAI spec not found at {SPEC_PATH}")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with SPEC_PATH.open("rb") as f:
        spec: dict[str, Any] = yaml.load(f, Loader=loader)
    return _null_tolerant(spec)  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def spec_validate(openai_spec: dict[str, Any]) -> SpecValidate:
    """`spec_validate(instance, "CreateChatCompletionResponse")` raises `ValidationError` on a mismatch."""
    registry: Registry[Any] = Registry().with_resource(SPEC_URI, Resource(openai_spec, specification=DRAFT202012))
    validators: dict[str, Draft202012Validator] = {}

    def validate(instance: Any, name: str) -> None:
        if name not in openai_spec["components"]["schemas"]:
            raise KeyError(f"no schema {name!r} in the OpenAI spec")
        if name not in validators:
            schema = {"$ref": f"{SPEC_URI}#/components/schemas/{name}"}
            validators[name] = Draft202012Validator(schema, registry=registry)
        validators[name].validate(instance)

    return validate
