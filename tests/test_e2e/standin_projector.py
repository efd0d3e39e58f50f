"""The stand-in vision projector (benchmarks/_standin.py writes it, as the GPU run does) for the
packaged model, written once a session, and the small PNG images the image tests send.

benchmarks/ is not a package the tests can import (the repository root is never on `sys.path`),
so its module is loaded from its file."""

from __future__ import annotations

import importlib.util
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import gguf

from asgi_llm.config.sources import default_model_path

STANDIN = Path(__file__).resolve().parents[2] / "benchmarks" / "_standin.py"


def standin_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_standin", STANDIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_projector(dest: Path, kind: str = "mlp") -> Path:
    """A stand-in projector for the packaged model at `dest` (`kind`: `mlp`, or SmolVLM's `idefics3`)."""
    module = standin_module()
    return Path(module.write_projector(gguf, default_model_path(), dest, kind=kind))


def image_tokens() -> int:
    """How many tokens the stand-in projector reads an image as."""
    return int(standin_module().PROJECTOR.tokens)


def png(width: int, height: int, pixel: Callable[[int, int], tuple[int, int, int]]) -> bytes:
    """An 8-bit RGB PNG of `pixel(x, y)`."""
    rows = b"".join(b"\x00" + b"".join(bytes(pixel(x, y)) for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
