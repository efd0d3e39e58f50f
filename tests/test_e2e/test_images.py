"""Images through the llama.cpp engine (#40), with the packaged model and a stand-in projector of
random weights (benchmarks/_standin.py): pictures are noise to it, so these tests assert what holds
whatever the weights."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from llama_cpp import llama_cpp, mtmd_cpp

from asgi_llm import ModelConfig
from asgi_llm.config.sources import default_model_path
from asgi_llm.core import (
    IMAGE_MARKER,
    ChatRequest,
    ContextOverflow,
    ImageInput,
    InvalidRequest,
    Message,
    SamplingParams,
    TextDelta,
)
from asgi_llm.engines.llamacpp import LlamaCppEngine

from .local_engine import answered as answer
from .local_engine import local_engine
from .standin_projector import image_tokens, png, write_projector

pytestmark = pytest.mark.model
KEEP_TALKING = ((0, -100.0), (2, -100.0))  # tokens 0 and 2 end SmolLM2's turn
RED = png(48, 40, lambda x, y: (200 + x % 50, 10 * (y % 3), 20))
BLUE = png(48, 40, lambda x, y: (10, (x * y) % 256, 240 - y))


def fresh() -> bytes:
    """A picture of random pixels."""
    noise = os.urandom(16 * 16 * 3)
    return png(16, 16, lambda x, y: (noise[3 * (16 * y + x)], noise[3 * (16 * y + x) + 1], noise[3 * (16 * y + x) + 2]))


@pytest.fixture(scope="session")
def projector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_projector(tmp_path_factory.mktemp("projector") / "mmproj.gguf")


def test_the_stand_in_projector_loads_for_the_packaged_model(projector: Path) -> None:
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(default_model_path().encode(), llama_cpp.llama_model_default_params())
    assert model
    try:
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu, params.n_threads, params.warmup = False, 1, False
        context = mtmd_cpp.mtmd_init_from_file(str(projector).encode(), model, params)
        assert context, "llama.cpp's clip loader refused the stand-in projector"
        try:
            assert mtmd_cpp.mtmd_support_vision(context)
        finally:
            mtmd_cpp.mtmd_free(ctypes.c_void_p(context))
    finally:
        llama_cpp.llama_model_free(model)


def chat(*turns: Message, max_tokens: int = 12, n: int = 1) -> ChatRequest:
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0, logit_bias=KEEP_TALKING)
    return ChatRequest(model="m", messages=turns, sampling=sampling, n=n)


def asking(*images: bytes, text: str = "What is in this picture?") -> Message:
    parts = tuple(ImageInput(data, "image/png", f"messages[0].content[{i}]") for i, data in enumerate(images))
    return Message("user", IMAGE_MARKER * len(images) + text, images=parts)


def encodes(engine: LlamaCppEngine) -> int:
    return int(engine.describe()["projector"]["encodes"])


@pytest.fixture(scope="module")
async def vision(projector: Path) -> AsyncIterator[LlamaCppEngine]:
    async with local_engine(ModelConfig(n_ctx=1024, parallel=2, n_threads=1, mmproj=str(projector))) as engine:
        yield engine


@pytest.mark.anyio
async def test_an_image_is_read_and_its_tokens_counted(vision: LlamaCppEngine, projector: Path) -> None:
    assert vision.reads_images
    assert vision.memory is not None and vision.memory.weights > projector.stat().st_size  # the projector counts
    request = chat(asking(RED))
    counted = await vision.count_tokens(request)
    without = await vision.count_tokens(chat(Message("user", "What is in this picture?")))
    assert counted - without == image_tokens()
    text, finish = await answer(vision, request)
    assert text and finish.usage.prompt_tokens == counted


@pytest.mark.anyio
async def test_greedy_output_follows_the_image(vision: LlamaCppEngine) -> None:
    red = [(await answer(vision, chat(asking(RED), max_tokens=16)))[0] for _ in range(3)]
    assert red[0] == red[1] == red[2]
    blue = (await answer(vision, chat(asking(BLUE), max_tokens=16)))[0]
    assert blue != red[0]


@pytest.mark.anyio
async def test_a_second_turn_about_the_same_picture_skips_the_encoder(vision: LlamaCppEngine) -> None:
    green, blue, yellow = (fresh() for _ in range(3))  # pictures no cache holds yet (the engine serves both backends)
    first = asking(green, text="Describe it.")
    reply, _ = await answer(vision, chat(first))
    before = encodes(vision)
    _, finish = await answer(vision, chat(first, Message("assistant", reply), Message("user", "And its colour?")))
    assert encodes(vision) == before
    assert finish.usage.cached_tokens > image_tokens()
    await answer(vision, chat(asking(green, blue, text="Compare them.")))  # the green one is cached
    assert encodes(vision) == before + 1
    await answer(vision, chat(asking(yellow, green, text="Compare them.")))  # a prefix no cache holds: both read
    assert encodes(vision) == before + 3


@pytest.mark.anyio
async def test_a_prompt_with_an_image_shares_steps_with_a_running_stream(vision: LlamaCppEngine) -> None:
    """Read once first (a prompt's first reading fixes its last digits: test_engine_batching.py),
    a stream gives the same tokens beside a prompt whose image is read meanwhile."""
    counting = chat(Message("user", "Count from 1 to 30."), max_tokens=32)
    alone, _ = await answer(vision, counting)
    (beside, _), (seen, finish) = await asyncio.gather(
        answer(vision, counting), answer(vision, chat(asking(fresh()), max_tokens=8))
    )
    assert beside == alone
    assert seen and finish.usage.prompt_tokens > image_tokens()


@pytest.mark.anyio
async def test_choices_of_one_prompt_share_its_image(vision: LlamaCppEngine) -> None:
    before = encodes(vision)
    texts: dict[int, str] = {}
    async for event in vision.generate(chat(asking(fresh()), n=2)):
        if isinstance(event, TextDelta):
            texts[event.index] = texts.get(event.index, "") + event.text
    assert texts[0] and texts[0] == texts[1]  # greedy: the second choice read the first's copy
    assert encodes(vision) == before + 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    "data", [RED[: len(RED) // 2], b"not an image at all", b""], ids=["truncated", "text", "empty"]
)
async def test_an_image_that_does_not_decode_is_a_400_naming_its_part(
    vision: LlamaCppEngine, data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    request = chat(asking(RED, data))
    with caplog.at_level(logging.DEBUG, logger="asgi_llm.llama_cpp"):
        for call in (vision.count_tokens(request), answer(vision, request)):
            with pytest.raises(InvalidRequest) as refused:
                await call
            assert refused.value.param == "messages[0].content[1]"
    assert not [r for r in caplog.records if r.levelno > logging.DEBUG]  # the client's fault: no warning
    text, _ = await answer(vision, chat(asking(RED)))  # and the model goes on
    assert text


@pytest.mark.anyio
async def test_more_images_than_the_context_holds_is_a_context_overflow(projector: Path) -> None:
    config = ModelConfig(n_ctx=64, parallel=1, n_threads=1, mmproj=str(projector))
    async with local_engine(config) as engine:
        images = engine.context_length // image_tokens() + 1  # (llama.cpp rounds the context up)
        request = chat(asking(*(fresh() for _ in range(images))))
        assert await engine.count_tokens(request) > engine.context_length  # counted, as a client may ask first
        with pytest.raises(ContextOverflow):
            await answer(engine, request)


@pytest.mark.anyio
async def test_a_saved_prompt_keeps_its_images_across_a_restart(projector: Path, tmp_path: Path) -> None:
    """A prompt saved to `prompt_cache_dir` holds its images' cache, keyed by their hashes: the
    next process reads it back and encodes nothing."""
    config = ModelConfig(n_ctx=1024, parallel=1, n_threads=1, mmproj=str(projector), prompt_cache_dir=str(tmp_path))
    picture, story = fresh(), " ".join(f"Line {i} of the notes about the picture." for i in range(30))
    request = chat(asking(picture, text=story + " What does it show?"))
    async with local_engine(config) as engine:
        await answer(engine, request)
        assert encodes(engine) == 1
        for _ in range(100):  # the file is written on the files' own thread
            if engine.describe()["prompt_files"]["writes"]:
                break
            await asyncio.sleep(0.05)
    async with local_engine(config) as engine:
        again, finish = await answer(engine, request)  # (not always the same words: the tail is read apart)
        assert again and encodes(engine) == 0 and finish.usage.cached_tokens > image_tokens()


@pytest.mark.anyio
async def test_a_file_that_is_no_projector_for_the_model_fails_its_load_naming_it() -> None:
    with pytest.raises(ValueError, match="could not be loaded for this model"):
        async with local_engine(ModelConfig(n_ctx=256, parallel=1, n_threads=1, mmproj=default_model_path())):
            pass


@pytest.mark.anyio
async def test_a_projector_that_frames_images_with_tokens_the_model_lacks_fails_its_load(tmp_path: Path) -> None:
    """SmolVLM's layout frames each image with tokens of SmolVLM's vocabulary, which the packaged
    model lacks: llama.cpp would abort the process decoding them, so the load is refused instead."""
    smolvlm = write_projector(tmp_path / "idefics3.gguf", kind="idefics3")
    with pytest.raises(ValueError, match="vocabulary lacks"):
        async with local_engine(ModelConfig(n_ctx=256, parallel=1, n_threads=1, mmproj=str(smolvlm))):
            pass


@pytest.mark.anyio
async def test_a_model_without_a_projector_refuses_images() -> None:
    async with local_engine(ModelConfig(n_ctx=512, parallel=1, n_threads=1)) as engine:
        assert not engine.reads_images
        for call in (engine.count_tokens(chat(asking(RED))), answer(engine, chat(asking(RED)))):
            with pytest.raises(InvalidRequest) as refused:
                await call
            assert refused.value.param == "messages[0].content[0]"
