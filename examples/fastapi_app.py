"""A FastAPI app with the LLM API mounted beside its own routes.

Run from the repository root:

    .venv/bin/uvicorn --app-dir examples fastapi_app:app

Your routes: http://127.0.0.1:8000/ and /summarize?text=... (the model in-process) - OpenAI and Anthropic clients: http://127.0.0.1:8000/v1 -
Ollama clients: http://127.0.0.1:8000. `ASGI_LLM_MODEL=/path/to/model.gguf` serves another model.
"""

from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from asgi_llm import LLMApp, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.core import TextDelta

llm = LLMApp(Settings.from_env(), adapters=(OPENAI, ANTHROPIC))
app = FastAPI(lifespan=llm.lifespan)  # models load at startup and unload at shutdown


@app.get("/")
async def home() -> dict[str, str]:
    return {"hello": "from FastAPI"}


@app.get("/api/status")
async def status() -> dict[str, str]:
    return {"status": "the host's own /api route"}  # beside Ollama's /api/*, untouched


@app.get("/summarize")
async def summarize(text: str) -> StreamingResponse:
    """The host's own route using the model in-process, streamed to its client as it is written.
    Counted in usage and limits under the key name "site"."""

    async def words() -> AsyncIterator[str]:
        messages = [{"role": "system", "content": "Summarize the text in one sentence."}, {"role": "user", "content": text}]
        async with llm.client(key="site").stream_chat(messages, model="default", max_tokens=48) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    yield event.text

    return StreamingResponse(words(), media_type="text/plain; charset=utf-8")


app.mount("/v1", llm)
# Ollama's /api/* at the root; every other request reaches FastAPI untouched
app.add_middleware(llm.sibling(OLLAMA, health_path=None).in_front_of)
