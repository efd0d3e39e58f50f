"""Configuration at the trust boundary: every option, its default and its checks, from code, a
TOML/YAML/JSON file, or the environment.

One concern a module: `settings.py` (`Settings`, the app's options and the checks between its
models), `model.py` (`ModelConfig`, one served model), `keys.py` (`ApiKeyConfig`,
`LimitsConfig`), `lora.py` (a model's LoRA adapters), `chains.py` (fallback chains, as plain
data) and `sources.py` (the outside world read as plain data: files, `ASGI_LLM_*` variables,
a keys file, a models folder, the host's cores, the packaged default model). The public names
are re-exported here: `from asgi_llm.config import ModelConfig, Settings`.
"""

from .chains import fallback_chain
from .keys import ApiKeyConfig, LimitsConfig
from .model import ModelConfig
from .settings import Settings
from .sources import (
    DEFAULT_MODEL_ID,
    DEFAULT_MODEL_INSTALL,
    DefaultModelMissing,
    default_model_path,
    default_threads,
    parse_key_entries,
    usable_cores,
)

__all__ = [
    "DEFAULT_MODEL_ID",
    "DEFAULT_MODEL_INSTALL",
    "ApiKeyConfig",
    "DefaultModelMissing",
    "LimitsConfig",
    "ModelConfig",
    "Settings",
    "default_model_path",
    "default_threads",
    "fallback_chain",
    "parse_key_entries",
    "usable_cores",
]
