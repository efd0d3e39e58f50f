"""A client's own GBNF grammar (llama.cpp's `grammar` field), read and checked before llama.cpp
sees it, and the check of a finished output against it. Pure: no `llama_cpp` here.

llama.cpp's reader prints a grammar it cannot read to stderr, whole, and goes on without it;
ours says where the text fails, as a 400. The grammar read here is the one the closing watch
follows, so the output ends inside it whatever the budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ...core.errors import InternalError, InvalidRequest
from ...core.events import Finish, GenerationEvent, TextDelta
from .gbnf import Grammar, GrammarError, parse
from .recognizer import MAX_NESTING, Position

__all__ = ["MAX_GRAMMAR_CHARS", "client_grammar", "in_grammar"]

MAX_GRAMMAR_CHARS = 64 * 1024


def client_grammar(text: str, param: str) -> Grammar:
    """`text` read as a grammar whose `root` rule the output must be a sentence of.

    Raises `InvalidRequest` naming `param`, saying where the text fails (line and column) or
    which rule is at fault.
    """
    if len(text) > MAX_GRAMMAR_CHARS:
        raise InvalidRequest(f"'{param}' is longer than {MAX_GRAMMAR_CHARS} characters.", param=param)
    try:
        grammar = parse(text)
        if grammar.depth > MAX_NESTING:  # what the closing watch could not follow
            raise GrammarError(f"the grammar nests {grammar.depth} rules before a character (at most {MAX_NESTING})")
    except RecursionError:
        raise InvalidRequest(f"'{param}' nests its groups too deeply to be read.", param=param) from None
    except GrammarError as error:
        raise InvalidRequest(
            f"'{param}' is not a grammar this server can enforce: {_where(text, error)}.", param=param
        ) from None
    return grammar


def _where(text: str, error: GrammarError) -> str:
    if error.at is None:
        return str(error)
    line = text.count("\n", 0, error.at) + 1
    column = error.at - (text.rfind("\n", 0, error.at) + 1) + 1
    return f"{error} at line {line}, column {column}"


def in_grammar(
    events: Iterable[GenerationEvent | None], grammar: Grammar, begun: str = ""
) -> Iterator[GenerationEvent | None]:
    """One choice's events, passed on; a choice that ends on its own must have written a sentence
    of `grammar` after the prefill it continues (`begun`; one its budget ended was closed inside it
    by the closing watch, where the room left allowed). One cut by a stop sequence is incomplete
    by the client's own choice."""
    position = Position(grammar).advance(begun)
    for event in events:
        if isinstance(event, TextDelta):
            position = position.advance(event.text)
        elif (
            isinstance(event, Finish)
            and event.reason == "stop"
            and event.stop_sequence is None
            and not position.complete
        ):
            raise InternalError("The model's output does not match the requested grammar.")
        yield event
