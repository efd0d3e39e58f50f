"""GBNF for a schema `rewrite` has prepared: every text it allows is valid JSON under the schema. Pure.

Our own converter (llama-cpp-python's drops ranges, and asserts on patterns it cannot read):
the same shapes as llama.cpp's (`root`, a `space` after each value, properties in order,
required ones first), with bounded numbers, patterns, formats and key rules spelled by
automata (`automata`, `numbers`), and object sizes counted as properties are chosen. Counts of
any size are written in blocks (`counts`); a recursive reference is a rule of its own, and
`contains` hits, unique values and kinds of free keys are rules counted as they are written.
Equal sub-schemas share one rule, so a format used in fifty fields is written once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .automata import gbnf_rules
from .counts import counted
from .numbers import number_dfa
from .strings import string_dfa

__all__ = ["schema_gbnf"]

_BASE = {
    "space": '" "?',
    "char": '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | "u" [dD] [0-7] [0-9a-fA-F]{2})',
    "string": '"\\"" char* "\\"" space',
    "boolean": '("true" | "false") space',
    "null": '"null" space',
    "integer": '("-"? ([0] | [1-9] [0-9]{0,15})) space',
    "number": '("-"? ([0] | [1-9] [0-9]{0,15})) ("." [0-9]{1,16})? ([eE] [-+]? [0-9] [0-9]?)? space',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" space ( string ":" space value ("," space string ":" space value)* )? "}" space',
    "array": '"[" space ( value ("," space value)* )? "]" space',
}
_USES = {"char": (), "string": ("char",), "value": ("object", "array", "string", "number", "boolean", "null")}
_USES |= {"object": ("string", "value"), "array": ("value",)}


def schema_gbnf(schema: Mapping[str, Any]) -> str:
    """The grammar of `schema` (a `rewrite` result), its start rule `root`."""
    builder = _Builder()
    builder.rules["root"] = builder.body(schema, "root")
    return "\n".join(f"{name} ::= {body}" for name, body in builder.rules.items())


def _literal(text: str) -> str:
    escaped = "".join(c if c.isprintable() and c not in '"\\' else f"\\x{ord(c):02X}" for c in text)
    return f'"{escaped}"'


def _repeat(rules: dict[str, str], name: str, item: str, sep: str, least: int, most: int | None) -> str:
    """`item` `least` to `most` times, `sep` between them."""
    if most == 0:
        return ""
    more = counted(rules, f"{name}-more", f"({sep} {item})", max(least - 1, 0), most - 1 if most is not None else None)
    body = f"{item} {more}".strip()
    return f"({body})" if least else f"({body})?"


class _Builder:
    def __init__(self) -> None:
        self.rules: dict[str, str] = {"space": _BASE["space"]}
        self.named: dict[str, str] = {}
        self.defs: dict[str, Any] = {}  # recursive rules' bodies, by name (`x-defs`)
        self.count = 0

    def base(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = _BASE[name]
            for used in _USES.get(name, ()):
                self.base(used)
        return name

    def rule(self, schema: Mapping[str, Any], hint: str) -> str:
        """The name of a rule for `schema`, made once for equal schemas."""
        key = json.dumps(schema, sort_keys=True)
        if key not in self.named:
            self.count += 1
            name = f"{re.sub('[^A-Za-z0-9]+', '-', hint).strip('-')[:24] or 'r'}-{self.count}"
            self.named[key] = name
            self.rules[name] = self.body(schema, name)
        return self.named[key]

    def ref(self, name: str) -> str:
        """The rule of a recursive reference, made once (its body may refer to it)."""
        rule = f"ref-{name}"
        if rule not in self.rules:
            self.rules[rule] = ""
            self.rules[rule] = self.body(self.defs[name], rule)
        return rule

    def body(self, schema: Mapping[str, Any], name: str) -> str:
        if "x-defs" in schema:
            self.defs.update(schema["x-defs"])
            schema = {k: v for k, v in schema.items() if k != "x-defs"}
        if "x-ref" in schema:
            return self.ref(schema["x-ref"])
        if "anyOf" in schema:
            return " | ".join(self.rule(option, name) for option in schema["anyOf"])
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else schema["enum"]
            texts = [_literal(json.dumps(v, ensure_ascii=False)) for v in values]
            return f"({' | '.join(texts)}) space"
        kind = schema.get("type")
        if kind == "object":
            return self.object(schema, name)
        if kind == "array":
            return self.array(schema, name)
        if kind == "string":
            return self.string(schema, name)
        if kind in ("integer", "number"):
            if len(schema) == 1:
                return self.base(kind)
            self.rules.update(_rules(gbnf_rules(number_dfa(dict(schema)), f"{name}-n", in_string=False)))
            return f"{name}-n space"
        if kind in ("boolean", "null"):
            return self.base(kind)
        return self.base("value")

    def string(self, schema: Mapping[str, Any], name: str) -> str:
        dfa = string_dfa(schema)
        if dfa is None:
            least, most = schema.get("minLength", 0), schema.get("maxLength")
            if not least and most is None:
                return self.base("string")
            self.base("char")
            return f'"\\"" {counted(self.rules, f"{name}-c", "char", least, most)} "\\"" space'
        self.rules.update(_rules(gbnf_rules(dfa, f"{name}-s", in_string=True)))
        return f'"\\"" {name}-s "\\"" space'

    def array(self, schema: Mapping[str, Any], name: str) -> str:
        if "prefixItems" in schema:
            return self.tuple(schema, name)
        if "items" not in schema:
            return self.base("array")
        item = self.rule(schema["items"], f"{name}-item")
        least, most = schema.get("minItems", 0), schema.get("maxItems")
        if schema.get("x-unique"):
            return f'"[" space {self.unique(schema["items"], name, least, most)} "]" space'
        if "maxContains" in schema:
            return f'"[" space {self.counted_hits(schema, name)} "]" space'
        if "x-contains" in schema:
            hit = self.rule(schema["x-contains"], f"{name}-hit")
            more = (
                f'(("," space {item})* "," space {hit}){{{schema["minContains"] - 1}}}'
                if schema["minContains"] > 1
                else ""
            )
            return f'"[" space ({item} "," space)* {hit} {more} ("," space {item})* "]" space'
        inner = _repeat(self.rules, name, item, '"," space', least, most)
        return f'"[" space {inner} "]" space'

    def counted_hits(self, schema: Mapping[str, Any], name: str) -> str:
        """Items each a hit (`x-contains`) or a miss (`x-miss`), `minContains` to `maxContains` hits:
        a rule per item and hits before it (`e`), and per place after an item (`t`)."""
        least, most = schema["minContains"], schema["maxContains"]
        hit = self.rule(schema["x-contains"], f"{name}-hit")
        miss = self.rule(schema["x-miss"], f"{name}-miss") if "x-miss" in schema else None
        open_ = [h for h in range(most + 1) if miss or h < most]  # where another item may follow
        for h in open_:
            alts = [f"{miss} {name}-t{h}"] if miss else []
            alts += [f"{hit} {name}-t{h + 1}"] if h < most else []
            self.rules[f"{name}-e{h}"] = " | ".join(alts)
        for h in range(most + 1):
            alts = [f'"," space {name}-e{h}'] if h in open_ else []
            self.rules[f"{name}-t{h}"] = " | ".join(alts + (['""'] if h >= least else []))
        return f"({name}-e0)" if least else f"({name}-e0)?"

    def tuple(self, schema: Mapping[str, Any], name: str) -> str:
        """The prefix in full, then the rest's items, if any may follow."""
        items = [self.rule(s, f"{name}-{i}") for i, s in enumerate(schema["prefixItems"])]
        head = ' "," space '.join(items)
        if "items" not in schema:
            return f'"[" space {head} "]" space'
        rest = self.rule(schema["items"], f"{name}-rest")
        least = max(schema.get("minItems", 0) - len(items), 0)
        most = schema["maxItems"] - len(items) if "maxItems" in schema else None
        if not items:
            return f'"[" space {_repeat(self.rules, name, rest, chr(34) + "," + chr(34) + " space", least, most)} "]" space'
        tail = counted(self.rules, f"{name}-more", f'("," space {rest})', least, most)
        return f'"[" space {head} {tail} "]" space'

    def unique(self, items: Mapping[str, Any], name: str, least: int, most: int | None) -> str:
        """Values of `items` (a `const` or `enum`), each at most once, in the list's order: a rule
        per (last value written, values written so far, counted up to what the bounds need)."""
        values = [items["const"]] if "const" in items else list(items["enum"])
        texts = [_literal(json.dumps(v, ensure_ascii=False)) + " space" for v in values]
        most = len(values) if most is None else min(most, len(values))
        cap = most if most < len(values) else least

        def fits(j: int, n: int) -> bool:  # value j as the n-th item, with enough values left after it
            return n <= most and n + len(values) - 1 - j >= least

        def after(i: int, n: int) -> str:
            rule = f"{name}-u{i}-{min(n, cap)}"
            if rule not in self.rules:
                alts = [f'"," space {texts[j]} {after(j, n + 1)}' for j in range(i + 1, len(values)) if fits(j, n + 1)]
                self.rules[rule] = " | ".join(alts + (['""'] if n >= least else []))
            return rule

        first = [f"{texts[j]} {after(j, 1)}" for j in range(len(values)) if fits(j, 1)]
        return f"({' | '.join(first + ([chr(34) * 2] if not least else []))})"

    def object(self, schema: Mapping[str, Any], name: str) -> str:
        least, most = schema.get("minProperties", 0), schema.get("maxProperties")
        if "x-pairs" in schema:  # kinds of free keys, each with its values
            kinds = [
                f'{self.rule(k, f"{name}-k{i}")} ":" space {self.rule(v, f"{name}-v{i}")}'
                for i, (k, v) in enumerate(schema["x-pairs"])
            ]
            self.rules[f"{name}-kv"] = " | ".join(kinds)
            pairs = _repeat(self.rules, name, f"{name}-kv", chr(34) + "," + chr(34) + " space", least, most)
            return f'"{{" space {pairs} "}}" space'
        if "properties" not in schema:
            if "additionalProperties" not in schema:
                return self.base("object")
            keys = schema.get("x-keys")
            key = self.rule(keys, f"{name}-key") if keys else self.base("string")
            value = self.rule(schema["additionalProperties"], f"{name}-value")
            self.rules[f"{name}-kv"] = f'{key} ":" space {value}'
            pairs = _repeat(self.rules, name, f"{name}-kv", chr(34) + "," + chr(34) + " space", least, most)
            return f'"{{" space {pairs} "}}" space'
        properties: Mapping[str, Any] = schema["properties"]
        required = [n for n in properties if n in schema["required"]]
        optional = [n for n in properties if n not in schema["required"]]
        written = {
            n: f'{_literal(json.dumps(n, ensure_ascii=False))} space ":" space {self.rule(properties[n], f"{name}-{n}")}'
            for n in properties
        }
        head = ' "," space '.join(written[n] for n in required)
        tail = self.optional([written[n] for n in optional], name, len(required), least, most)
        return f'"{{" space {head} {tail} "}}" space'

    def optional(self, pairs: list[str], name: str, count: int, least: int, most: int | None) -> str:
        """The optional properties after `count` required ones, in order, any of them left out,
        so that `least` to `most` properties are written in all: a rule per (property, count so far)."""
        if most is not None and most >= count + len(pairs):
            most = None  # no more properties than there are
        cap = max(least, 1) if most is None else most
        made: dict[tuple[int, int], str | None] = {}

        def state(i: int, n: int) -> str | None:
            n = min(n, cap)
            if (i, n) in made:
                return made[(i, n)]
            if i == len(pairs):
                made[(i, n)] = '""' if n >= least and (most is None or n <= most) else None
                return made[(i, n)]
            alts = []
            skip = state(i + 1, n)
            if skip is not None:
                alts.append(skip)
            take = state(i + 1, n + 1) if most is None or n < most else None
            if take is not None:
                alts.append(f"{'' if not n else chr(34) + ',' + chr(34) + ' space '}{pairs[i]} {take}")
            rule = f"{name}-o{i}-{n}"
            made[(i, n)] = rule if alts else None
            if alts:
                self.rules[rule] = " | ".join(alts)
            return made[(i, n)]

        first = state(0, count)
        if first is None:
            raise ValueError("no set of properties fits the object's size limits")
        return first


def _rules(text: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in text.splitlines())
