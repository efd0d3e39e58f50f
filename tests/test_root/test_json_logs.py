"""JSON log lines: the formatter a host puts in its own logging configuration (we never install
it when mounted), and the configuration `asgi-llm serve --log-json` installs in its own process."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from asgi_llm import LLMApp, ModelConfig, Settings
from asgi_llm.cli.serve import build_parser, settings_from_args
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.logs import JSONFormatter, serve_json_log_config, serving_request
from asgi_llm.pool import ModelPool

pytestmark = pytest.mark.anyio


def record(message: str, *args: Any, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            info = sys.exc_info()
    return logging.LogRecord("asgi_llm.pool", logging.WARNING, __file__, 1, message, args, info)


def test_one_object_per_line_with_time_level_logger_message_and_request_id() -> None:
    formatter = JSONFormatter()
    outside = json.loads(formatter.format(record("loaded %s in %.1f s", "m", 1.25)))
    assert set(outside) == {"time", "level", "logger", "message", "request_id"}
    assert outside["level"] == "WARNING" and outside["logger"] == "asgi_llm.pool"
    assert outside["message"] == "loaded m in 1.2 s" and outside["request_id"] is None
    assert outside["time"].endswith("+00:00")
    with serving_request("req-1"):
        inside = json.loads(formatter.format(record("multi\nline")))
    assert inside["request_id"] == "req-1" and inside["message"] == "multi\nline"
    failed = formatter.format(record("failed", exc=True))
    assert "\n" not in failed and "ValueError: boom" in json.loads(failed)["exception"]


async def test_a_host_that_configures_the_formatter_gets_json_lines_naming_the_request() -> None:
    settings = Settings(models=(ModelConfig(id="fake", path="unused.gguf"),), usage_log=True)
    llm = LLMApp(pool=ModelPool(settings, engine_factory=lambda config, thread: FakeEngine(config, thread)))
    root = logging.getLogger()
    before = (list(root.handlers), root.level, [type(h.formatter) for h in root.handlers])
    assert not any(isinstance(h.formatter, JSONFormatter) for h in root.handlers)  # we installed nothing
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)  # what the host's dictConfig would build
    handler.setFormatter(JSONFormatter())
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    try:
        host = Starlette(routes=[Mount("/v1", app=llm)], lifespan=lambda app: llm.lifespan())
        async with llm.lifespan():
            await llm.pool.wait_ready()
            transport = httpx.ASGITransport(app=host)
            async with httpx.AsyncClient(transport=transport, base_url="http://host") as http:
                reply = await http.post(
                    "/v1/chat/completions", json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
                )
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    assert (list(root.handlers), root.level, [type(h.formatter) for h in root.handlers]) == before
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    usage = [line for line in lines if line["logger"] == "asgi_llm.usage"]
    assert reply.status_code == 200 and len(usage) == 1
    assert usage[0]["request_id"] == reply.headers["x-request-id"]
    assert f"request={reply.headers['x-request-id']}" in usage[0]["message"]
    assert "[request" not in usage[0]["message"]  # named once, not twice


def test_serve_installs_json_logging_from_the_flag_or_the_setting(tmp_path: Any) -> None:
    config = tmp_path / "asgi-llm.toml"
    config.write_text('log_format = "json"\n')
    assert settings_from_args(build_parser().parse_args(["serve", "--config", str(config)])).log_format == "json"
    assert settings_from_args(build_parser().parse_args(["serve", "--log-json"])).log_format == "json"
    assert settings_from_args(build_parser().parse_args(["serve"])).log_format == "text"
    installed = serve_json_log_config("info")
    assert {f["()"] for f in installed["formatters"].values()} == {JSONFormatter}
    assert installed["loggers"]["uvicorn.access"]["handlers"] == ["access"]
    assert installed["root"]["level"] == "INFO"
