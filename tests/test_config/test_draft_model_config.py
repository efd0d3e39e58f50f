"""A draft model's settings: `speculative = "draft"` and `draft_model` come together, for a local
model only, and a draft model that cannot be read adds nothing to the estimate (its load fails
with its own error)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from asgi_llm import ModelConfig, Settings
from asgi_llm.core.memory import MemoryEstimate
from asgi_llm.pool.residency import draft_cost


@pytest.mark.parametrize("fields", [{"speculative": "draft"}, {"draft_model": "small.gguf"}])
def test_draft_mode_and_a_draft_model_go_together(fields: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match='speculative = "draft" and draft_model go together'):
        Settings(models=(ModelConfig(id="m", **fields),))  # type: ignore[arg-type]


def test_an_upstream_model_is_refused_a_draft_model() -> None:
    with pytest.raises(ValidationError, match="draft_model is for a local model"):
        ModelConfig(id="u", base_url="http://127.0.0.1:9/v1", speculative="draft", draft_model="small.gguf")


def test_a_draft_model_not_there_adds_nothing_to_the_estimate() -> None:
    config = ModelConfig(id="m", speculative="draft", draft_model="/nowhere/small.gguf")
    assert draft_cost(config, gpus=1) == MemoryEstimate()
