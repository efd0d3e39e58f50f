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


_COMMA = '"," space'


class _Builder:
    def __init__(self, defs: Mapping[str, Form]) -> None:
        self.rules: dict[str, str] = {"space": _BASE["space"]}
        self.named: dict[Form, str] = {}
        self.defs = defs  # recursive rules' bodies, by name
        self.count = 0

    def base(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = _BASE[name]
            for used in _USES.get(name, ()):
                self.base(used)
        return name

    def rule(self, form: Form, hint: str) -> str:
        """The name of a rule for `form`, made once for equal forms."""
        if form not in self.named:
            self.count += 1
            name = f"{re.sub('[^A-Za-z0-9]+', '-', hint).strip('-')[:24] or 'r'}-{self.count}"
            self.named[form] = name
            self.rules[name] = self.body(form, name)
        return self.named[form]

    def ref(self, name: str) -> str:
        """The rule of a recursive reference, made once (its body may refer to it)."""
        rule = f"ref-{name}"
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
            return f"({' | '.join(_literal(text) for text in form.texts)}) space"
        if isinstance(form, Plain):
            return self.base(form.kind)
        if isinstance(form, Text):
            return self.string(form, name)
        if isinstance(form, Number):
            self.rules.update(_rules(gbnf_rules(form.dfa, f"{name}-n", in_string=False)))
            return f"{name}-n space"
        if isinstance(form, Closed):
            return self.closed(form, name)
        if isinstance(form, FreeKeys | KeyKinds):
            return self.free_keys(form, name)
        return f'"[" space {self.items(form, name)} "]" space'

    def string(self, form: Text, name: str) -> str:
        if form.dfa is None:
            if not form.least and form.most is None:
                return self.base("string")
            self.base("char")
            return f'"\\"" {counted(self.rules, f"{name}-c", "char", form.least, form.most)} "\\"" space'
        self.rules.update(_rules(gbnf_rules(form.dfa, f"{name}-s", in_string=True)))
        return f'"\\"" {name}-s "\\"" space'

    def items(self, form: Items | Tuple | Containing | CountedHits | Unique, name: str) -> str:
        """What an array's brackets hold."""
        if isinstance(form, Tuple):
            return self.tuple(form, name)
        if isinstance(form, Unique):
            return self.unique(form, name)
        if isinstance(form, CountedHits):
            return self.counted_hits(form, name)
        item = self.rule(form.item, f"{name}-item")
        if isinstance(form, Items):
            return _repeat(self.rules, name, item, _COMMA, form.least, form.most)
        hit = self.rule(form.hit, f"{name}-hit")
        more = f"(({_COMMA} {item})* {_COMMA} {hit}){{{form.hits - 1}}}" if form.hits > 1 else ""
        return f"({item} {_COMMA})* {hit} {more} ({_COMMA} {item})*"

    def counted_hits(self, form: CountedHits, name: str) -> str:
        """Items each a hit or a miss, `least` to `most` hits: a rule per item and hits before it
        (`e`), and per place after an item (`t`)."""
        least, most = form.least, form.most
        hit = self.rule(form.hit, f"{name}-hit")
        miss = self.rule(form.miss, f"{name}-miss") if form.miss is not None else None
        open_ = [h for h in range(most + 1) if miss or h < most]  # where another item may follow
        for h in open_:
            alts = [f"{miss} {name}-t{h}"] if miss else []
            alts += [f"{hit} {name}-t{h + 1}"] if h < most else []
            self.rules[f"{name}-e{h}"] = " | ".join(alts)
        for h in range(most + 1):
            alts = [f"{_COMMA} {name}-e{h}"] if h in open_ else []
            self.rules[f"{name}-t{h}"] = " | ".join(alts + (['""'] if h >= least else []))
        return f"({name}-e0)" if least else f"({name}-e0)?"

    def tuple(self, form: Tuple, name: str) -> str:
        """The prefix in full, then the rest's items, if any may follow."""
        items = [self.rule(s, f"{name}-{i}") for i, s in enumerate(form.prefix)]
        head = f" {_COMMA} ".join(items)
        if form.rest is None:
            return head
        rest = self.rule(form.rest, f"{name}-rest")
        least = max(form.least - len(items), 0)
        most = form.most - len(items) if form.most is not None else None
        if not items:
            return _repeat(self.rules, name, rest, _COMMA, least, most)
        return f"{head} {counted(self.rules, f'{name}-more', f'({_COMMA} {rest})', least, most)}"

    def unique(self, form: Unique, name: str) -> str:
        """Values, each at most once, in the list's order: a rule per (last value written, values
        written so far, counted up to what the bounds need)."""
        texts = [_literal(text) + " space" for text in form.values.texts]
        least, most = form.least, form.most
        cap = most if most < len(texts) else least

        def fits(j: int, n: int) -> bool:  # value j as the n-th item, with enough values left after it
            return n <= most and n + len(texts) - 1 - j >= least

        def after(i: int, n: int) -> str:
            rule = f"{name}-u{i}-{min(n, cap)}"
            if rule not in self.rules:
                alts = [f"{_COMMA} {texts[j]} {after(j, n + 1)}" for j in range(i + 1, len(texts)) if fits(j, n + 1)]
                self.rules[rule] = " | ".join(alts + (['""'] if n >= least else []))
            return rule

        first = [f"{texts[j]} {after(j, 1)}" for j in range(len(texts)) if fits(j, 1)]
        return f"({' | '.join(first + ([chr(34) * 2] if not least else []))})"

    def free_keys(self, form: FreeKeys | KeyKinds, name: str) -> str:
        """An object of free keys: of one kind (`FreeKeys`), or of several, each with its values."""
        if isinstance(form, KeyKinds):
            kinds = [
                f'{self.rule(k, f"{name}-k{i}")} ":" space {self.rule(v, f"{name}-v{i}")}'
                for i, (k, v) in enumerate(form.pairs)
            ]
            self.rules[f"{name}-kv"] = " | ".join(kinds)
        else:
            key = self.rule(form.keys, f"{name}-key") if form.keys is not None else self.base("string")
            self.rules[f"{name}-kv"] = f'{key} ":" space {self.rule(form.values, f"{name}-value")}'
        pairs = _repeat(self.rules, name, f"{name}-kv", _COMMA, form.least, form.most)
        return f'"{{" space {pairs} "}}" space'

    def closed(self, form: Closed, name: str) -> str:
        required = [n for n, _ in form.properties if n in form.required]
        optional = [n for n, _ in form.properties if n not in form.required]
        written = {
            n: f'{_literal(json.dumps(n, ensure_ascii=False))} space ":" space {self.rule(sub, f"{name}-{n}")}'
            for n, sub in form.properties
        }
        head = f" {_COMMA} ".join(written[n] for n in required)
        tail = self.optional([written[n] for n in optional], name, len(required), form.least, form.most)
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
