"""W001 ("no API keys") counts every source of keys: database keys make every request need one,
even before the first is made. Run as `manage.py check` runs it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.usefixtures("django_setup")


def check(**overrides: Any) -> str:
    """What `manage.py check` prints (warnings go to stderr), under the given settings."""
    from django.core.management import call_command
    from django.test import override_settings

    out, err = io.StringIO(), io.StringIO()
    with override_settings(**overrides):
        call_command("check", stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def test_database_keys_are_keys() -> None:
    assert "asgi_llm.W001" not in check(DEBUG=False, ASGI_LLM={"DATABASE_KEYS": True})


def test_a_keys_file_is_keys(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("team=sk-file-0123456789\n")
    assert "asgi_llm.W001" not in check(DEBUG=False, ASGI_LLM={"api_keys_file": str(keys)})


def test_without_any_keys_it_still_warns() -> None:
    printed = check(DEBUG=False, ASGI_LLM={"DATABASE_KEYS": False})
    assert "asgi_llm.W001" in printed and "no API keys" in printed
