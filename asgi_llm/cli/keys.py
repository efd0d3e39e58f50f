"""`asgi-llm keys create|list|revoke`: API keys for `asgi-llm serve`, kept hashed in SQLite.

The file is `--db`, else the settings' `keys_db`, else their `state_path` (by default
`asgi-llm-state.sqlite3` in the working directory) — where `asgi-llm serve` looks for them;
with `state_url` (or `ASGI_LLM_STATE_URL`) and no `--db`, the PostgreSQL database every server
shares. A running server reads the table on every request: a revoked key is refused at once.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..config import LimitsConfig, Settings
from ..middleware import Limits
from ..middleware.keyring import KeyExists, StoredKey, parse_expiry
from ..middleware.sqlite_keys import SQLiteKeys

if TYPE_CHECKING:
    from ..shared.postgres_keys import PostgresKeys

__all__ = ["add_keys_parser", "keys_db_for", "run_keys"]


def add_keys_parser(commands: Any) -> None:
    keys = commands.add_parser("keys", help="create, list or revoke API keys of asgi-llm serve")
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="store a new key and print it (only its hash is kept)")
    create.add_argument("name", help="who or what uses the key (logs, usage and metrics show this name)")
    create.add_argument("--expires", metavar="WHEN", help="2027-01-01, an ISO date and time, or 30d / 12h / 90m")
    create.add_argument("--operator", action="store_true", help="may also read /metrics (every key's usage)")
    create.add_argument("--model", dest="models", action="append", metavar="MODEL", help="allowed model (repeatable)")
    create.add_argument(
        "--protocol", dest="protocols", action="append", choices=["openai", "anthropic", "ollama"], help="repeatable"
    )
    create.add_argument(
        "--limit",
        dest="limits",
        action="append",
        default=[],
        metavar="NAME=N",
        help=f"the key's own limits (repeatable): {', '.join(LimitsConfig.model_fields)}",
    )
    actions.add_parser("list", help="list keys (never the keys themselves)").add_argument(
        "--json", action="store_true", help="one JSON object per key"
    )
    actions.add_parser("revoke", help="stop a key working, at once").add_argument("name")
    for action in actions.choices.values():
        action.add_argument("--db", metavar="FILE", help="the SQLite file (default: the settings' state_path)")
        action.add_argument("--config", metavar="FILE", help="settings file naming keys_db or state_path")


def keys_db_for(settings: Settings) -> str:
    """Where `asgi-llm keys` keeps keys for these settings."""
    return settings.keys_db or settings.state_path


def run_keys(args: argparse.Namespace) -> int:
    settings = Settings.from_file(args.config).with_env_keys() if args.config else Settings.from_env()
    path = args.db or keys_db_for(settings)
    keys: SQLiteKeys | PostgresKeys
    if settings.state_url is not None and not args.db:  # the database every server shares
        from ..shared.wiring import database_keys

        keys, where = database_keys(settings.state_url, settings.backend_timeout), "the database (state_url)"
    elif args.action != "create" and not Path(path).is_file():  # listing or revoking creates no file
        print(f"asgi-llm: no keys yet: {path} does not exist", file=sys.stderr)
        return 1
    else:
        keys = SQLiteKeys(path)
        where = keys.path
    try:
        if args.action == "create":
            key = keys.create(args.name, **_create_options(args))
            print(key)
            print(f"Stored a hash of key {args.name!r} in {where}; the key is not shown again.", file=sys.stderr)
        elif args.action == "list":
            _print_keys(keys.list(), as_json=args.json)
        elif not keys.revoke(args.name):
            print(f"asgi-llm: no API key named {args.name!r} is in force", file=sys.stderr)
            return 1
        else:
            print(f"Revoked {args.name}.")
    except (KeyExists, ValueError) as exc:
        print(f"asgi-llm: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # psycopg's OperationalError: the database did not answer
        print(f"asgi-llm: the database is unreachable ({type(exc).__name__})", file=sys.stderr)
        return 1
    return 0


def _create_options(args: argparse.Namespace) -> dict[str, Any]:
    if not re.fullmatch(r"[A-Za-z0-9_.@:-]{1,64}", args.name):
        raise ValueError("a key name is 1 to 64 letters, digits or _ . @ : -")
    limits: dict[str, str] = {}
    for entry in args.limits:
        name, sep, value = entry.partition("=")
        if not sep:
            raise ValueError(f"--limit {entry!r}: write NAME=N, e.g. requests_per_minute=60")
        limits[name.strip()] = value.strip()
    try:
        checked = LimitsConfig.model_validate(limits) if limits else None
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise ValueError(f"--limit {'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None
    return {
        "expires": parse_expiry(args.expires) if args.expires else None,
        "operator": args.operator,
        "models": tuple(args.models) if args.models else None,
        "protocols": tuple(args.protocols) if args.protocols else None,
        "limits": Limits(**checked.model_dump()) if checked is not None else None,
    }


def _print_keys(keys: list[StoredKey], *, as_json: bool) -> None:
    now = dt.datetime.now(dt.UTC)
    rows = [_described(key, now) for key in keys]
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    columns = ("name", "status", "operator", "created", "expires", "models", "protocols", "limits")
    table = [[_cell(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip())
    for cells in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip())


def _described(key: StoredKey, now: dt.datetime) -> dict[str, Any]:
    def when(value: dt.datetime | None) -> str | None:
        return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")

    return {
        "name": key.name,
        "status": key.status(now),
        "operator": key.operator,
        "created": when(key.created),
        "expires": when(key.expires),
        "revoked": when(key.revoked),
        "models": list(key.models) if key.models is not None else None,
        "protocols": list(key.protocols) if key.protocols is not None else None,
        "limits": key.limits_dict(),
    }


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    return str(value)
