"""A FastAPI app with the LLM API mounted beside its own routes.

Run from the repository root:

    .venv/bin/uvicorn --app-dir examples fastapi_app:app

Your route: http://127.0.0.1:8000/ - OpenAI and Anthropic clients: http://127.0.0.1:8000/v1 -
Ollama clients: http://127.0.0.1:8000. `ASGI_LLM_MODEL=/path/to/model.gguf` serves another model.
"""

from fastapi import FastAPI

from asgi_llm import LLMApp, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI

llm = LLMApp(Settings.from_env(), adapters=(OPENAI, ANTHROPIC))
app = FastAPI(lifespan=llm.lifespan)  # models load at startup and unload at shutdown


@app.get("/")
async def home() -> dict[str, str]:
    return {"hello": "from FastAPI"}


app.mount("/v1", llm)
# Ollama's /api/* at the root; every other request reaches FastAPI untouched
app.add_middleware(llm.sibling(OLLAMA, health_path=None).in_front_of)
