"""The command line, `asgi-llm`: `serve` (serve.py: the app standalone under uvicorn, with its
hot reload, watch.py; its load progress bar, progress.py; and its OTLP exporter,
otel_export.py) and `keys` (keys.py: API keys kept hashed in SQLite or PostgreSQL).

`main` is the console script's entry point (`asgi-llm = "asgi_llm.cli:main"`).
"""

from .serve import main

__all__ = ["main"]
