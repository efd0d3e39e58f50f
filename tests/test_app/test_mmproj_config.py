"""`mmproj` (a vision model's projector) is a local model's option: an upstream reads images itself."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from asgi_llm import ModelConfig


def test_a_local_model_takes_a_projector() -> None:
    assert ModelConfig(id="v", mmproj="mmproj.gguf").mmproj == "mmproj.gguf"
    assert ModelConfig(id="t").mmproj is None


def test_an_upstream_model_is_refused_a_projector() -> None:
    with pytest.raises(ValidationError, match="mmproj is for a local model"):
        ModelConfig(id="u", base_url="http://127.0.0.1:9/v1", mmproj="mmproj.gguf")
