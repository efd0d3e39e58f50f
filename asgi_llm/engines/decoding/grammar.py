"""JSON Schemas as decoding enforces them, and the check of a finished output. Pure: no `llama_cpp` here.

`enforceable` checks a schema, refuses what no grammar can hold (a pattern's negation,
`uniqueItems` on open strings...), and rewrites the rest (`rewrite`) into the `forms` `schema_gbnf`
turns into a grammar exactly. `checked_output` holds a finished output to the client's own schema,
formats included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ...core.errors import InternalError, Unsupported
from ...core.events import Finish, GenerationEvent, TextDelta
from .checks import Validator, check_schema, validator
from .forms import Rewritten, finite_refs
from .rewrite import literal_safe, rewrite
from .walk import Unsatisfiable

__all__ = [
    "as_rule",
    "check_schema",
    "checked_output",
    "enforceable",
    "literal_safe",
    "relax_space",
    "validator",
]


def enforceable(schema: Mapping[str, Any], param: str, *, root_type: str | None = None) -> Rewritten:
    """`schema` in the forms the converter enforces exactly; every value they allow is valid under `schema`.

    Raises `InvalidRequest` (an invalid schema) or `Unsupported` (a valid one that decoding
    cannot enforce), naming `param`. `root_type` demands a type at the root (tool arguments
    are objects).
    """
    check_schema(schema, param)
    if root_type is not None and schema.get("type", root_type) != root_type:
        raise Unsupported(f"'{param}' must describe a JSON {root_type}.", param=param)
    if root_type is not None and not {"type", "$ref", "anyOf", "oneOf", "allOf"} & schema.keys():
        schema = {**schema, "type": root_type}
    out = rewrite(schema, param)
    endless = sorted(out.defs.keys() - finite_refs(out.defs))
    if endless:
        raise Unsatisfiable(
            f"No value allowed in '{param}': its references never end ({', '.join(endless[:5])}).", param=param
        )
    return out


def as_rule(gbnf: str, name: str) -> str:
    """A converter grammar with its `root` rule renamed, to be used inside a larger grammar."""
    lines = gbnf.splitlines()
    renamed = [f"{name} ::= {line[len('root ::= ') :]}" if line.startswith("root ::= ") else line for line in lines]
    if renamed == lines:
        raise ValueError("the grammar has no root rule")
    return "\n".join(renamed)


def relax_space(gbnf: str) -> str:
    """Lets a converter grammar take JSON laid out any way (newlines, any indent up to a bound), as
    models that chose to write a call themselves do."""
    return _SPACES.sub(lambda rule: f'{rule[1]} ::= | " " | "\\n" [ \\t]{{0,20}}', gbnf)


_SPACES = re.compile(r"^(space(?:-\d+)?) ::= .*$", re.MULTILINE)


def checked_output(
    events: Iterable[GenerationEvent | None], check: Validator, begun: str = ""
) -> Iterator[GenerationEvent | None]:
    """One choice's events, passed on; a choice that ends on its own must have produced a valid
    document, after the prefill it continues (`begun`).

    One cut off by its token limit or a stop sequence is incomplete by the client's own
    choice, and goes unchecked. A document that does not validate is a bug, raised as such.
    """
    texts: list[str] = [begun]
    for event in events:
        if isinstance(event, TextDelta):
            texts.append(event.text)
        elif isinstance(event, Finish) and event.reason == "stop" and event.stop_sequence is None:
            try:
                valid = check.is_valid(json.loads("".join(texts)))
            except ValueError:
                valid = False
            if not valid:
                raise InternalError("The model's output does not match the requested format.")
        yield event
