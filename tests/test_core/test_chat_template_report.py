"""Which chat template serves a model, and what the operator and Ollama clients are told of it:
the config's wins, else the GGUF's own, else the ChatML fallback, which `/admin/models` and
`/api/show` name as a fallback (with the end marker it stops at). Read from GGUF headers only:
no model loads here."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.ollama import models as ollama_models
from asgi_llm.config.sources import default_model_path
from asgi_llm.core import ModelCard, ModelFacts, template_in_use
from asgi_llm.core.templates import CHATML, CHATML_END
from asgi_llm.engines.fake import FakeEngine

from ..test_e2e.gemma import gemma_path

pytestmark = pytest.mark.anyio
OWN = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def test_the_config_wins_then_the_file_then_the_fallback() -> None:
    has_one = {"tokenizer.chat_template": OWN}
    assert template_in_use("{{ x }}", has_one).origin == "config"
    assert template_in_use(None, has_one).source == OWN
    for nothing in ({}, {"tokenizer.chat_template": ""}):
        fallback = template_in_use(None, nothing)
        assert (fallback.origin, fallback.name, fallback.source, fallback.end) == (
            "fallback",
            "chatml",
            CHATML,
            CHATML_END,
        )
        assert fallback.fallback
    assert not template_in_use(None, has_one).fallback and template_in_use(None, has_one).end is None


def _card(template: Any) -> ModelCard:
    facts = ModelFacts(architecture="gemma3", parameters=268_098_176, metadata={"general.architecture": "gemma3"})
    return ModelCard("m", 0, "asgi-llm", (), "ready", 512, False, facts=facts, template=template)


def test_api_show_names_a_fallback_and_its_stop() -> None:
    status, shown = ollama_models.show([_card(template_in_use(None, {}))], {"model": "m"})
    assert status == 200 and shown["template"] == ollama_models.CHATML  # Ollama's Go template for ChatML
    assert shown["parameters"].split() == ["num_ctx", "512", "stop", f'"{CHATML_END}"']  # the served context too
    assert "no chat template" in shown["modelfile"] and "chatml fallback" in shown["modelfile"]
    assert shown["model_info"]["asgi_llm.chat_template"] == "chatml"
    assert shown["model_info"]["asgi_llm.chat_template.fallback"] is True


def test_api_show_gives_the_template_in_use_and_says_nothing_of_an_unknown_one() -> None:
    _, shown = ollama_models.show([_card(template_in_use("{{ x }}", {"tokenizer.chat_template": OWN}))], {"model": "m"})
    assert (shown["template"], shown["parameters"].split(), shown["modelfile"]) == ("{{ x }}", ["num_ctx", "512"], "")
    assert shown["model_info"]["asgi_llm.chat_template"] == "chat_template"
    assert shown["model_info"]["asgi_llm.chat_template.fallback"] is False
    _, unknown = ollama_models.show([_card(None)], {"model": "m"})  # an upstream model: nothing to say
    assert unknown["template"] == "" and not any(key.startswith("asgi_llm.") for key in unknown["model_info"])


async def test_admin_models_says_which_template_serves_each_model() -> None:
    models = (
        ModelConfig(id="smollm2", path=default_model_path(), load="lazy"),
        ModelConfig(id="gemma", path=gemma_path(), load="lazy"),
        ModelConfig(id="configured", path=gemma_path(), load="lazy", chat_template=OWN),
        ModelConfig(id="missing", path="missing.gguf", load="lazy"),  # no header to read: unknown
    )
    pool = ModelPool(Settings(models=models), engine_factory=lambda c, t: FakeEngine(c))  # type: ignore[arg-type]
    llm = LLMApp(pool=pool)
    async with llm.lifespan(), httpx.AsyncClient(transport=httpx.ASGITransport(app=llm), base_url="http://t") as http:
        listing = {m["id"]: m["chat_template"] for m in (await http.get("/admin/models")).json()["data"]}
    assert listing == {
        "smollm2": {"origin": "gguf", "name": "tokenizer.chat_template", "fallback": False, "ends_at": None},
        "gemma": {"origin": "fallback", "name": "chatml", "fallback": True, "ends_at": CHATML_END},
        "configured": {"origin": "config", "name": "chat_template", "fallback": False, "ends_at": None},
        "missing": None,
    }
