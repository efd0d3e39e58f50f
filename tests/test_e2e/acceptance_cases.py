"""The acceptance cases for forced tool calls and structured output, as data.

`TOOL_CASES`: varied tool sets (nested objects, arrays, enums, integers, numbers, booleans,
optional fields, one to three tools), each with a prompt and a tool choice, "required" or a
tool's name. `SCHEMA_CASES`: varied JSON schemas, each with a prompt. Every schema uses only
what decoding enforces, and bounds its strings and arrays, so a document always fits within
`max_tokens` (`max_chars` bounds its length in bytes; a token is at least one byte).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SCHEMA_CASES", "TOOL_CASES", "SchemaCase", "Tool", "ToolCase", "example", "max_chars"]

Schema = dict[str, Any]
TOKEN_CAP = 1024  # no case may need more: prompt and output must fit the test model's context


def text(most: int, least: int = 0) -> Schema:
    return {"type": "string", "maxLength": most, **({"minLength": least} if least else {})}


def enum(*values: Any) -> Schema:
    return {"enum": list(values)}


def array(items: Schema, most: int, least: int = 0) -> Schema:
    return {"type": "array", "items": items, "minItems": least, "maxItems": most}


def obj(required: Mapping[str, Any], optional: Mapping[str, Any] | None = None, *, closed: bool = True) -> Schema:
    schema: Schema = {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required)}
    if closed:
        schema["additionalProperties"] = False
    return schema


INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
DATE: Schema = {"type": "string", "format": "date"}
WEEKDAY = enum("mon", "tue", "wed", "thu", "fri", "sat", "sun")
POINT = obj({"lat": NUM, "lon": NUM})


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Schema
    prompts: tuple[str, ...]


TOOLS: tuple[Tool, ...] = (
    Tool(
        "get_weather",
        "Current weather in a city",
        obj({"city": text(20), "unit": enum("celsius", "fahrenheit")}),
        ("What is the weather in Paris?", "Is it cold in Oslo today, in fahrenheit?", "Weather for Lima please."),
    ),
    Tool(
        "get_time",
        "Current time in an IANA timezone",
        obj({"timezone": text(24)}),
        ("What time is it in Tokyo?", "Tell me the time in New York.", "Current time in Berlin?"),
    ),
    Tool(
        "book_flight",
        "Book a flight for one passenger",
        obj(
            {
                "origin": text(3, 3),
                "destination": text(3, 3),
                "date": DATE,
                "passenger": obj({"name": text(16), "age": INT}),
            },
            {"seat": enum("aisle", "window", "middle")},
        ),
        (
            "Book me a flight from JFK to LHR on 2025-03-14, I'm Ann, 34.",
            "Fly Bob (age 50) from CDG to NRT.",
            "A window seat to SFO from BOS on 2025-07-01 for Li, 8.",
        ),
    ),
    Tool(
        "create_event",
        "Add an event to the calendar",
        obj(
            {"title": text(24), "duration_minutes": INT, "all_day": BOOL},
            {"attendees": array(text(12), 3), "location": text(16)},
        ),
        (
            "Schedule a 30 minute standup with Ana and Raj.",
            "Add a full-day offsite to my calendar.",
            "Lunch with Sam at Nopa for an hour.",
        ),
    ),
    Tool(
        "search_products",
        "Search the shop's catalog",
        obj(
            {
                "query": text(20),
                "filters": obj(
                    {"max_price": NUM, "categories": array(enum("books", "games", "music", "toys"), 2, 1)},
                    {"in_stock": BOOL},
                ),
            }
        ),
        (
            "Find board games under 30 dollars.",
            "Search for jazz records that are in stock.",
            "Cheapest toys and books, max 15.",
        ),
    ),
    Tool(
        "send_email",
        "Send an email",
        obj(
            {"to": array(text(24), 2, 1), "subject": text(24), "body": text(40)},
            {"priority": enum("low", "normal", "high")},
        ),
        ("Email bob@example.com that the meeting moved to 3pm.", "Send an urgent note to the team: server down."),
    ),
    Tool(
        "convert_currency",
        "Convert an amount between currencies",
        obj({"amount": NUM, "from": enum("USD", "EUR", "GBP", "JPY"), "to": enum("USD", "EUR", "GBP", "JPY")}),
        ("How much is 120 dollars in euros?", "Convert 5000 yen to pounds.", "EUR 42.50 in USD?"),
    ),
    Tool(
        "set_thermostat",
        "Set the thermostat",
        obj({"temperature": INT, "mode": enum("heat", "cool", "auto", "off")}),
        ("Set the heating to 21 degrees.", "Cool the house down to 19.", "Turn the thermostat off."),
    ),
    Tool(
        "add_todo",
        "Add an item to the to-do list",
        obj({"title": text(24), "priority": enum(1, 2, 3)}, {"due": DATE, "tags": array(text(10), 3)}),
        ("Remind me to buy milk tomorrow, low priority.", "Add 'file taxes' as top priority, due 2025-04-15."),
    ),
    Tool(
        "create_user",
        "Create a user account",
        obj(
            {
                "name": text(16),
                "age": INT,
                "address": obj({"street": text(20), "city": text(16)}, {"zip": text(8)}),
            },
            {"admin": BOOL},
        ),
        (
            "Create an account for Maria, 29, living at 5 Elm St, Austin.",
            "Sign up Tom, 41, from 10 Main St, Leeds.",
            "New admin: Kim, 35, 2 Rue Cler, Paris 75007.",
        ),
    ),
    Tool(
        "order_pizza",
        "Order pizza for delivery",
        obj(
            {
                "size": enum("small", "medium", "large"),
                "toppings": array(enum("cheese", "ham", "mushroom", "olive", "pepper"), 3),
                "quantity": INT,
            },
            {"extra_cheese": BOOL},
        ),
        (
            "Two large pizzas with ham and mushrooms.",
            "One small pizza, olives only, extra cheese.",
            "Three medium pizzas, no toppings.",
        ),
    ),
    Tool(
        "translate",
        "Translate a short text",
        obj({"text": text(32), "target": enum("fr", "de", "es", "it", "ja")}),
        (
            "Translate 'good morning' into German.",
            "How do you say 'thank you' in Japanese?",
            "Spanish for 'where is the station'?",
        ),
    ),
    Tool(
        "play_music",
        "Play music",
        obj({"artist": text(20)}, {"shuffle": BOOL, "volume": INT}),
        ("Play some Miles Davis.", "Put on Queen, shuffled, volume 7."),
    ),
    Tool(
        "get_stock_price",
        "Latest price of a stock",
        obj({"symbol": text(5, 1)}, {"exchange": enum("NYSE", "NASDAQ", "LSE")}),
        ("What's Apple trading at?", "Price of MSFT on NASDAQ?"),
    ),
    Tool(
        "plan_route",
        "Plan a route through waypoints",
        obj({"waypoints": array(POINT, 3, 2), "mode": enum("car", "bike", "walk")}),
        ("Route by bike from (48.85, 2.35) to (48.86, 2.29).", "Walking route between two points in Rome."),
    ),
    Tool(
        "log_workout",
        "Log a gym workout",
        obj(
            {
                "exercise": enum("squat", "bench", "deadlift", "row"),
                "sets": array(obj({"reps": INT, "weight_kg": NUM}), 3, 1),
            },
            {"notes": text(24)},
        ),
        (
            "Log 3 sets of 5 squats at 100 kg.",
            "I did bench press: 8 reps at 60kg, then 6 at 70kg.",
            "Deadlifts today, one set of 3 at 140.",
        ),
    ),
    Tool(
        "rate_movie",
        "Rate a movie",
        obj({"title": text(24), "stars": enum(1, 2, 3, 4, 5)}, {"review": {"anyOf": [text(32), {"type": "null"}]}}),
        ("Give Inception five stars.", "Rate Cats 1 star: 'a mess'."),
    ),
    Tool(
        "set_alarm",
        "Set a repeating alarm",
        obj({"hour": INT, "minute": INT, "days": array(WEEKDAY, 7, 1)}, {"label": text(16)}),
        (
            "Wake me at 6:30 on weekdays.",
            "Alarm at 9 on Saturday and Sunday, label 'gym'.",
            "Set an alarm for 7:15 every day.",
        ),
    ),
    Tool(
        "lookup_word",
        "Look a word up in the dictionary",
        obj({"word": text(16)}, {"include_examples": BOOL, "language": {"const": "en"}}),
        ("What does 'ephemeral' mean?", "Define serendipity, with examples."),
    ),
    Tool(
        "create_invoice",
        "Create an invoice",
        {
            "$defs": {"line": obj({"item": text(16), "qty": INT, "price": NUM})},
            "type": "object",
            "properties": {
                "customer": text(20),
                "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 1, "maxItems": 2},
                "currency": enum("USD", "EUR"),
                "paid": BOOL,
            },
            "required": ["customer", "lines", "currency"],
        },
        ("Invoice Acme for 3 widgets at 9.99 USD.", "Bill Globex 2 hours of consulting at 150 EUR, already paid."),
    ),
    Tool(
        "reply_ticket",
        "Reply to a support ticket",
        obj(
            {
                "ticket_id": INT,
                "status": enum("open", "pending", "closed"),
                "reply": text(40),
            },
            {"assignee": {"type": ["string", "null"], "maxLength": 12}},
        ),
        (
            "Close ticket 4521 and tell the customer it is fixed.",
            "Ticket 88: ask for a screenshot, keep it open.",
            "Mark ticket 12 pending and assign it to Lee.",
        ),
    ),
    Tool(
        "no_arguments_ping",
        "Check that the service is up",
        {"type": "object", "properties": {}},
        ("Is the service up?", "Ping the server."),
    ),
)


@dataclass(frozen=True)
class ToolCase:
    id: str
    prompt: str
    tools: tuple[Tool, ...]
    choice: str  # "required" or the name of one of `tools`

    @property
    def schemas(self) -> dict[str, Schema]:
        return {tool.name: tool.parameters for tool in self.tools}

    @property
    def max_tokens(self) -> int:
        """Room for the longest call any of the tools allows, written in ASCII."""
        longest = max(max_chars(tool.parameters) + len(tool.name) for tool in self.tools)
        return longest + len('{"name": "", "arguments": }') + 8


def _tool_cases() -> tuple[ToolCase, ...]:
    """Each tool's prompts, beside zero to two other tools; the choice alternates required/named."""
    cases = []
    for t, tool in enumerate(TOOLS):
        for p, prompt in enumerate(tool.prompts):
            k = len(cases)
            others = tuple(TOOLS[(t + 1 + 7 * j + p) % len(TOOLS)] for j in range(k % 3))
            tools = (tool, *others) if k % 4 < 2 else (*others, tool)  # the wanted tool is not always first
            choice = tool.name if k % 2 else "required"
            cases.append(ToolCase(f"tools{k:02d}-{tool.name}-{choice}", prompt, tools, choice))
    return tuple(cases)


