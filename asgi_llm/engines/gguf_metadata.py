"""What a GGUF file says about its model, read from its header alone: no `llama_cpp`, no weights.

Model lists answer without loading a model (a lazy one may never be loaded), and Ollama's
clients show a model's family, size and quantization from them. The header is the file's
key/value metadata and its tensor table; the weights after it are never read.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from types import MappingProxyType
from typing import Any

from ..core.catalog import ModelFacts

__all__ = ["FILE_TYPES", "read_facts"]

FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
    39: "NVFP4",
    40: "Q1_0",
    41: "Q2_0",
}
"""llama.cpp's `general.file_type` values (`LLAMA_FTYPE_MOSTLY_*`), by the names Ollama shows."""

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_FLOAT32, _STRING, _ARRAY = 6, 8, 9
_MAX_DIMS = 8


class _Header:
    """A cursor over the header's bytes; every read is bounds-checked by `struct`."""

    def __init__(self, data: Any) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        size = self.take("Q")
        raw = bytes(self.data[self.at : self.at + size])
        if len(raw) != size:
            raise struct.error("string past the end of the file")
        self.at += size
        return raw.decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        if kind == _FLOAT32:
            return _shortest(self.take("f"))
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            self.skip_array()
            return None
        raise ValueError(f"unknown GGUF value type {kind}")

    def skip_array(self) -> None:
        """Arrays (the vocabulary, merges) are large and no one lists them; passed over."""
        kind, count = self.take("I"), self.take("Q")
        if kind in _SCALARS:
            self.at += struct.calcsize("<" + _SCALARS[kind]) * count
        elif kind == _STRING:
            for _ in range(count):
                size = self.take("Q")  # read before `self.at +=` loads the cursor it moves
                self.at += size
        else:
            for _ in range(count):
                self.value(kind)
        if self.at > len(self.data):
            raise struct.error("array past the end of the file")


def _shortest(value: float) -> float:
    """A float32 as the fewest digits that read back as it (1e-05, not 9.999999747378752e-06)."""
    for digits in range(6, 10):
        short = float(f"{value:.{digits}g}")
        if struct.unpack("<f", struct.pack("<f", short))[0] == value:
            return short
    return value


def _parse(data: Any) -> ModelFacts:
    header = _Header(data)
    if bytes(data[:4]) != b"GGUF":
        raise ValueError("not a GGUF file")
    header.at = 4
    if header.take("I") not in (2, 3):
        raise ValueError("unsupported GGUF version")
    tensors, entries = header.take("Q"), header.take("Q")
    metadata: dict[str, str | int | float | bool] = {}
    for _ in range(entries):
        key = header.string()
        value = header.value(header.take("I"))
        if value is not None:
            metadata[key] = value
    parameters = 0
    offsets: dict[str, int] = {}
    for _ in range(tensors):
        name = header.string()
        dims = header.take("I")
        if dims > _MAX_DIMS:
            raise ValueError("a tensor with too many dimensions")
        count = 1
        for _ in range(dims):
            count *= header.take("Q")
        header.take("I")  # type
        offsets[name] = header.take("Q")
        parameters += count
    alignment = metadata.get("general.alignment", 32)
    alignment = alignment if isinstance(alignment, int) and alignment > 0 else 32
    start = -(-header.at // alignment) * alignment  # where the tensor data begins
    layers, output, copy = _by_layer(_sizes(offsets, len(data) - start))
    file_type = metadata.get("general.file_type")
    return ModelFacts(
        architecture=str(metadata.get("general.architecture", "")),
        parameters=parameters,
        file_type=FILE_TYPES.get(file_type, "") if isinstance(file_type, int) else "",
        metadata=MappingProxyType(metadata),  # shared by every reader of the file (`read_facts` caches)
        layer_weights=layers,
        output_weights=output,
        output_copy=copy,
    )


def _sizes(offsets: dict[str, int], data_bytes: int) -> dict[str, int]:
    """Each tensor's bytes, from where the next one starts (alignment padding included): no
    table of weight types needed, so a type newer than this code is measured all the same."""
    placed = sorted(offsets.items(), key=lambda item: item[1])
    ends = [offset for _, offset in placed[1:]] + [data_bytes]
    return {name: max(end - offset, 0) for (name, offset), end in zip(placed, ends)}


def _by_layer(sizes: dict[str, int]) -> tuple[tuple[int, ...], int, int]:
    """Bytes per repeating layer (`blk.N.*`), of the output layer, and of the token embeddings
    when they are the output matrix too (no `output.weight`: llama.cpp then copies them)."""
    layers: dict[int, int] = {}
    output = 0
    for name, size in sizes.items():
        group, _, rest = name.partition(".")
        index = rest.partition(".")[0]
        if group == "blk" and index.isdigit():
            layers[int(index)] = layers.get(int(index), 0) + size
        elif group in ("output", "output_norm"):
            output += size
    copy = sizes.get("token_embd.weight", 0) if "output.weight" not in sizes else 0
    return tuple(layers.get(i, 0) for i in range(max(layers) + 1)) if layers else (), output, copy


def read_facts(path: str) -> ModelFacts:
    """The facts in the header of the GGUF at `path`; empty facts for a file that isn't one
    (a catalog must answer whatever the file is). Cached while the file stays the same file
    (its inode, size and time): a header with a large vocabulary takes milliseconds to walk,
    and every catalog reload and estimate asks again."""
    try:
        stat = os.stat(path)
    except OSError:
        return ModelFacts()
    return _read_facts(path, stat.st_ino, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _read_facts(path: str, inode: int, size: int, mtime_ns: int) -> ModelFacts:
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _parse(data)
    except (OSError, ValueError, struct.error, OverflowError):
        return ModelFacts()
