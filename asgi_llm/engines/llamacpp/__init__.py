"""GGUF models in-process through llama-cpp-python: the only package that imports `llama_cpp`.

Every call into llama.cpp runs on the pool's inference thread (`InferenceThread`).
"""

from .engine import LlamaCppEngine
from .native import backend_info

__all__ = ["LlamaCppEngine", "backend_info"]
