"""Time to read a chat's prompt with an image: afresh (decoded, encoded by the projector, read into
a sequence), and again in a second turn about the same picture (found in the cache).

    .venv/bin/python benchmarks/image_prefill.py [--model GGUF] [--mmproj GGUF] [--size PX]
        [--rounds R] [--threads T] [--n-gpu-layers N]

Without `--mmproj`, a stand-in projector of random weights for the model is written first
(benchmarks/_standin.py: a tiny tower of 16 tokens an image, so the figures are mostly the
decode, the preprocessing and the text); with a real model's projector they are its own. Each
round sends a new picture of `--size` pixels a side (random, as a PNG), then a second turn about
it, and a text-only chat of new words as long; each is timed until its prompt is read (the
engine's `PromptRead`, sent before the first token: a picture of noise may make the model's
first tokens no text). It prints the medians, and how many images the projector encoded (one a
round: the second turn encodes none).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import tempfile
import time
import zlib
from pathlib import Path

from _standin import gguf_module, write_projector

from asgi_llm import ModelConfig
from asgi_llm.config import default_model_path
from asgi_llm.core import IMAGE_MARKER, ChatRequest, ImageInput, Message, PromptRead, SamplingParams
from asgi_llm.engines.inference_thread import InferenceThread
from asgi_llm.engines.llamacpp import LlamaCppEngine

QUESTION = "What does this picture show? Answer in one sentence."


def picture(side: int) -> bytes:
    """A PNG of `side` × `side` random pixels."""
    rows = b"".join(b"\x00" + os.urandom(side * 3) for _ in range(side))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b"")


async def prompt_read(engine: LlamaCppEngine, *messages: Message) -> float:
    request = ChatRequest(model="m", messages=messages, sampling=SamplingParams(max_tokens=1, temperature=0))
    started, read = time.perf_counter(), None
    async for event in engine.generate(request):
        if isinstance(event, PromptRead):
            read = time.perf_counter() - started
    assert read is not None, "the engine sent no PromptRead"
    return read


async def run(config: ModelConfig, side: int, rounds: int) -> None:
    thread = InferenceThread()
    thread.start()
    engine = LlamaCppEngine(config, thread)
    times: dict[str, list[float]] = {"image, read afresh": [], "image, second turn": [], "text only": []}
    try:
        await engine.load()
        await prompt_read(engine, Message("user", QUESTION))  # warm up
        for n in range(rounds):
            image = ImageInput(picture(side), "image/png", "messages[0].content[0]")
            asked = Message("user", f"{IMAGE_MARKER}{QUESTION} ({n})", images=(image,))
            times["image, read afresh"].append(await prompt_read(engine, asked))
            turn = (asked, Message("assistant", "A picture."), Message("user", "And its colours?"))
            times["image, second turn"].append(await prompt_read(engine, *turn))
            times["text only"].append(await prompt_read(engine, Message("user", f"{QUESTION} ({n}, in text)")))
        projector = engine.describe()["projector"]
    finally:
        await engine.close()
        await thread.stop()
    for case, values in times.items():
        print(f"{case:20s} median {statistics.median(values) * 1000:8.1f} ms   min {min(values) * 1000:8.1f} ms")
    print(f"images decoded {projector['images']}, encoded {projector['encodes']} ({rounds} rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="the text model (default: the packaged one)")
    parser.add_argument("--mmproj", default=None, help="its projector (default: a stand-in, written first)")
    parser.add_argument("--size", type=int, default=512, help="pixels a side of each picture")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--n-gpu-layers", type=int, default=0)
    args = parser.parse_args()
    model = args.model or default_model_path()
    with tempfile.TemporaryDirectory() as folder:
        mmproj = args.mmproj or str(write_projector(gguf_module(), model, Path(folder) / "mmproj.gguf"))
        config = ModelConfig(
            path=model, mmproj=mmproj, n_ctx=4096, parallel=2, n_threads=args.threads, n_gpu_layers=args.n_gpu_layers
        )
        asyncio.run(run(config, args.size, args.rounds))


if __name__ == "__main__":
    main()
