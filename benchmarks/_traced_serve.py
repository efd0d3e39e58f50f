"""`asgi-llm serve` with every `llama_decode` timed: run as `python _traced_serve.py serve ...` with
`STEP_TRACE` naming the file that gets, on SIGTERM, one `[rows, start, seconds]` per decode
(`time.monotonic`, comparable with the client's clock). Used by step_budget.py only."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from asgi_llm.cli.serve import main
from asgi_llm.engines.llamacpp import native

_steps: list[tuple[int, float, float]] = []
_decode = native.Decoder.decode


def _timed(self: Any, batch: Any) -> None:
    started = time.monotonic()
    _decode(self, batch)
    _steps.append((len(batch), started, time.monotonic() - started))


def _dump(*_: object) -> None:
    """uvicorn re-raises SIGTERM after its graceful shutdown, so atexit would never run."""
    with open(os.environ["STEP_TRACE"], "w") as out:
        json.dump(_steps, out)
    os._exit(0)


native.Decoder.decode = _timed  # type: ignore[method-assign]
signal.signal(signal.SIGTERM, _dump)
sys.exit(main(sys.argv[1:]))
