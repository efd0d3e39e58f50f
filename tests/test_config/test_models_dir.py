"""`models_dir`: every GGUF in it served by file stem, loaded on first use, with config entries
of the same id as per-model overrides."""

from __future__ import annotations

from pathlib import Path

from asgi_llm import ModelConfig, Settings
from asgi_llm.cli.serve import build_parser, settings_from_args


def folder(tmp_path: Path, *names: str) -> str:
    for name in names:
        (tmp_path / name).write_bytes(b"GGUF")
    return str(tmp_path)


def test_every_gguf_replaces_the_default_model_and_loads_lazily(tmp_path: Path) -> None:
    settings = Settings(models_dir=folder(tmp_path, "alpha.gguf", "beta.gguf", "notes.txt")).with_models_dir()
    assert [(m.id, Path(m.path or "").name, m.load) for m in settings.models] == [
        ("alpha", "alpha.gguf", "lazy"),
        ("beta", "beta.gguf", "lazy"),
    ]


def test_config_entries_override_a_file_and_keep_their_own(tmp_path: Path) -> None:
    other = ModelConfig(id="other", path="/elsewhere/other.gguf")
    beta = ModelConfig(id="beta", path="/pinned/beta.gguf")  # a path of its own wins over the file
    models = (ModelConfig(id="alpha", n_ctx=1024, pin=True), other, beta)
    settings = Settings(models=models, models_dir=folder(tmp_path, "alpha.gguf", "beta.gguf", "gamma.gguf"))
    served = {m.id: m for m in settings.with_models_dir().models}
    assert list(served) == ["alpha", "other", "beta", "gamma"]
    assert served["alpha"].path == str(tmp_path / "alpha.gguf") and served["alpha"].n_ctx == 1024
    assert served["alpha"].load == "lazy" and served["alpha"].pin
    assert served["beta"].path == "/pinned/beta.gguf" and served["other"] == other


def test_serve_takes_models_dir(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", "--models-dir", folder(tmp_path, "alpha.gguf")])
    assert [m.id for m in settings_from_args(args).with_models_dir().models] == ["alpha"]
