"""Compiled grammars, made once per distinct input and kept by their engine in a bounded LRU. Pure.

A schema's compile is pure Python and can take seconds: its check and rewrite into forms
(`grammar.enforceable`), their GBNF (`schema_gbnf`), and that text read once for the closing watch
(`gbnf.parse`: the watch follows exactly the text llama.cpp holds the output to); a 120 KB schema
takes about a second. The llama.cpp engine runs it on a worker thread before the request reaches the
inference thread (ARCHITECTURE.md, "Threads and tasks"), and keeps what it made here, so a schema
sent with every request (an agent's tools, a client's response format) is compiled once.

Entries are keyed by a hash of the input's `repr`: exact, where canonical JSON would not be (key
order is the order properties are written in; a tuple, a `1.0` or a `True` may be refused where a
list, a `1` or a `1` is not). Refusals are kept too: the compile reads nothing but its input (no
clock, no budget), so a schema refused once is refused again, and a client retrying it unchanged
costs no second walk. An error that is no refusal (a bug) is not kept.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from ...core.errors import InvalidRequest, Unsupported
from .checks import Validator
from .client_grammar import client_grammar
from .forms import Rewritten
from .gbnf import Grammar, GrammarError, parse
from .grammar import enforceable, validator
from .schema_gbnf import schema_gbnf

__all__ = ["CHARS", "ENTRIES", "CompiledGrammar", "Enforced", "Grammars", "readable"]

log = logging.getLogger("asgi_llm.engine")
T = TypeVar("T")

ENTRIES = 256
"""Compiled inputs an engine keeps at most."""
CHARS = 1_000_000
"""Characters of input and grammar text it keeps at most: a grammar read for the closing watch
takes about 35 bytes a character (5.5 MB for the 157 KB of GBNF of a 120 KB schema), so about 35 MB."""


@dataclass(frozen=True)
class Enforced:
    """A client's schema as decoding holds it (`form`, rewritten by `grammar.enforceable`), and
    the check of a finished value against the schema as the client wrote it (`check`)."""

    form: Rewritten
    check: Validator


@dataclass(frozen=True)
class CompiledGrammar:
    """A grammar ready for llama.cpp: its GBNF text, the same text read for the closing watch
    (`shape`; None where it could not be, and the output then goes unwatched), and what to say
    (`refusal`) if llama.cpp will not build a sampler from it."""

    gbnf: str
    shape: Grammar | None
    refusal: str


@dataclass(frozen=True)
class _Refused:
    kind: type[InvalidRequest]
    message: str
    param: str | None


@dataclass(frozen=True)
class _Entry:
    value: object
    weight: int


def readable(gbnf: str) -> Grammar | None:
    """`gbnf` read for the closing watch; None (the output then goes unwatched) where it cannot be."""
    try:
        return parse(gbnf)
    except (GrammarError, IndexError, ValueError):
        log.warning("a generated grammar could not be read for the closing watch", exc_info=True)
        return None


class Grammars:
    """Compile results by the hash of their input, at most `entries` of them and `chars` characters
    in all, the least recently used going first (one larger than `chars` is made, not kept).

    Safe from several threads: the engine compiles on worker threads. Two threads missing the same
    input at once both compile it (the engine bounds how many compile at once); the first kept wins.
    """

    def __init__(self, entries: int = ENTRIES, chars: int = CHARS) -> None:
        self._entries = entries
        self._chars = chars
        self._kept: OrderedDict[str, _Entry] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def weight(self) -> int:
        """Characters kept now."""
        return self._weight

    def enforced(self, schema: Mapping[str, Any], param: str, *, root_type: str | None = None) -> Enforced:
        """`grammar.enforceable(schema, param, root_type=root_type)` and the client's check; raises as it does."""
        text = repr(schema)

        def make() -> Enforced:
            return Enforced(enforceable(schema, param, root_type=root_type), validator(schema))

        return self._kept_or_made(("enforced", param, root_type or "", text), make, len(text))

    def schema_grammar(self, form: Rewritten, param: str) -> CompiledGrammar:
        """The grammar of `form`, one `enforced` made (or several composed: a forced call's).

        Raises `Unsupported` naming `param` where the converter fails on it (a bug: `enforced`
        tried each automaton already), as a 400 rather than a crash."""
        refusal = f"The schema in '{param}' cannot be enforced while decoding."
        text = repr(form)

        def make() -> CompiledGrammar:
            try:
                gbnf = schema_gbnf(form)
            except Exception:
                log.warning("the grammar converter failed on a checked schema for %s", param, exc_info=True)
                raise Unsupported(refusal, param=param) from None
            return CompiledGrammar(gbnf, readable(gbnf), refusal)

        return self._kept_or_made(("schema", param, text), make, len(text))

    def own_grammar(self, text: str, param: str) -> CompiledGrammar:
        """A client's own GBNF, read as `client_grammar.client_grammar` reads it; raises as it does."""

        def make() -> CompiledGrammar:
            return CompiledGrammar(
                text, client_grammar(text, param), f"llama.cpp cannot build the grammar in '{param}'."
            )

        return self._kept_or_made(("client", param, text), make, len(text))

    def shape(self, gbnf: str) -> Grammar | None:
        """`readable(gbnf)`, kept."""
        return self._kept_or_made(("shape", gbnf), lambda: readable(gbnf), len(gbnf))

    def _kept_or_made(self, key: tuple[str, ...], make: Callable[[], T], size: int) -> T:
        digest = _digest(key)
        with self._lock:
            entry = self._kept.get(digest)
            if entry is not None:
                self._kept.move_to_end(digest)
        if entry is None:
            entry = self._keep(digest, self._made(make, size))
        if isinstance(entry.value, _Refused):
            refused = entry.value
            raise refused.kind(refused.message, param=refused.param)
        return cast(T, entry.value)

    @staticmethod
    def _made(make: Callable[[], T], size: int) -> _Entry:
        try:
            return _Entry(make(), size)
        except InvalidRequest as error:  # Unsupported too: both are the input's own, so kept
            return _Entry(_Refused(type(error), error.message, error.param), len(error.message))

    def _keep(self, digest: str, entry: _Entry) -> _Entry:
        """`entry` kept, or the one another thread kept meanwhile (so that equal inputs share one)."""
        if entry.weight > self._chars or self._entries < 1:
            return entry
        with self._lock:
            kept = self._kept.get(digest)
            if kept is not None:
                return kept
            self._kept[digest] = entry
            self._weight += entry.weight
            while len(self._kept) > self._entries or self._weight > self._chars:
                _, dropped = self._kept.popitem(last=False)
                self._weight -= dropped.weight
        return entry


def _digest(parts: tuple[str, ...]) -> str:
    """One hash of `parts`, each length-prefixed so that no two tuples share their bytes."""
    hashed = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        hashed.update(b"%d:" % len(data))
        hashed.update(data)
    return hashed.hexdigest()
