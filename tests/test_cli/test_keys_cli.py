"""`asgi-llm keys create|list|revoke` against a SQLite file: the key printed once, never listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asgi_llm.cli import serve as cli
from asgi_llm.middleware import KeyInfo, Limits, SQLiteKeys


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.anyio
async def test_create_list_and_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "keys.sqlite3")
    code, key, err = run(
        capsys, "keys", "create", "ci", "--db", db, "--model", "default", "--limit", "requests_per_minute=60",
        "--protocol", "openai", "--expires", "2099-01-01",
    )  # fmt: skip
    key = key.strip()
    assert code == 0 and key.startswith("sk-llm-") and "not shown again" in err
    assert await SQLiteKeys(db)(key) == KeyInfo(
        "ci", models=frozenset({"default"}), protocols=frozenset({"openai"}), limits=Limits(requests_per_minute=60)
    )
    assert run(capsys, "keys", "create", "ops", "--db", db, "--operator")[0] == 0
    code, table, _ = run(capsys, "keys", "list", "--db", db)
    assert code == 0 and key not in table
    header, ci, ops = table.splitlines()
    assert header.split() == ["NAME", "STATUS", "OPERATOR", "CREATED", "EXPIRES", "MODELS", "PROTOCOLS", "LIMITS"]
    assert ci.split()[:3] == ["ci", "active", "no"] and "2099-01-01T00:00:00Z" in ci
    assert "requests_per_minute=60" in ci and ops.split()[:3] == ["ops", "active", "yes"]
    assert run(capsys, "keys", "revoke", "ci", "--db", db)[:2] == (0, "Revoked ci.\n")
    assert await SQLiteKeys(db)(key) is None
    code, lines, _ = run(capsys, "keys", "list", "--db", db, "--json")
    rows = [json.loads(line) for line in lines.splitlines()]
    assert [(r["name"], r["status"]) for r in rows] == [("ci", "revoked"), ("ops", "active")]
    assert rows[0]["limits"] == {"requests_per_minute": 60} and rows[0]["revoked"] is not None


def test_refusals_exit_non_zero_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "keys.sqlite3")
    assert run(capsys, "keys", "list", "--db", db)[::2] == (1, f"asgi-llm: no keys yet: {db} does not exist\n")
    assert not Path(db).exists()  # listing created nothing
    assert run(capsys, "keys", "create", "ci", "--db", db)[0] == 0
    again = run(capsys, "keys", "create", "ci", "--db", db)
    assert again[::2] == (2, "asgi-llm: an API key named 'ci' exists already\n")
    assert "1 to 64" in run(capsys, "keys", "create", "no spaces", "--db", db)[2]
    assert "write NAME=N" in run(capsys, "keys", "create", "x", "--db", db, "--limit", "rpm")[2]
    assert "--limit nope" in run(capsys, "keys", "create", "x", "--db", db, "--limit", "nope=1")[2]
    assert "give a date" in run(capsys, "keys", "create", "x", "--db", db, "--expires", "later")[2]
    unknown = run(capsys, "keys", "revoke", "nobody", "--db", db)
    assert unknown[::2] == (1, "asgi-llm: no API key named 'nobody' is in force\n")
    assert [k.name for k in SQLiteKeys(db).list()] == ["ci"]


def test_the_file_is_the_settings_keys_db_or_state_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state.sqlite3"
    config = tmp_path / "asgi-llm.toml"
    config.write_text(f'state_path = "{state}"\n')
    assert run(capsys, "keys", "create", "ci", "--config", str(config))[0] == 0
    assert SQLiteKeys.holds_keys(state)
    served = cli.settings_from_args(cli.build_parser().parse_args(["serve", "--config", str(config)]))
    assert served.keys_db == str(state) and served.auth_enabled  # serve picks them up
    other = tmp_path / "keys.sqlite3"
    config.write_text(f'state_path = "{state}"\nkeys_db = "{other}"\n')
    assert run(capsys, "keys", "create", "ops", "--config", str(config))[0] == 0
    assert [k.name for k in SQLiteKeys(other).list()] == ["ops"]


def test_a_state_file_that_is_not_sqlite_stops_serve_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.sqlite3"
    state.write_text("not a database, not even close " * 40)
    config = tmp_path / "asgi-llm.toml"
    config.write_text(f'state_path = "{state}"\n')
    code, _, err = run(capsys, "serve", "--config", str(config))
    assert code == 2 and "is not an SQLite file" in err and "Traceback" not in err
