"""JSONSchemaBench, parts 1 and 2: one schema compiled by one converter, in a watched child process.

The child loads the packaged model's vocabulary once (llama.cpp's grammar sampler needs it) and
then compiles what it is sent, one (converter, file) at a time; the parent waits at most the time
limit for each answer, and kills and replaces a child that runs over it or dies, so one
pathological schema costs one time limit and never stalls the run.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import queue
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, BinaryIO

import llama_cpp
from llama_cpp.llama_grammar import json_schema_to_gbnf

from asgi_llm.config import ModelConfig
from asgi_llm.core.errors import InvalidRequest, LLMError
from asgi_llm.engines.decoding.gbnf import parse
from asgi_llm.engines.decoding.grammar import check_schema, enforceable
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf
from asgi_llm.engines.llamacpp.native import Model, llama_log_lines

ENGINES = ("ours", "llguidance", "llama-cpp-python")
PARAM = "response_format"
_WRAPPERS = ("json_schema", "schema")
_SCHEMA_WORDS = {"$schema", "$ref", "type", "properties", "items", "anyOf", "oneOf", "allOf", "enum", "const"}
_SCHEMA_WORDS |= {"definitions", "$defs"}
Outcome = tuple[str, float | None, str]  # status, seconds (None where not timed), message


@dataclass(frozen=True)
class Compiled:
    """One converter's answer for one schema file.

    `status`: covered, invalid (not a valid JSON Schema; ours only), refused (the converter said no),
    rejected (llama.cpp would not build the grammar), unreadable (our grammar reader failed on our
    own GBNF), error (an unexpected exception: a bug), timeout, crashed (the child died)."""

    file: str  # "<dataset>/<name>.json"
    engine: str
    status: str
    seconds: float | None
    message: str = ""


def load_schema(path: Path) -> Any:
    """The schema in a dataset file: the bare schema, or the one a wrapper object holds under
    "json_schema" or "schema" (a wrapper is an object with none of the usual schema keywords)."""
    document = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(document, dict) and not _SCHEMA_WORDS & document.keys():
        for key in _WRAPPERS:
            if isinstance(document.get(key), dict):
                return document[key]
    return document


class _Converters:
    """The child's side: each converter as a request would run it, over the packaged vocabulary."""

    def __init__(self, stderr: BinaryIO) -> None:
        self._stderr = stderr
        quiet = logging.getLogger("asgi_llm.llama_cpp")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        self.model = Model(ModelConfig())
        self._tokenizer: Any = None
        self.run: dict[str, Callable[[Any], Outcome]] = {
            "ours": self.ours,
            "llguidance": self.llguidance,
            "llama-cpp-python": self.llama_cpp_python,
        }

    def rejection(self, gbnf: str) -> str | None:
        """Why llama.cpp will not build a grammar sampler from `gbnf`, or None. Its grammar parser
        writes the reason to stderr (then logs "failed to parse grammar"): read back from the log file."""
        start = self._stderr.seek(0, os.SEEK_END)
        with llama_log_lines() as lines:
            sampler = llama_cpp.llama_sampler_init_grammar(self.model.vocab, gbnf.encode("utf-8"), b"root")
        if sampler:
            llama_cpp.llama_sampler_free(sampler)
            return None
        self._stderr.seek(start)
        printed = self._stderr.read().decode("utf-8", "replace").splitlines()
        reasons = [line.strip() for line in printed + lines if "error" in line]
        return " | ".join(reasons[:2]) or " | ".join(lines[-2:]) or "llama.cpp returned no sampler"

    def ours(self, schema: Any) -> Outcome:
        """check_schema (untimed, to tell invalid schemas apart), then what a request does, timed:
        `enforceable`, `schema_gbnf`, the closing watch's reader, llama.cpp's acceptance."""
        try:
            check_schema(schema, PARAM)
        except InvalidRequest as invalid:
            return "invalid", None, invalid.message
        started = time.perf_counter()
        try:
            rewritten = enforceable(schema, PARAM)
        except LLMError as refused:
            return "refused", time.perf_counter() - started, refused.message
        gbnf = schema_gbnf(rewritten)
        try:
            parse(gbnf)
        except (ValueError, IndexError) as unread:
            return "unreadable", time.perf_counter() - started, f"{type(unread).__name__}: {unread}"
        rejected = self.rejection(gbnf)
        return ("rejected" if rejected else "covered"), time.perf_counter() - started, rejected or ""

    def llguidance(self, schema: Any) -> Outcome:
        """`LLMatcher.grammar_from_json_schema` (compact JSON, as benchmarks/grammar_engines.py runs it),
        then `LLMatcher.validate_grammar` over the packaged vocabulary (its tokenizer built once)."""
        from llguidance import LLMatcher
        from llguidance.llamacpp import lltokenizer_from_vocab

        if self._tokenizer is None:
            self._tokenizer = lltokenizer_from_vocab(self.model.vocab)
        started = time.perf_counter()
        try:
            grammar = LLMatcher.grammar_from_json_schema(schema, overrides={"whitespace_flexible": False})
        except ValueError as refused:
            return "refused", time.perf_counter() - started, str(refused)
        error = LLMatcher.validate_grammar(grammar, self._tokenizer)
        return ("refused" if error else "covered"), time.perf_counter() - started, error

    def llama_cpp_python(self, schema: Any) -> Outcome:
        """llama-cpp-python's own converter (`json_schema_to_gbnf`), then llama.cpp's acceptance."""
        started = time.perf_counter()
        try:
            gbnf = json_schema_to_gbnf(json.dumps(schema))
        except Exception as refused:  # noqa: BLE001 - its refusals are plain exceptions of several kinds
            return "refused", time.perf_counter() - started, f"{type(refused).__name__}: {refused}"
        rejected = self.rejection(gbnf)
        return ("rejected" if rejected else "covered"), time.perf_counter() - started, rejected or ""


