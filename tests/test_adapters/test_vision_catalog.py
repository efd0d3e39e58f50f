"""A model that takes images says so: `/models` (`vision: true`), Ollama's `/api/show`
(`capabilities` lists `vision`) and the operators' list; one that takes none says nothing new."""

from __future__ import annotations

from asgi_llm.adapters.ollama.models import show
from asgi_llm.adapters.openai.models import list_models
from asgi_llm.core import ModelCard
from asgi_llm.pool.report import ModelReport


def card(vision: bool) -> ModelCard:
    return ModelCard("m", 0, "asgi-llm", (), "ready", 1024, False, vision=vision)


def test_models_say_which_take_images() -> None:
    _, listing = list_models([card(True), card(False)], {})
    assert isinstance(listing, dict)
    assert [model.get("vision") for model in listing["data"]] == [True, None]


def test_ollama_show_lists_vision_among_the_capabilities() -> None:
    for vision in (True, False):
        _, shown = show([card(vision)], {"model": "m"})
        assert isinstance(shown, dict)
        assert ("vision" in shown["capabilities"]) is vision


def test_the_operators_list_says_a_model_takes_images() -> None:
    fields = dict.fromkeys(ModelReport.__dataclass_fields__, None)
    fields |= {"id": "m", "aliases": (), "backend": {}, "vision": True}
    assert ModelReport(**fields).operator_row()["vision"] is True  # type: ignore[arg-type]
    assert "vision" not in ModelReport(**(fields | {"vision": False})).operator_row()  # type: ignore[arg-type]
