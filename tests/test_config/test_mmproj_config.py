"""`mmproj` (a vision model's projector) is a local model's option: an upstream reads images itself;
its file counts in the pool's estimate."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from asgi_llm import ModelConfig
from asgi_llm.pool.entry import projector_size


def test_a_local_model_takes_a_projector() -> None:
    assert ModelConfig(id="v", mmproj="mmproj.gguf").mmproj == "mmproj.gguf"
    assert ModelConfig(id="t").mmproj is None


def test_an_upstream_model_is_refused_a_projector() -> None:
    with pytest.raises(ValidationError, match="mmproj is for a local model"):
        ModelConfig(id="u", base_url="http://127.0.0.1:9/v1", mmproj="mmproj.gguf")


def test_the_projector_file_counts_in_the_estimate(tmp_path: Path) -> None:
    (projector := tmp_path / "mmproj.gguf").write_bytes(b"x" * 1000)
    assert projector_size(ModelConfig(id="v", mmproj=str(projector))) == 1000
    assert projector_size(ModelConfig(id="v", mmproj=str(tmp_path / "gone.gguf"))) == 0  # its load says so
    assert projector_size(ModelConfig(id="t")) == 0
