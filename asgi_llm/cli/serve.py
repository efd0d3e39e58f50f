"""`asgi-llm serve`: the app standalone under uvicorn, serving the packaged default model by default."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import logging.config
import os
import sys
from collections.abc import AsyncIterator, Callable, MutableMapping, Sequence
from typing import Any

from ..config import DefaultModelMissing, ModelConfig, Settings
from ..logs import redact_access_log, serve_json_log_config
from ..middleware.sqlite_keys import SQLiteKeys
from .keys import add_keys_parser, run_keys
from .otel_export import otlp_from_env

__all__ = ["build_parser", "main", "settings_from_args", "standalone_app"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asgi-llm", description="Serve local GGUF models over LLM wire protocols.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve models over HTTP with uvicorn")
    serve.add_argument(
        "--model", metavar="PATH", help="GGUF file to serve (default: the packaged SmolLM2-135M-Instruct)"
    )
    serve.add_argument("--model-id", metavar="NAME", help="name clients use for --model (default: the file's stem)")
    serve.add_argument("--config", metavar="FILE", help="settings file (.toml, .yaml or .json)")
    serve.add_argument("--models-dir", metavar="DIR", help="serve every GGUF in DIR by file stem, loaded on first use")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="uvicorn worker processes, each loading the models; above 1 needs limits_url and state_url (see README)",
    )
    serve.add_argument(
        "--cors-origin",
        metavar="ORIGIN",
        action="append",
        default=[],
        help="an origin web pages may call the API from, e.g. https://app.example (repeatable; * for any)",
    )
    serve.add_argument(
        "--api-key",
        metavar="[NAME=]KEY",
        action="append",
        default=[],
        help="require this API key (repeatable); ASGI_LLM_API_KEYS and ASGI_LLM_API_KEYS_FILE keep keys out of `ps`",
    )
    serve.add_argument(
        "--no-web-ui", dest="web_ui", action="store_false", default=None, help="do not serve the web page at /ui"
    )
    serve.add_argument(
        "--log-json", action="store_true", help="log one JSON object per line, with the request id (log_format = json)"
    )
    gpu = serve.add_argument_group("model options (override the first model of --config)")
    gpu.add_argument("--n-ctx", type=int)
    gpu.add_argument("--parallel", type=int, help="requests decoded together (continuous batching)")
    gpu.add_argument("--threads", type=int, dest="n_threads")
    gpu.add_argument("--n-gpu-layers", type=int, help="layers to offload to the GPU; -1 = all")
    gpu.add_argument("--main-gpu", type=int)
    gpu.add_argument("--split-mode", choices=["none", "layer", "row"])
    gpu.add_argument("--tensor-split", metavar="R1,R2,...", help="share of the model per GPU, e.g. 3,1")
    gpu.add_argument(
        "--prompt-cache-dir", metavar="DIR", help="save prompts that took long to read here, for after a restart"
    )
    gpu.add_argument(
        "--speculative",
        choices=["off", "ngram", "draft"],
        help="draft tokens from each prompt and output (ngram: prompt lookup), or by --draft-model (draft)",
    )
    gpu.add_argument("--draft-model", metavar="GGUF", help="a smaller model with the same vocabulary that drafts")
    gpu.add_argument(
        "--speculative-memory",
        type=int,
        metavar="RUNS",
        help="with --speculative ngram: runs of past replies drafted from across requests (0 = none)",
    )
    gpu.add_argument(
        "--flash-attn",
        nargs="?",
        const="on",
        choices=["auto", "on", "off"],
        help="flash attention (default auto: on where the backend has it)",
    )
    add_keys_parser(commands)
    return parser


_MODEL_OPTIONS = (
    "n_ctx",
    "parallel",
    "n_threads",
    "n_gpu_layers",
    "main_gpu",
    "split_mode",
    "flash_attn",
    "prompt_cache_dir",
    "speculative",
    "draft_model",
    "speculative_memory",
)


def settings_from_args(args: argparse.Namespace) -> Settings:
    settings = Settings.from_file(args.config).with_env_keys() if args.config else Settings.from_env()
    settings = settings.with_keys(args.api_key)
    if args.web_ui is False:
        settings = settings.model_copy(update={"web_ui": False})
    if settings.keys_db is None and SQLiteKeys.holds_keys(settings.state_path):  # made by `asgi-llm keys`
        settings = settings.model_copy(update={"keys_db": settings.state_path})
    if args.log_json:
        settings = settings.model_copy(update={"log_format": "json"})
    if args.models_dir:
        settings = settings.model_copy(update={"models_dir": args.models_dir})
    if args.cors_origin:
        settings = settings.model_copy(update={"cors_origins": (*settings.cors_origins, *args.cors_origin)})
    overrides: dict[str, Any] = {
        name: getattr(args, name) for name in _MODEL_OPTIONS if getattr(args, name) is not None
    }
    if "flash_attn" in overrides:
        overrides["flash_attn"] = {"on": True, "off": False}.get(overrides["flash_attn"], "auto")
    if args.tensor_split:
        overrides["tensor_split"] = tuple(float(x) for x in args.tensor_split.split(","))
    if args.model:
        from pathlib import Path

        overrides.update(path=args.model, id=args.model_id or Path(args.model).stem, aliases=("default",))
    elif args.model_id:
        overrides["id"] = args.model_id
    if not overrides:
        return settings
    first = settings.models[0].model_dump()
    first.update(overrides)
    return settings.model_copy(update={"models": (ModelConfig.model_validate(first), *settings.models[1:])})


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.command == "keys":
        return run_keys(args)
    if missing := _server_missing():
        print(f"asgi-llm: serve needs {missing}, which is not installed: pip install 'asgi-llm[serve]'", file=sys.stderr)
        return 2
    try:
        settings = settings_from_args(args)
        for model in settings.models:
            if not model.is_upstream:
                model.resolved_path()
        settings = _discovered(settings)
        _refuse_oversized_kv(settings)
        if args.workers > 1 and (problem := per_process_state(settings)):
            raise ValueError(f"--workers {args.workers}: {problem}")
    except DefaultModelMissing as exc:
        print(f"asgi-llm: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"asgi-llm: {exc}", file=sys.stderr)
        return 2

    import uvicorn

    short_openmp_spin(os.environ)
    log_config: dict[str, Any] | None = None
    if settings.log_format == "json":
        log_config = serve_json_log_config(args.log_level)
        logging.config.dictConfig(log_config)  # this process is ours: the app's own lines too
    else:
        logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s:     %(name)s: %(message)s")
    redact_access_log()  # before uvicorn's access lines: no key in a query string reaches them
    traced = otlp_from_env(os.environ, sys.stderr) if args.workers == 1 else None  # OTEL_EXPORTER_OTLP_*
    watch = [args.config] if args.config else []
    app = standalone_app(settings, reread=lambda: settings_from_args(args), watch=watch, stopped=traced)
    run: dict[str, Any] = {"log_config": log_config} if log_config is not None else {}
    if args.workers > 1:  # each worker process builds its own app from the same command line
        os.environ[_WORKER_ARGV] = json.dumps(argv)
        run.update(factory=True, workers=args.workers)
        app = "asgi_llm.cli.serve:worker_app"
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, lifespan="on", **run)
    return 0


_WORKER_ARGV = "ASGI_LLM_SERVE_ARGV"


def _server_missing() -> str | None:
    """The standalone server's package (the `serve` extra) that is not installed, or None. A host
    that mounts the app brings its own server and installs the package without them."""
    for name in ("uvicorn", "starlette"):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            return name
    return None


def worker_app() -> Any:
    """One `--workers` process's app (uvicorn's factory): the command line `main` was given."""
    args = build_parser().parse_args(json.loads(os.environ[_WORKER_ARGV]))
    settings = _discovered(settings_from_args(args))
    if settings.log_format != "json":
        logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s:     %(name)s: %(message)s")
    watch, traced = [args.config] if args.config else [], otlp_from_env(os.environ, sys.stderr)  # each worker's spans
    return standalone_app(settings, reread=lambda: settings_from_args(args), watch=watch, stopped=traced)


def per_process_state(settings: Settings) -> str | None:
    """Why these settings cannot run in several processes (`--workers`), or None: what one worker
    counted or stored, the others would not see."""
    keyed_limits = settings.keys_db or settings.state_url or any(k.limits for k in settings.all_api_keys())
    if settings.limits_url is None and (keyed_limits or any(v is not None for v in dict(settings.limits).values())):
        return "each worker would count limits on its own (N workers, N times the limit); set limits_url (Redis)"
    if settings.state_store == "memory" and settings.state_url is None:
        return "stored Responses would live in one worker's memory; set state_url (PostgreSQL) or state_store = sqlite"
    return None


def short_openmp_spin(environ: MutableMapping[str, str]) -> None:
    """OpenMP threads spin only briefly (`GOMP_SPINCOUNT=1000`, about 10 µs) at each barrier, then
    sleep, unless the environment chose a policy. llama.cpp's CPU threads meet at a barrier for
    every operation. Spinning long there (libgomp's default, 300000), they take the cores from
    everything else and a preempted thread stalls them all: measured on 2 cores with one busy,
    31 tokens/s at concurrency 4. Sleeping at once, each barrier costs a wake-up: 31 tokens/s
    single-stream on an idle machine, against 105 with the short spin, which keeps 74 contended
    (benchmarks/contention.py). Only for the process we own (`asgi-llm serve`): the OpenMP
    runtime reads these once, when llama.cpp is first loaded."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return
    environ["OMP_WAIT_POLICY"] = "passive"
    environ["GOMP_SPINCOUNT"] = "1000"


def _refuse_oversized_kv(settings: Settings) -> None:
    """A KV cache over the budgets is refused before the server starts, in one line with the
    figures (the pool refuses it again at start, for hosts that do not come through here)."""
    import anyio

    from ..pool.residency import refuse_oversized_kv

    anyio.run(refuse_oversized_kv, settings.with_models_dir())


def _discovered(settings: Settings) -> Settings:
    """Upstream models with `discover = true` replaced by those their upstream lists now."""
    if not any(m.is_upstream and m.discover for m in settings.models):
        return settings
    import anyio

    from ..core import LLMError
    from ..engines.upstream import discover_settings

    try:
        return anyio.run(discover_settings, settings)
    except LLMError as exc:
        raise ValueError(f"model discovery failed: {exc.message}") from None


_RATELIMIT_HEADERS = [
    f"x-ratelimit-{what}-{kind}" for what in ("limit", "remaining", "reset") for kind in ("requests", "tokens")
]


def standalone_app(
    settings: Settings,
    *,
    reread: Callable[[], Settings] | None = None,
    watch: Sequence[str] = (),
    stopped: Callable[[], None] | None = None,
) -> Any:
    """OpenAI and Anthropic at `/v1` (where their clients look), Ollama's `/api/*` at the root
    (where Ollama clients look), all on one pool, with one lifespan. With `cors_origins`, CORS
    wraps it all, so a preflight is answered on every route before any key is asked for. The web
    page is at `/ui` unless `web_ui` is false. With `reread`, SIGHUP and a change of a `watch`
    file, the keys file or `models_dir` serve what `reread()` gives without a restart. `stopped`
    is called last at shutdown (the span exporter's flush)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.routing import Mount

    from ..adapters.anthropic import ANTHROPIC
    from ..adapters.ollama import OLLAMA
    from ..adapters.openai import OPENAI
    from ..app import LLMApp

    api = LLMApp(settings, adapters=(OPENAI, ANTHROPIC), web_ui=False)
    root = api.sibling(OLLAMA, OPENAI, ANTHROPIC, web_ui=settings.web_ui is not False)  # the page at /ui
    cors = [
        Middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=["retry-after", "x-request-id", "x-should-retry", *_RATELIMIT_HEADERS],
            max_age=600,
        )
    ]
    routes = [Mount("/v1", app=api), Mount("/", app=root)]
    from .progress import progress_bar
    from .watch import reloading

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        with contextlib.ExitStack() as last:
            last.callback(stopped or (lambda: None))
            async with progress_bar(api.pool.health, sys.stderr), api.lifespan(app):
                yield

    if reread is not None:

        def watched() -> list[str]:
            now = api.pool.settings
            return [*watch, *(p for p in (now.api_keys_file, now.models_dir) if p is not None)]

        @contextlib.asynccontextmanager
        async def watching(app: Any) -> AsyncIterator[None]:
            async with lifespan(app), reloading(lambda: api.reload(reread()), watched):
                yield

        return Starlette(routes=routes, middleware=cors if settings.cors_origins else [], lifespan=watching)

    return Starlette(routes=routes, middleware=cors if settings.cors_origins else [], lifespan=lifespan)


if __name__ == "__main__":
    raise SystemExit(main())
