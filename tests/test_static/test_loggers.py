"""Every logger this package logs on is one `logs.OWN_LOGGERS` names, so each gets its request-id
filter; read from the source: every `logging.getLogger(...)` under `asgi_llm`, the adapters and
the contrib packages takes a literal name, and the names found are exactly that list."""

from __future__ import annotations

import ast
from pathlib import Path

from asgi_llm.logs import OWN_LOGGERS

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (ROOT / "asgi_llm", ROOT / "adapters", ROOT / "contrib")


def _names() -> dict[str, list[str]]:
    """Each literal name passed to `getLogger`, and where; a name that is no literal is reported as such."""
    found: dict[str, list[str]] = {}
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "attr", getattr(node.func, "id", "")) == "getLogger"
                ):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    arg = node.args[0] if node.args else None
                    name = (
                        arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "<not a literal>"
                    )
                    found.setdefault(name, []).append(where)
    return found


def test_every_logger_of_ours_is_an_own_logger_and_every_own_logger_is_used() -> None:
    found = _names()
    ours = {name: at for name, at in found.items() if name == "asgi_llm" or name.startswith("asgi_llm.")}
    unnamed = found.get("<not a literal>", [])
    unnamed = [at for at in unnamed if "logs.py" not in at]  # logs.py tags each of OWN_LOGGERS by name
    assert not unnamed, f"getLogger without a literal name: {unnamed}"
    missing = {name: at for name, at in ours.items() if name not in OWN_LOGGERS}
    assert not missing, f"loggers not in logs.OWN_LOGGERS: {missing}"
    unused = set(OWN_LOGGERS) - ours.keys()
    assert not unused, f"logs.OWN_LOGGERS names loggers nothing logs on: {sorted(unused)}"
