"""docs/api.md, the reference of the public Python surface, is written from the code by this module,
and its test fails when the page and the code differ. After changing a public name, a signature, a
field or a docstring, write the page again:

    .venv/bin/python tests/test_static/test_api_reference.py

It covers what `asgi_llm`, `asgi_llm.contrib.django` and `asgi_llm.contrib.litestar` export
(`__all__`), read from the objects an import gives and from their source, so the page does not
depend on which module a name lives in. No MkDocs plugin: the manual builds offline, as fast as before.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "api.md"
COMMAND = ".venv/bin/python tests/test_static/test_api_reference.py"
WIDTH = 80

# (heading, module, the manual's page about it, its names in order); a name a module exports that no
# section lists goes to that module's last section, so the page always shows every export.
SECTIONS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    (
        "The app",
        "asgi_llm",
        "[Starlette and FastAPI](hosts/starlette-fastapi.md), [your own middleware](keys-and-limits.md#your-own-middleware)",
        ("LLMApp", "default_middleware", "ModelPool"),
    ),
    (
        "Settings",
        "asgi_llm",
        "[Configuration](configuration.md), [keys and limits](keys-and-limits.md#options)",
        ("Settings", "ModelConfig", "LimitsConfig", "ApiKeyConfig"),
    ),
    (
        "Your own key check",
        "asgi_llm",
        "[Your own key check](keys-and-limits.md#your-own-key-check)",
        ("KeyInfo", "Limits"),
    ),
    (
        "The in-process client",
        "asgi_llm",
        "[From your own code](in-process.md)",
        ("Client", "ChatStream", "ChatResult", "Completion", "Embeddings", "ToolCall"),
    ),
    ("Django: `asgi_llm.contrib.django`", "asgi_llm.contrib.django", "[Django](hosts/django.md)", ()),
    ("Litestar: `asgi_llm.contrib.litestar`", "asgi_llm.contrib.litestar", "[Litestar](hosts/litestar.md)", ()),
)

INTRO = f"""# API reference

The public Python surface: what `asgi_llm`, `asgi_llm.contrib.django` and `asgi_llm.contrib.litestar`
export, with signatures, fields and docstrings as the code has them. Each section links the manual's
page on its use; every option's meaning is in [Configuration](configuration.md).

<!-- Written from the code by tests/test_static/test_api_reference.py, whose test fails when this
page and the code differ; do not edit by hand. After changing the public surface: {COMMAND} -->
"""


def render() -> str:
    parts = [INTRO]
    for i, (heading, module_name, manual, names) in enumerate(SECTIONS):
        module = importlib.import_module(module_name)
        parts.append(f"## {heading}\n\nManual: {manual}.\n")
        if not names and module.__doc__:
            parts.append(inspect.cleandoc(module.__doc__) + "\n")
        last = all(later[1] != module_name for later in SECTIONS[i + 1 :])
        for name in (*names, *(_unplaced(module_name, module.__all__) if last else ())):
            parts.append(_entry(module_name, name, getattr(module, name)))
    return "\n".join(parts)


def _unplaced(module_name: str, exported: list[str]) -> list[str]:
    """The module's exports no section lists."""
    placed = {name for section in SECTIONS if section[1] == module_name for name in section[3]}
    return [name for name in exported if name not in placed]


def _entry(module_name: str, name: str, obj: Any) -> str:
    source = _node(obj)
    code = [f"from {module_name} import {name}", ""]
    if isinstance(source, ast.ClassDef):
        code += [f"@{ast.unparse(d)}" for d in source.decorator_list]
        bases = ", ".join(ast.unparse(b) for b in source.bases)
        code.append(f"class {name}({bases}):" if bases else f"class {name}:")
        code += [textwrap.indent(line, "    ") if line else "" for line in _class_body(obj, source)] or ["    ..."]
    else:
        assert isinstance(source, (ast.FunctionDef, ast.AsyncFunctionDef))
        code.append(_signature(source, method=False))
    text = [f"### `{name}`\n", "```python", *code, "```\n"]
    doc = ast.get_docstring(source)  # as written: a dataclass without one gets a made-up `__doc__`
    if doc:
        text.append(doc + "\n")
    if isinstance(source, ast.ClassDef):
        text += [_member(name, node) for node in _members(obj)]
    return "\n".join(text)


def _node(obj: Any) -> ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(obj))))
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    return node


def _own_classes(cls: type) -> Iterator[type]:
    """`cls` and its bases written in this package, most basic first (so members read in order)."""
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("asgi_llm") and klass is not object:
            yield klass


def _class_body(cls: type, node: ast.ClassDef) -> list[str]:
    """Its fields (a dataclass or a pydantic model), else its constructor's signature."""
    if issubclass(cls, BaseModel) or dataclasses.is_dataclass(cls):
        return [line for klass in _own_classes(cls) for line in _fields(klass, _node(klass))]
    init = next((n for k in reversed(list(_own_classes(cls))) for n in _node(k).body if _named(n, "__init__")), None)
    return [_signature(init, method=True, keep_self=True)] if init is not None else []