def _described(exc: Exception) -> str:
    """The exception and the line that raised it."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {str(exc)[:300]} ({Path(frame.filename).name}:{frame.lineno} {frame.name})"


def _serve(conn: Connection) -> None:
    """The child: answers (engine, path) with an `Outcome` until the pipe closes."""
    with tempfile.TemporaryFile() as printed:  # llama.cpp and the converters print: kept out of the report
        os.dup2(printed.fileno(), 1)
        os.dup2(printed.fileno(), 2)
        converters = _Converters(printed)
        conn.send("ready")
        while True:
            try:
                engine, path = conn.recv()
            except EOFError:
                return
            try:
                outcome = converters.run[engine](load_schema(Path(path)))
            except Exception as exc:  # noqa: BLE001 - a bug in a converter: reported, not fatal
                outcome = ("error", None, _described(exc))
            conn.send(outcome)


class Worker:
    """One child process, replaced whenever it runs over `limit` seconds or dies."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        # Children fork from one server process that imported this module (and asgi_llm) once, so a
        # replaced child runs the same code as the first, not what the tree holds by then.
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload([__name__])
        self._start()

    def _start(self) -> None:
        self._conn, child = self._context.Pipe()
        self._process = self._context.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        child.close()
        if not self._conn.poll(300) or self._conn.recv() != "ready":
            raise SystemExit("the compile worker did not start (is the packaged model installed?)")

    def _restart(self) -> None:
        self._process.kill()
        self._process.join()
        self._conn.close()
        self._start()

    def compile(self, engine: str, root: Path, file: str) -> Compiled:
        self._conn.send((engine, str(root / file)))
        try:
            if not self._conn.poll(self.limit):
                self._restart()
                return Compiled(file, engine, "timeout", None, f"over {self.limit:g} s")
            status, seconds, message = self._conn.recv()
        except (EOFError, OSError):
            self._process.join(5)
            code = self._process.exitcode
            self._restart()
            return Compiled(file, engine, "crashed", None, f"the child died (exit code {code})")
        return Compiled(file, engine, status, seconds, message)

    def close(self) -> None:
        self._conn.close()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()


def compile_all(root: Path, files: list[str], engines: tuple[str, ...], limit: float, jobs: int) -> list[Compiled]:
    """Every file through every engine, on `jobs` workers; a progress line to stderr now and then."""
    todo: queue.Queue[str] = queue.Queue()
    for file in files:
        todo.put(file)
    results: list[Compiled] = []
    started = time.monotonic()

    def drain() -> None:
        worker = Worker(limit)
        try:
            while True:
                try:
                    file = todo.get_nowait()
                except queue.Empty:
                    return
                results.extend(worker.compile(engine, root, file) for engine in engines)
                if (done := len(results) // len(engines)) % 250 == 0:
                    print(f"  {done}/{len(files)} files, {time.monotonic() - started:.0f} s", file=sys.stderr)
        finally:
            worker.close()

    threads = [threading.Thread(target=drain) for _ in range(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
