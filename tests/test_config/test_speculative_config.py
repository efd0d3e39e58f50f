"""Drafting settings are read only under the `speculative` modes that use them; given under
another, each would change nothing, so it is refused by name. Defaults are no setting: a
configuration written out in full and read again stays valid."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from asgi_llm import ModelConfig
from asgi_llm.cli import serve as cli

DRAFT = {"speculative": "draft", "draft_model": "small.gguf"}


@pytest.mark.parametrize(
    ("fields", "refused", "wanted"),
    [
        ({"speculative_memory": 0}, "speculative_memory", '"ngram", and it is "off"'),
        ({**DRAFT, "speculative_memory": 1024}, "speculative_memory", '"ngram", and it is "draft"'),
        ({"speculative_ngram": 3}, "speculative_ngram", '"ngram", and it is "off"'),
        ({**DRAFT, "speculative_ngram": 6}, "speculative_ngram", '"ngram", and it is "draft"'),
        ({"speculative_draft": 4}, "speculative_draft", '"ngram" or "draft", and it is "off"'),
    ],
)
def test_a_drafting_setting_its_mode_does_not_read_is_refused(
    fields: dict[str, Any], refused: str, wanted: str
) -> None:
    with pytest.raises(ValidationError, match=f"{refused} is read only with speculative = {wanted}"):
        ModelConfig(id="m", **fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"speculative": "ngram", "speculative_memory": 0, "speculative_ngram": 3, "speculative_draft": 4},
        {**DRAFT, "speculative_draft": 4, "speculative_step_tokens": 32},
        {"speculative_step_tokens": 8},  # what a grammar forces is drafted in every mode
    ],
)
def test_drafting_settings_their_mode_reads_are_kept(fields: dict[str, Any]) -> None:
    config = ModelConfig(id="m", **fields)
    assert {name: getattr(config, name) for name in fields} == fields
    assert ModelConfig.model_validate(config.model_dump()) == config  # written out in full, read again


def test_the_command_line_refuses_a_memory_without_ngram() -> None:
    parsed = cli.build_parser().parse_args(["serve", "--speculative-memory", "0"])
    with pytest.raises(ValidationError, match="speculative_memory is read only with speculative"):
        cli.settings_from_args(parsed)