@dataclass(frozen=True)
class SchemaCase:
    id: str
    prompt: str
    schema: Schema

    @property
    def max_tokens(self) -> int:
        return max_chars(self.schema) + 8


PERSON = obj({"name": text(16), "age": INT})
_SCHEMAS: tuple[tuple[str, str, Schema], ...] = (
    ("person", "Describe a person as JSON.", PERSON),
    (
        "city",
        "Name a big city, its country and population in millions.",
        obj({"city": text(16), "country": text(16), "population_millions": INT}),
    ),
    ("color-enum", "Pick a primary color.", enum("red", "green", "blue")),
    ("number-root", "What is pi, roughly?", NUM),
    ("integer-root", "How many legs does a spider have?", INT),
    ("boolean-root", "Is the sky blue?", BOOL),
    ("short-string-root", "Say hello.", text(12)),
    ("string-array", "List three fruits.", array(text(10), 3, 1)),
    ("integer-array", "Give me the first five primes.", array(INT, 5, 1)),
    ("tuple", "A point as [x, y, label].", {"type": "array", "prefixItems": [NUM, NUM, text(8)], "items": False}),
    (
        "nested-address",
        "A customer with an address.",
        obj({"name": text(16), "address": obj({"street": text(20), "city": text(16), "zip": text(8)})}),
    ),
    (
        "optional-fields",
        "A product, with a discount if it has one.",
        obj({"name": text(16), "price": NUM}, {"discount": NUM, "tags": array(text(8), 2)}),
    ),
    (
        "nullable-anyof",
        "A book and its subtitle, if any.",
        obj({"title": text(20), "subtitle": {"anyOf": [text(20), {"type": "null"}]}}),
    ),
    (
        "type-list",
        "A pet's name and optional nickname.",
        obj({"name": text(12), "nickname": {"type": ["string", "null"], "maxLength": 12}}),
    ),
    ("const", "A v1 API status.", obj({"version": {"const": 1}, "ok": BOOL})),
    ("mixed-enum", "Rate this on a scale, or say n/a.", obj({"score": enum(1, 2, 3, "n/a", None)})),
    (
        "defs-ref",
        "A line segment between two points.",
        {
            "$defs": {"p": obj({"x": INT, "y": INT})},
            "type": "object",
            "properties": {"start": {"$ref": "#/$defs/p"}, "end": {"$ref": "#/$defs/p"}},
            "required": ["start", "end"],
        },
    ),
    (
        "definitions-draft7",
        "A rectangle's width and height.",
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"len": {"type": "integer"}},
            "type": "object",
            "properties": {"width": {"$ref": "#/definitions/len"}, "height": {"$ref": "#/definitions/len"}},
            "required": ["width", "height"],
        },
    ),
    (
        "allof-merge",
        "An employee with an id.",
        {"allOf": [{"type": "object", "properties": {"name": text(16), "id": INT}}, {"required": ["name", "id"]}]},
    ),
    (
        "oneof-shapes",
        "A circle or a square.",
        {"oneOf": [obj({"kind": {"const": "circle"}, "radius": NUM}), obj({"kind": {"const": "square"}, "side": NUM})]},
    ),
    ("anyof-root", "Either a count or a word.", {"anyOf": [INT, text(10)]}),
    ("date-format", "When did the Berlin Wall fall?", obj({"event": text(20), "date": DATE})),
    ("time-format", "What time does the shop open?", obj({"opens": {"type": "string", "format": "time"}})),
    ("date-time", "When is the launch?", obj({"launch": {"type": "string", "format": "date-time"}})),
    ("uuid", "Make up an order id.", obj({"order_id": {"type": "string", "format": "uuid"}})),
    ("matrix", "A 2 by 2 identity matrix.", array(array(INT, 2, 2), 2, 2)),
    (
        "array-of-objects",
        "Two students and their grades.",
        array(obj({"name": text(10), "grade": enum("A", "B", "C", "D", "F")}), 2, 1),
    ),
    (
        "deep-nesting",
        "An org chart: a company, a team, a lead.",
        obj({"company": obj({"team": obj({"lead": obj({"name": text(12), "level": INT})})})}),
    ),
    ("boolean-flags", "Feature flags for a beta release.", obj({"dark_mode": BOOL, "beta": BOOL, "telemetry": BOOL})),
    ("numbers", "A location: latitude, longitude, altitude.", obj({"lat": NUM, "lon": NUM, "alt_m": NUM})),
    ("min-length", "A password of at least 8 characters.", obj({"password": text(12, 8)})),
    ("fixed-length", "A 3-letter airport code.", obj({"iata": text(3, 3)})),
    (
        "empty-object-closed",
        "Reply with an empty object.",
        {"type": "object", "properties": {}, "additionalProperties": False},
    ),
    ("word-counts", "Word counts for a short sentence.", obj({"counts": array(obj({"word": text(8), "n": INT}), 3)})),
    (
        "titles-descriptions",
        "A movie with its year.",
        {
            "title": "Movie",
            "description": "A film",
            "type": "object",
            "properties": {
                "title": {"title": "Title", "description": "Its name", "type": "string", "maxLength": 20},
                "year": {"title": "Year", "type": "integer", "description": "Release year"},
            },
            "required": ["title", "year"],
        },
    ),
    (
        "pydantic-like",
        "A city and its continent.",
        {
            "properties": {
                "city": {"maxLength": 16, "title": "City", "type": "string"},
                "continent": {
                    "enum": ["Africa", "America", "Asia", "Europe", "Oceania"],
                    "title": "Continent",
                    "type": "string",
                },
            },
            "required": ["city", "continent"],
            "title": "Place",
            "type": "object",
            "additionalProperties": False,
        },
    ),
    ("enum-array", "Which days are weekend days?", obj({"days": array(WEEKDAY, 3, 1)})),
    (
        "nested-arrays-of-objects",
        "A recipe with ingredients.",
        obj({"recipe": text(16), "ingredients": array(obj({"name": text(10), "grams": INT}), 3, 1)}),
    ),
    (
        "status-union",
        "The result of a job: ok with a count, or an error.",
        {
            "anyOf": [
                obj({"status": {"const": "ok"}, "count": INT}),
                obj({"status": {"const": "error"}, "message": text(20)}),
            ]
        },
    ),
    (
        "optional-only",
        "Any settings you like, all optional.",
        obj({}, {"theme": enum("light", "dark"), "font_size": INT, "compact": BOOL}),
    ),
    ("null-root", "Reply with null.", {"type": "null"}),
    ("bounded-array-exact", "Three coin flips.", array(enum("heads", "tails"), 3, 3)),
    (
        "rgb",
        "An RGB color as three integers in a tuple.",
        {"type": "array", "prefixItems": [INT, INT, INT], "minItems": 3, "maxItems": 3, "items": False},
    ),
    (
        "harmless-keywords",
        "A unique list of tags.",
        {"type": "array", "items": text(8), "maxItems": 3, "uniqueItems": False},
    ),
    (
        "ref-to-enum",
        "A traffic light state.",
        {
            "$defs": {"light": enum("red", "amber", "green")},
            "type": "object",
            "properties": {"now": {"$ref": "#/$defs/light"}, "next": {"$ref": "#/$defs/light"}},
            "required": ["now", "next"],
        },
    ),
    (
        "numbers-and-integers",
        "A bank transfer.",
        obj({"amount": NUM, "cents": INT, "account": text(10)}, {"reference": text(16)}),
    ),
    (
        "weather-report",
        "Today's weather in Paris.",
        obj({"city": text(16), "temp_c": NUM, "conditions": enum("sunny", "cloudy", "rain", "snow"), "wind_kph": INT}),
    ),
    (
        "contact-card",
        "A contact card for Jane.",
        obj(
            {
                "name": text(16),
                "phones": array(obj({"kind": enum("home", "work", "mobile"), "number": text(14)}), 2, 1),
            },
            {"email": text(24)},
        ),
    ),
    (
        "quiz",
        "A quiz question with choices.",
        obj({"question": text(32), "choices": array(text(12), 4, 2), "answer": INT}),
    ),
    (
        "event",
        "A concert event.",
        obj({"name": text(20), "date": DATE, "venue": obj({"name": text(16), "capacity": INT}), "sold_out": BOOL}),
    ),
    (
        "inventory",
        "Stock levels for two items.",
        obj({"items": array(obj({"sku": text(8), "count": INT, "reorder": BOOL}), 2, 1)}),
    ),
    (
        "translation",
        "Translate 'cat' into French and Spanish.",
        obj({"word": text(10), "translations": obj({"fr": text(10), "es": text(10)})}),
    ),
)
SCHEMA_CASES: tuple[SchemaCase, ...] = tuple(
    SchemaCase(f"schema{k:02d}-{name}", prompt, schema) for k, (name, prompt, schema) in enumerate(_SCHEMAS)
)
TOOL_CASES = _tool_cases()

