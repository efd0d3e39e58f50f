"""GBNF for a schema `rewrite` has prepared: every text it allows is valid JSON under the schema. Pure.

Our own converter (llama-cpp-python's drops ranges, and asserts on patterns it cannot read):
the same shapes as llama.cpp's (`root`, whitespace as `layout` places it, properties in order,
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

from .automata import gbnf_rules
from .counts import counted
from .forms import (
    Choice,
    Closed,
    Containing,
    CountedHits,
    Form,
    FreeKeys,
    Items,
    KeyKinds,
    Number,
    Plain,
    Ref,
    Rewritten,
    Text,
    Tuple,
    Unique,
    Values,
)
from .layout import Level, Members, Writer

__all__ = ["schema_gbnf"]

_BASE = {
    "space": '" "?',
    "char": '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | "u" [dD] [0-7] [0-9a-fA-F]{2})',
    "string": '"\\"" char* "\\""',
    "boolean": '("true" | "false")',
    "null": '"null"',
    "integer": '("-"? ([0] | [1-9] [0-9]{0,15}))',
    "number": '("-"? ([0] | [1-9] [0-9]{0,15})) ("." [0-9]{1,16})? ([eE] [-+]? [0-9] [0-9]?)?',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" (space string ":" space value ("," space string ":" space value)* space)? "}"',
    "array": '"[" (space value ("," space value)* space)? "]"',
}
_USES = {"char": (), "string": ("char",), "value": ("object", "array", "string", "number", "boolean", "null")}
_USES |= {"object": ("string", "value"), "array": ("value",)}


def schema_gbnf(schema: Rewritten) -> str:
    """The grammar of `schema`, its start rule `root`."""
    builder = _Builder(schema.defs)
    builder.rules["root"] = builder.body(schema.root, "root")
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


class _Builder(Writer):
    def __init__(self, defs: Mapping[str, Form]) -> None:
        super().__init__()
        self.rules: dict[str, str] = {"space": _BASE["space"]}
        self.named: dict[tuple[Form, Level], str] = {}
        self.texts: dict[str, str] = {}  # rules made for a text (`shared`), by their text
        self.defs = defs  # recursive rules' bodies, by name
        self.count = 0

    def base(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = _BASE[name]
            for used in _USES.get(name, ()):
                self.base(used)
        return name

    def rule(self, form: Form, hint: str) -> str:
        """The name of a rule for `form`, made once for equal forms at a depth (once for all
        depths where nothing in it breaks lines)."""
        key = (form, self.level if _nests(form) else None)
        if key not in self.named:
            self.count += 1
            name = _rule_name(hint, self.count)
            self.named[key] = name
            self.rules[name] = self.body(form, name)
        return self.named[key]

    def shared(self, text: str, hint: str) -> str:
        """A rule whose body is `text`, made once for equal texts (a property as two units write it)."""
        if text not in self.texts:
            self.count += 1
            self.texts[text] = _rule_name(hint, self.count)
            self.rules[self.texts[text]] = text
        return self.texts[text]

    def ref(self, name: str) -> str:
        """The rule of a recursive reference at this depth, made once (its body may refer to it)."""
        rule = f"ref-{name}" if self.level is None else f"ref{self.level}-{name}"
        if rule not in self.rules:
            self.rules[rule] = ""
            self.rules[rule] = self.body(self.defs[name], rule)
        return rule

    def body(self, form: Form, name: str) -> str:
        if isinstance(form, Ref):
            return self.ref(form.name)
        if isinstance(form, Choice):
            return " | ".join(self.rule(option, name) for option in form.options)
        if isinstance(form, Values):
            return f"({' | '.join(_literal(text) for text in form.texts)})"
        if isinstance(form, Plain):
            return self.any(form.kind) if form.kind in ("object", "array") else self.base(form.kind)
        if isinstance(form, Text):
            return self.string(form, name)
        if isinstance(form, Number):
            self.rules.update(_rules(gbnf_rules(form.dfa, f"{name}-n", in_string=False)))
            return f"{name}-n"
        inline = lambda: self.rule(form, name)  # the container as written inside an inline one
        if isinstance(form, Closed):
            return self.container("{}", name, lambda named: self.closed(form, named), inline)
        if isinstance(form, FreeKeys | KeyKinds):
            return self.container("{}", name, lambda named: self.free_keys(form, named), inline)
        return self.container("[]", name, lambda named: self.items(form, named), inline)

    def any(self, kind: str) -> str:
        """Any object or array at this depth, and any value inside it a level deeper."""
        if self.level is None:
            return self.base(kind)
        name = f"{kind}-{self.level}"
        if name not in self.rules:
            self.rules[name] = ""
            brackets = "{}" if kind == "object" else "[]"
            self.rules[name] = self.container(brackets, name, lambda _: self.free(kind), lambda: self.base(kind))
        return name

    def free(self, kind: str) -> Members:
        """The members of any object or array, in the style being written: any value a level deeper."""
        comma, colon = self.comma, self.colon
        with self.inside():
            value = self.base("value") if self.level is None else f"value-{self.level}"
            if value not in self.rules:
                self.rules[value] = ""
                self.rules[value] = f"{self.any('object')} | {self.any('array')} | string | number | boolean | null"
                for used in ("string", "number", "boolean", "null"):
                    self.base(used)
        member = f"{self.base('string')} {colon} {value}" if kind == "object" else value
        return f"{member} ({comma} {member})*", True

    def string(self, form: Text, name: str) -> str:
        if form.dfa is None:
            if not form.least and form.most is None:
                return self.base("string")
            self.base("char")
            return f'"\\"" {counted(self.rules, f"{name}-c", "char", form.least, form.most)} "\\""'
        self.rules.update(_rules(gbnf_rules(form.dfa, f"{name}-s", in_string=True)))
        return f'"\\"" {name}-s "\\""'

    def repeat(self, name: str, item: str, least: int, most: int | None) -> Members:
        """`item` `least` to `most` times, commas between."""
        if most == 0:
            return None, True
        return _repeat(self.rules, name, item, self.comma, max(least, 1), most), not least

    def items(self, form: Items | Tuple | Containing | CountedHits | Unique, name: str) -> Members:
        """What an array's brackets hold."""
        if isinstance(form, Tuple):
            return self.tuple(form, name)
        if isinstance(form, Unique):
            return self.unique(form, name)
        if isinstance(form, CountedHits):
            return self.counted_hits(form, name)
        comma = self.comma
        with self.inside():
            item = self.rule(form.item, f"{name}-item")
            hit = self.rule(form.hit, f"{name}-hit") if isinstance(form, Containing) else ""
        if isinstance(form, Items):
            return self.repeat(name, item, form.least, form.most)
        more = f"(({comma} {item})* {comma} {hit}){{{form.hits - 1}}}" if form.hits > 1 else ""
        return f"({item} {comma})* {hit} {more} ({comma} {item})*", False

    def counted_hits(self, form: CountedHits, name: str) -> Members:
        """Items each a hit or a miss, `least` to `most` hits: a rule per item and hits before it
        (`e`), and per place after an item (`t`)."""
        least, most, comma = form.least, form.most, self.comma
        with self.inside():
            hit = self.rule(form.hit, f"{name}-hit")
            miss = self.rule(form.miss, f"{name}-miss") if form.miss is not None else None
        open_ = [h for h in range(most + 1) if miss or h < most]  # where another item may follow
        for h in open_:
            alts = [f"{miss} {name}-t{h}"] if miss else []
            alts += [f"{hit} {name}-t{h + 1}"] if h < most else []
            self.rules[f"{name}-e{h}"] = " | ".join(alts)
        for h in range(most + 1):
            alts = [f"{comma} {name}-e{h}"] if h in open_ else []
            self.rules[f"{name}-t{h}"] = " | ".join(alts + (['""'] if h >= least else []))
        return f"{name}-e0", not least

    def tuple(self, form: Tuple, name: str) -> Members:
        """The prefix in full, then the rest's items, if any may follow."""
        comma = self.comma
        with self.inside():
            items = [self.rule(s, f"{name}-{i}") for i, s in enumerate(form.prefix)]
            rest = self.rule(form.rest, f"{name}-rest") if form.rest is not None else None
        head = f" {comma} ".join(items)
        if rest is None:
            return head or None, not items
        least = max(form.least - len(items), 0)
        most = form.most - len(items) if form.most is not None else None
        if not items:
            return self.repeat(name, rest, least, most)
        return f"{head} {counted(self.rules, f'{name}-more', f'({comma} {rest})', least, most)}", False

    def unique(self, form: Unique, name: str) -> Members:
        """Values, each at most once, in the list's order: a rule per (last value written, values
        written so far, counted up to what the bounds need)."""
        texts = [_literal(text) for text in form.values.texts]
        least, most, comma = form.least, form.most, self.comma
        cap = most if most < len(texts) else least

        def fits(j: int, n: int) -> bool:  # value j as the n-th item, with enough values left after it
            return n <= most and n + len(texts) - 1 - j >= least

        def after(i: int, n: int) -> str:
            rule = f"{name}-u{i}-{min(n, cap)}"
            if rule not in self.rules:
                alts = [f"{comma} {texts[j]} {after(j, n + 1)}" for j in range(i + 1, len(texts)) if fits(j, n + 1)]
                self.rules[rule] = " | ".join(alts + (['""'] if n >= least else []))
            return rule

        first = [f"{texts[j]} {after(j, 1)}" for j in range(len(texts)) if fits(j, 1)]
        return (f"({' | '.join(first)})" if first else None), not least

    def free_keys(self, form: FreeKeys | KeyKinds, name: str) -> Members:
        """An object of free keys: of one kind (`FreeKeys`), or of several, each with its values."""
        colon = self.colon
        with self.inside():
            if isinstance(form, KeyKinds):
                kinds = [
                    f"{self.rule(k, f'{name}-k{i}')} {colon} {self.rule(v, f'{name}-v{i}')}"
                    for i, (k, v) in enumerate(form.pairs)
                ]
                self.rules[f"{name}-kv"] = " | ".join(kinds)
            else:
                key = self.rule(form.keys, f"{name}-key") if form.keys is not None else self.base("string")
                self.rules[f"{name}-kv"] = f"{key} {colon} {self.rule(form.values, f'{name}-value')}"
        return self.repeat(name, f"{name}-kv", form.least, form.most)

    def closed(self, form: Closed, name: str) -> Members:
        required = [n for n, _ in form.properties if n in form.required]
        optional = [n for n, _ in form.properties if n not in form.required]
        colon = self.colon
        with self.inside():
            written = {
                n: f"{_literal(json.dumps(n, ensure_ascii=False))} {colon} {self.rule(sub, f'{name}-{n}')}"
                for n, sub in form.properties
            }
        if not required and (not optional or form.most == 0):
            return None, True
        head = f" {self.comma} ".join(written[n] for n in required)
        pairs = [self.shared(written[n], f"{name}-{n}") for n in optional]  # each in several states
        tail = self.optional(pairs, name, len(required), form.least, form.most)
        return f"{head} {tail}".strip(), not required and not form.least

    def optional(self, pairs: list[str], name: str, count: int, least: int, most: int | None) -> str:
        """The optional properties after `count` required ones, in order, any of them left out,
        so that `least` to `most` properties are written in all, at least one: a rule per
        (property, count so far)."""
        if most is not None and most >= count + len(pairs):
            most = None  # no more properties than there are
        cap = max(least, 1) if most is None else most
        made: dict[tuple[int, int], str | None] = {}

        def state(i: int, n: int) -> str | None:
            n = min(n, cap)
            if (i, n) in made:
                return made[(i, n)]
            if i == len(pairs):
                made[(i, n)] = '""' if max(least, 1) <= n and (most is None or n <= most) else None
                return made[(i, n)]
            alts = []
            skip = state(i + 1, n)
            if skip is not None:
                alts.append(skip)
            take = state(i + 1, n + 1) if most is None or n < most else None
            if take is not None:
                alts.append(f"{'' if not n else self.comma + ' '}{pairs[i]} {take}")
            rule = f"{name}-o{i}-{n}"
            made[(i, n)] = rule if alts else None
            if alts:
                self.rules[rule] = " | ".join(alts)
            return made[(i, n)]

        first = state(0, count)
        if first is None:
            raise ValueError("no set of properties fits the object's size limits")
        return first


def _nests(form: Form) -> bool:
    """Whether `form`'s text may hold a container, whose lines depend on its depth."""
    if isinstance(form, Choice):
        return any(_nests(option) for option in form.options)
    if isinstance(form, Plain):
        return form.kind in ("object", "array")
    return not isinstance(form, Values | Text | Number)


def _rule_name(hint: str, count: int) -> str:
    """A new rule's name: its hint as GBNF allows it, and a number that makes it unique."""
    return f"{re.sub('[^A-Za-z0-9]+', '-', hint).strip('-')[:24] or 'r'}-{count}"


def _rules(text: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in text.splitlines())
