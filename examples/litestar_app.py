"""A Litestar app with the LLM API added by a plugin.

Run from the repository root:

    .venv/bin/uvicorn --app-dir examples litestar_app:app

Your route: http://127.0.0.1:8000/ - OpenAI and Anthropic clients: http://127.0.0.1:8000/v1 -
Ollama clients: http://127.0.0.1:8000. `ASGI_LLM_MODEL=/path/to/model.gguf` serves another model.
"""

from litestar import Litestar, get

from asgi_llm import Settings
from asgi_llm.contrib.litestar import LLMConfig, LLMPlugin


@get("/")
async def home() -> dict[str, str]:
    return {"hello": "from Litestar"}


@get("/api/status")
async def status() -> dict[str, str]:
    return {"status": "the host's own /api route"}  # beside Ollama's /api/*, untouched


app = Litestar(
    route_handlers=[home, status],
    plugins=[LLMPlugin(LLMConfig(Settings.from_env(), path="/v1", ollama_at_root=True))],
)
