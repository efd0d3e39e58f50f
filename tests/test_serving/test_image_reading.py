"""An image's header read without decoding it (core/image_header.py), and a request's images read
and held to the limits before any engine sees them (serving/images.py): every refusal a 400
naming the part, never a 500."""

from __future__ import annotations

import base64
import dataclasses
import struct
from typing import Any

import anyio.to_thread
import pytest

from asgi_llm.config import ModelConfig, Settings
from asgi_llm.core import IMAGE_MARKER, ChatRequest, ImageInput, InvalidRequest, Message, Unsupported
from asgi_llm.core.image_header import NotAnImage, TruncatedImage, image_header
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.serving import images
from asgi_llm.serving.images import ImageRules, check_images, image_rules, read_images

from .pictures import png

DEFAULTS = image_rules(Settings())  # the settings' own limits, no host allowed

pytestmark = pytest.mark.anyio


def jpeg(width: int, height: int, frame: int = 0xC0) -> bytes:
    """A JPEG's start: SOI, an APP0 segment, then a frame header of `frame`'s kind."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = bytes([0xFF, frame]) + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof


GIF = b"GIF89a" + struct.pack("<HH", 320, 200) + b"\x00" * 8
BMP = b"BM" + b"\x00" * 12 + struct.pack("<Iii", 40, 64, -48) + b"\x00" * 30
WEBP_LOSSY = b"RIFF\x00\x00\x00\x00WEBPVP8 \x00\x00\x00\x00" + b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", 100, 50)
WEBP_LOSSLESS = b"RIFF\x00\x00\x00\x00WEBPVP8L\x00\x00\x00\x00\x2f" + struct.pack("<I", (99) | (49 << 14)) + b"\x00" * 8
WEBP_EXTENDED = (
    b"RIFF\x00\x00\x00\x00WEBPVP8X\x00\x00\x00\x00"
    + b"\x00" * 4
    + (99).to_bytes(3, "little")
    + (49).to_bytes(3, "little")
)


@pytest.mark.parametrize(
    ("data", "media_type", "size"),
    [
        (png(3, 2), "image/png", (3, 2)),
        (jpeg(640, 480), "image/jpeg", (640, 480)),
        (jpeg(16, 8, frame=0xC2), "image/jpeg", (16, 8)),
        (GIF, "image/gif", (320, 200)),
        (BMP, "image/bmp", (64, 48)),
        (WEBP_LOSSY, "image/webp", (100, 50)),
        (WEBP_LOSSLESS, "image/webp", (100, 50)),
        (WEBP_EXTENDED, "image/webp", (100, 50)),
    ],
    ids=["png", "jpeg", "jpeg-progressive", "gif", "bmp", "webp-lossy", "webp-lossless", "webp-extended"],
)
def test_the_header_says_the_format_and_size(data: bytes, media_type: str, size: tuple[int, int]) -> None:
    header = image_header(data)
    assert (header.media_type, (header.width, header.height)) == (media_type, size)


@pytest.mark.parametrize(
    "data",
    [b"", b"hello, world", b"%PDF-1.7\n", b"\x00\x00\x01\x00", jpeg(8, 8, frame=0xC9), b"BM" + b"\x00" * 40],
    ids=["empty", "text", "pdf", "ico", "jpeg-arithmetic", "bmp-no-header-size"],
)
def test_what_is_no_image_read_is_refused(data: bytes) -> None:
    with pytest.raises(NotAnImage):
        image_header(data)


@pytest.mark.parametrize(
    "data",
    [png(3, 2)[:20], jpeg(8, 8)[:22], b"\xff\xd8\xff\xd9", GIF[:8], BMP[:20], WEBP_LOSSY[:26], png(0, 0)[:24]],
    ids=["png", "jpeg", "jpeg-no-frame", "gif", "bmp", "webp", "no-pixels"],
)
def test_a_truncated_header_is_refused(data: bytes) -> None:
    with pytest.raises(TruncatedImage):
        image_header(data)


def request(*parts: ImageInput, text: str | None = None) -> ChatRequest:
    content = text if text is not None else "look: " + IMAGE_MARKER * len(parts)
    return ChatRequest(model="m", messages=(Message("user", content, images=parts),))


def encoded(data: bytes, part: str = "messages[0].images[0]") -> ImageInput:
    return ImageInput(b"", None, part, encoded=base64.b64encode(data).decode())


def data_url(data: bytes, part: str = "messages[0].content[1]") -> ImageInput:
    url = "data:image/jpeg;base64," + base64.b64encode(data).decode()
    return ImageInput(b"", "image/jpeg", part, url=url, detail="low")


async def test_images_are_decoded_and_typed_by_their_bytes() -> None:
    image = png(4, 4)
    read = await read_images(request(encoded(image), data_url(image, "messages[0].content[3]")), DEFAULTS)
    assert isinstance(read, ChatRequest)
    first, second = read.messages[0].images
    assert (first.data, first.media_type, first.encoded) == (image, "image/png", None)
    assert (second.data, second.media_type, second.detail) == (image, "image/png", "low")  # the bytes say PNG
    assert second.url is not None and second.url.startswith("data:image/jpeg;base64,")  # kept for an upstream


async def test_base64_with_line_breaks_and_no_padding_is_read() -> None:
    text = base64.encodebytes(png(2, 2)).decode().rstrip("=\n")
    read = await read_images(request(ImageInput(b"", None, "images[0]", encoded=text)), DEFAULTS)
    assert isinstance(read, ChatRequest) and read.messages[0].images[0].data == png(2, 2)


async def test_a_percent_encoded_data_url_is_read() -> None:
    url = "data:image/gif," + "".join(f"%{b:02X}" for b in GIF)
    read = await read_images(request(ImageInput(b"", None, "p", url=url)), DEFAULTS)
    assert isinstance(read, ChatRequest) and read.messages[0].images[0].data == GIF


async def test_a_request_without_images_is_left_as_it_is() -> None:
    plain = ChatRequest(model="m", messages=(Message("user", "hi"),))
    assert await read_images(plain, DEFAULTS) is plain


async def test_large_base64_is_decoded_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    run_sync = anyio.to_thread.run_sync

    async def counted(function: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(function)
        return await run_sync(function, *args, **kwargs)

    monkeypatch.setattr(images.anyio.to_thread, "run_sync", counted)
    small = png(2, 2)
    large = small + b"\x00" * (images.OFF_LOOP_BYTES)  # trailing bytes after IEND: the header is the same
    await read_images(request(encoded(small)), DEFAULTS)
    assert calls == []
    read = await read_images(request(encoded(large)), DEFAULTS)
    assert len(calls) == 1 and isinstance(read, ChatRequest) and read.messages[0].images[0].data == large


PART = "messages[0].images[0]"
REFUSED = [
    pytest.param(
        request(ImageInput(b"", None, PART, encoded="not base64!")), DEFAULTS, "not valid base64", id="base64"
    ),
    pytest.param(request(encoded(b"just some text")), DEFAULTS, "cannot be read", id="not-an-image"),
    pytest.param(request(encoded(b"%PDF-1.7\n%...")), DEFAULTS, "PNG, JPEG, GIF, WebP, BMP", id="pdf"),
    pytest.param(request(encoded(png(3, 3)[:20])), DEFAULTS, "truncated", id="truncated"),
    pytest.param(
        request(encoded(png(3, 3))), dataclasses.replace(DEFAULTS, max_bytes=40), "max_image_bytes (40)", id="bytes"
    ),
    pytest.param(
        request(encoded(png(3, 3) * 30)),
        dataclasses.replace(DEFAULTS, max_bytes=100),
        "max_image_bytes",
        id="bytes-before-decoding",
    ),
    pytest.param(request(encoded(png(5, 4))), dataclasses.replace(DEFAULTS, max_pixels=19), "5x4 pixels", id="pixels"),
    pytest.param(
        request(ImageInput(png(5, 4), None, PART)),
        dataclasses.replace(DEFAULTS, max_pixels=19),
        "max_image_pixels",
        id="given-bytes",
    ),
]


@pytest.mark.parametrize(("asked", "rules", "words"), REFUSED)
async def test_a_bad_image_is_a_400_naming_its_part(asked: ChatRequest, rules: ImageRules, words: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await read_images(asked, rules)
    assert (refused.value.status, refused.value.param) == (400, PART)
    assert words in refused.value.message


async def test_more_images_than_max_images_names_the_first_too_many() -> None:
    parts = [encoded(png(1, 1), f"messages[0].images[{k}]") for k in range(3)]
    with pytest.raises(InvalidRequest) as refused:
        await read_images(request(*parts), dataclasses.replace(DEFAULTS, max_images=2))
    assert refused.value.param == "messages[0].images[2]" and "max_images (2)" in refused.value.message


@pytest.mark.parametrize(
    "asked",
    [
        request(text="no images here " + IMAGE_MARKER),
        request(encoded(png(1, 1)), text=IMAGE_MARKER * 2),
        ChatRequest(model="m", messages=(Message("assistant", IMAGE_MARKER),)),
    ],
    ids=["marker-without-image", "more-markers-than-images", "assistant-history"],
)
async def test_a_marker_with_no_image_of_its_own_is_refused(asked: ChatRequest) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await read_images(asked, DEFAULTS)
    assert IMAGE_MARKER in refused.value.message


def test_a_model_that_takes_no_images_refuses_them_by_part() -> None:
    config = ModelConfig(id="m", path="unused.gguf")
    asked = request(ImageInput(png(1, 1), "image/png", "messages[2].content[1]"))
    with pytest.raises(Unsupported) as refused:
        check_images(asked, FakeEngine(config), "m")
    assert (refused.value.status, refused.value.param) == (400, "messages[2].content[1]")
    assert "takes no images" in refused.value.message
    check_images(asked, FakeEngine(config, images=True), "m")
    check_images(ChatRequest(model="m", messages=(Message("user", "hi"),)), FakeEngine(config), "m")


async def test_a_remote_image_is_refused_while_no_host_is_allowed() -> None:
    web = ImageInput(b"", None, "messages[0].content[0]", url="https://images.example/cat.png")
    with pytest.raises(InvalidRequest) as refused:
        await read_images(request(web), DEFAULTS)
    assert refused.value.param == "messages[0].content[0]"
    assert "remote images are off" in refused.value.message and "image_url_hosts" in refused.value.message