def _named(node: ast.stmt, name: str) -> bool:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name


def _fields(cls: type, node: ast.ClassDef) -> Iterator[str]:
    body = node.body
    for i, stmt in enumerate(body):
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name = stmt.target.id
        if name == "model_config" or ast.unparse(stmt.annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        following = body[i + 1] if i + 1 < len(body) else None
        said = following.value.value if _is_docstring(following) else None  # type: ignore[union-attr]
        default, note, bounds = _default(cls, name, stmt)
        for line in textwrap.wrap(note or said or "", WIDTH, break_on_hyphens=False):
            yield f"# {line}"
        line = f"{name}: {ast.unparse(stmt.annotation)}" + (f" = {default}" if default is not None else "")
        yield line + (f"  # {bounds}" if bounds else "")


def _is_docstring(stmt: ast.stmt | None) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _default(cls: type, name: str, stmt: ast.AnnAssign) -> tuple[str | None, str | None, str]:
    """A field's default (its value where plainly written, else its source), description and bounds."""
    if issubclass(cls, BaseModel):
        info = cls.model_fields[name]
        bounds = ", ".join(_bound(m) for m in info.metadata if _bound(m))
        if info.default_factory is not None:
            return f"{getattr(info.default_factory, '__name__', 'factory')}()", info.description, bounds
        if info.default is PydanticUndefined:
            return None, info.description, bounds
        return _literal(info.default, stmt.value), info.description, bounds
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return f"{getattr(field.default_factory, '__name__', 'factory')}()", None, ""
    if field.default is dataclasses.MISSING:
        return None, None, ""
    return _literal(field.default, stmt.value), None, ""


def _bound(metadata: Any) -> str:
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=", "pattern": "matches"}
    return ", ".join(f"{sign} {getattr(metadata, key)!r}" for key, sign in signs.items() if hasattr(metadata, key))


def _literal(value: Any, written: ast.expr | None) -> str:
    """`value` as Python where it is a plain constant (a computed number shows its result), else
    the expression that makes it, as written."""
    if _plain(value):
        return repr(value)
    if isinstance(written, ast.Call) and ast.unparse(written.func) in ("Field", "field"):
        given = [kw.value for kw in written.keywords if kw.arg == "default"] or written.args[:1]
        written = given[0] if given else written
    return ast.unparse(written) if written is not None else "..."


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    return isinstance(value, tuple | frozenset) and all(_plain(v) for v in value) and isinstance(value, tuple)


def _members(cls: type) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Public methods and properties, in source order (a setter after its property is left out)."""
    seen: set[str] = set()
    for klass in _own_classes(cls):
        for node in _node(klass).body:
            public = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_")
            if public and node.name not in seen:
                seen.add(node.name)
                yield node


def _member(owner: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    code = [f"@{ast.unparse(d)}" for d in node.decorator_list] + [_signature(node, method=True)]
    text = [f"#### `{owner}.{node.name}`\n", "```python", *code, "```\n"]
    doc = ast.get_docstring(node)
    if doc:
        text.append(doc + "\n")
    return "\n".join(text)


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool, keep_self: bool = False) -> str:
    """`def name(...) -> ...: ...` as written (a body of `...`, so that the snippet compiles, as
    every Python snippet of the manual must), one parameter a line when it is long; a method's
    `self` or `cls` left out unless `keep_self` (a constructor shown inside its class)."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [_param(a, d) for a, d in zip(positional, defaults, strict=True)]
    if args.posonlyargs:
        params.insert(len(args.posonlyargs), "/")
    if args.vararg is not None:
        params.append("*" + _param(args.vararg, None))
    elif args.kwonlyargs:
        params.append("*")
    params += [_param(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    if args.kwarg is not None:
        params.append("**" + _param(args.kwarg, None))
    if method and not keep_self and positional:
        params = params[1:]
    keyword = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    line = f"{keyword} {node.name}({', '.join(params)}){returns}: ..."
    if len(line) <= WIDTH - (4 if keep_self else 0):
        return line
    return f"{keyword} {node.name}(\n" + "".join(f"    {p},\n" for p in params) + f"){returns}: ..."


def _param(arg: ast.arg, default: ast.expr | None) -> str:
    text = arg.arg + (f": {ast.unparse(arg.annotation)}" if arg.annotation is not None else "")
    if default is not None:
        text += (" = " if arg.annotation is not None else "=") + ast.unparse(default)
    return text


def test_the_api_reference_is_current() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), f"docs/api.md differs from the code: run {COMMAND}"


def test_every_section_names_exports() -> None:
    for heading, module_name, _, names in SECTIONS:
        exported = set(importlib.import_module(module_name).__all__)
        assert set(names) <= exported, f"{heading}: {sorted(set(names) - exported)} no longer exported"


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