_CHAR = 6  # the most a character can take: `\\uXXXX`, or four bytes of UTF-8 (a token is at least one byte)
_FIXED = {"date": 10, "time": 24, "date-time": 35, "uuid": 36}
_NUMBER = 40  # the converter's integral and fractional parts hold 16 digits each, exponents 2 (see harden)


def max_chars(schema: Any) -> int:
    """The length in bytes of the longest JSON text `schema` allows, written with one space after
    each `:` and `,` (the grammar allows one); `$ref`s resolve against `schema`."""
    return _Bound(schema).chars(schema)


class _Bound:
    def __init__(self, root: Any) -> None:
        self.root = root

    def chars(self, s: Any) -> int:
        if "$ref" in s:
            target = self.root
            for part in s["$ref"][2:].split("/"):
                target = target[part]
            return self.chars(target)
        for key in ("anyOf", "oneOf"):
            if key in s:
                return max(self.chars({**{k: v for k, v in s.items() if k != key}, **o}) for o in s[key])
        if "allOf" in s:
            return self.chars(_merged(s))
        if "enum" in s or "const" in s:
            return max(len(_dump(v)) for v in s.get("enum", [s.get("const")]))
        kinds = s.get("type", "object")
        return max(self.typed(k, s) for k in (kinds if isinstance(kinds, list) else [kinds]))

    def typed(self, kind: str, s: Schema) -> int:
        if kind == "object":
            members = [len(_dump(k)) + 2 + self.chars(v) for k, v in s.get("properties", {}).items()]
            return 2 + sum(members) + 2 * len(members) + 2
        if kind == "array":
            if "prefixItems" in s:
                elements = [self.chars(item) for item in s["prefixItems"]]
            else:
                elements = [self.chars(s["items"])] * s["maxItems"]
            return 2 + sum(elements) + 2 * len(elements) + 2
        if kind == "string":
            return 2 + (_FIXED[s["format"]] if "format" in s else _CHAR * s["maxLength"])
        return {"integer": 17, "number": _NUMBER, "boolean": 5, "null": 4}[kind]


