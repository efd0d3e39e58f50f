"""A Starlette site with the LLM API mounted beside its own routes.

Run from the repository root:

    .venv/bin/uvicorn --app-dir examples starlette_app:app

Your route: http://127.0.0.1:8000/ - OpenAI and Anthropic clients: http://127.0.0.1:8000/v1 -
Ollama clients: http://127.0.0.1:8000. `ASGI_LLM_MODEL=/path/to/model.gguf` serves another model.
"""

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from asgi_llm import LLMApp, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI

llm = LLMApp(Settings.from_env(), adapters=(OPENAI, ANTHROPIC))


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("Hello from Starlette")


async def status(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the host's own /api route")  # beside Ollama's /api/*, untouched


app = Starlette(
    routes=[Route("/", home), Route("/api/status", status), Mount("/v1", app=llm)],
    # Ollama's /api/* at the root; every other request reaches the routes above untouched
    middleware=[Middleware(llm.sibling(OLLAMA, health_path=None).in_front_of)],
    lifespan=llm.lifespan,  # models load at startup and unload at shutdown
)
