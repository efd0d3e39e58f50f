"""What a load really allocated, read from the buffer sizes llama.cpp logs as it allocates them
(`load_tensors: CUDA0 model buffer size = 85.82 MiB`): per device, exactly what it asked each
backend for, which no process-wide figure (RSS, free VRAM) can attribute to one model."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..memory_estimate import MemoryEstimate

__all__ = ["measured_memory"]

_BUFFER = re.compile(r"^\w+:\s+(?P<device>\S+)\s+(?P<kind>\w+)\s+buffer size\s*=\s*(?P<mib>[\d.]+)\s*MiB")
_GPU = re.compile(r"^(?!CPU)[A-Za-z]+(?P<index>\d+)$")  # CUDA0, Vulkan1, ROCm0; CPU_Mapped, CUDA_Host are RAM
_KINDS = {"model": "weights", "KV": "kv_cache", "RS": "kv_cache", "compute": "compute", "output": "compute"}


def measured_memory(lines: Iterable[str]) -> MemoryEstimate | None:
    """The bytes the logged buffers add up to, by kind and by GPU; None when none was logged."""
    kinds = {"weights": 0, "kv_cache": 0, "compute": 0}
    gpu: dict[int, int] = {}
    seen = False
    for line in lines:
        match = _BUFFER.match(line)
        if match is None or match["kind"] not in _KINDS:
            continue
        seen = True
        size = int(float(match["mib"]) * 1024 * 1024)
        kinds[_KINDS[match["kind"]]] += size
        if (device := _GPU.match(match["device"])) is not None:
            index = int(device["index"])
            gpu[index] = gpu.get(index, 0) + size
    if not seen:
        return None
    devices = tuple(gpu.get(i, 0) for i in range(max(gpu) + 1)) if gpu else ()
    return MemoryEstimate(**kinds, gpu=devices)