def _merged(schema: Schema) -> Schema:
    """An `allOf` as one schema (the cases' parts share no keyword but these)."""
    merged: Schema = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        merged = {
            **merged,
            **part,
            "properties": {**merged.get("properties", {}), **part.get("properties", {})},
            "required": [*merged.get("required", []), *part.get("required", [])],
        }
    return merged


def _dump(value: Any) -> str:
    return json.dumps(value)


def example(schema: Any, root: Any = None) -> Any:
    """A small value `schema` allows: required properties only, one element per array."""
    root = schema if root is None else root
    if "$ref" in schema:
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        return example(target, root)
    if "anyOf" in schema or "oneOf" in schema:
        return example((schema.get("anyOf") or schema["oneOf"])[0], root)
    if "allOf" in schema:
        merged = _merged(schema)
        return example(merged, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: example(properties[name], root) for name in schema.get("required", [])}
    if kind == "array":
        if "prefixItems" in schema:
            return [example(item, root) for item in schema["prefixItems"]]
        return [example(schema["items"], root)] * max(1, schema.get("minItems", 0))
    if kind == "string":
        if schema.get("format") == "date":
            return "2024-05-01"
        return "abcdefgh"[: schema.get("maxLength", 8)].ljust(schema.get("minLength", 0), "x")
    return {"integer": 2, "number": 1.5, "boolean": True, "null": None}[kind]
