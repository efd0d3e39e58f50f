"""Two `asgi-llm serve` replicas behind one gateway, under load: one is stopped mid-run and no
request is lost (none had started streaming from it: a stopping server finishes what it has
begun); once it is back on its port, the gateway sends it work again."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai

HI = [{"role": "user", "content": "Count to ten."}]


def replicas(url: str) -> list[dict[str, Any]]:
    (model,) = httpx.get(f"{url}/v1/health", timeout=10).json()["models"]
    found: list[dict[str, Any]] = model["backend"]["replicas"]
    return found


def test_a_stopped_replica_loses_no_request_and_is_used_again_when_back(
    tmp_path: Path, serve_gateway: Any, unused_port: Any, start_upstream: Any
) -> None:
    port_b = unused_port()
    a = start_upstream(tmp_path / "a")
    b = start_upstream(tmp_path / "b", port_b)
    try:
        settings = _settings([a.base_url, b.base_url])
        with (
            serve_gateway(settings) as url,
            openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60) as sdk,
        ):

            def ask(i: int) -> str:
                stream = i % 2 == 0
                if stream:
                    chunks = sdk.chat.completions.create(
                        model="remote", messages=HI, max_tokens=12, temperature=0, stream=True
                    )
                    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                reply = sdk.chat.completions.create(model="remote", messages=HI, max_tokens=12, temperature=0)
                return reply.choices[0].message.content or ""

            with ThreadPoolExecutor(4) as workers:
                running = [workers.submit(ask, i) for i in range(24)]
                while sum(f.done() for f in running) < 4:
                    time.sleep(0.05)
                b.stop()  # mid-run: some requests done, some streaming, some not sent yet
                answers = [f.result() for f in running]  # raises if any request was lost
            assert all(answers) and len(answers) == 24
            before = replicas(url)
            assert before[0]["requests"] > 0 and before[1]["requests"] > 0

            b = start_upstream(tmp_path / "b2", port_b)
            deadline = time.monotonic() + 30
            while not replicas(url)[1]["healthy"]:
                assert time.monotonic() < deadline, "the returned replica was never taken back"
                time.sleep(0.2)
            with ThreadPoolExecutor(2) as workers:
                assert all(workers.map(ask, range(6)))
            after = replicas(url)
            assert after[1]["requests"] > before[1]["requests"]
            assert all(r["healthy"] for r in after) and all(r["outstanding"] == 0 for r in after)
    finally:
        for upstream in (a, b):
            if upstream.process.poll() is None:
                upstream.stop()


def _settings(urls: list[str]) -> Any:
    from asgi_llm import ModelConfig, Settings

    model = ModelConfig(id="remote", base_urls=tuple(urls), upstream_model="default", health_interval=0.5)
    return Settings(models=(model,))
