"""The images a request carries, read before any engine sees them.

An adapter leaves each `ImageInput` unread (a `data:` URL, an `http(s)` URL or base64 text:
adapters/images.py). Here each is decoded — off the event loop when large — or fetched from a
host the settings allow (`image_fetch.py`), its format and size read from its header
(core/image_header.py) and held to the settings' limits. Every refusal is a 400 naming the part.
A model that takes no images refuses a request that has some (`check_images`), naming the first.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import urllib.parse
from dataclasses import dataclass

import anyio

from ..config import Settings
from ..core import (
    IMAGE_MARKER,
    ChatRequest,
    Engine,
    GenerationRequest,
    ImageInput,
    ImageReader,
    InvalidRequest,
    Unsupported,
)
from ..core.image_header import ImageHeader, NotAnImage, TruncatedImage, image_header
from .image_fetch import fetch_image

__all__ = ["OFF_LOOP_BYTES", "ImageRules", "check_images", "image_rules", "read_images"]

OFF_LOOP_BYTES = 1 << 20
"""Base64 text longer than this is decoded (and its header read) on a worker thread."""


@dataclass(frozen=True)
class ImageRules:
    """The settings' image limits (`max_image_bytes`, `max_image_pixels`, `max_images`) and the
    hosts remote images are fetched from (`image_url_hosts`, within `image_fetch_timeout`); their
    defaults are the settings' own (`image_rules(Settings())`)."""

    max_bytes: int
    max_pixels: int
    max_images: int
    hosts: tuple[str, ...]
    timeout: float


def image_rules(settings: Settings) -> ImageRules:
    """The rules of these settings (`Settings`, read as the pool holds it: reloads apply)."""
    return ImageRules(
        settings.max_image_bytes,
        settings.max_image_pixels,
        settings.max_images,
        tuple(settings.image_url_hosts),
        settings.image_fetch_timeout,
    )


def _images(request: ChatRequest) -> list[ImageInput]:
    return [image for message in request.messages for image in message.images]


async def read_images(request: GenerationRequest, rules: ImageRules) -> GenerationRequest:
    """`request` with every image read and checked (a request without images as it is)."""
    if not isinstance(request, ChatRequest):
        return request
    for message in request.messages:
        if message.content.count(IMAGE_MARKER) != len(message.images):
            where = message.images[0].part if message.images else "messages"
            raise InvalidRequest(
                f"A message's text holds '{IMAGE_MARKER}', which marks where an image stands ('{where}'); "
                "send images as image parts.",
                param=where,
            )
    images = _images(request)
    if not images:
        return request
    if len(images) > rules.max_images:
        raise InvalidRequest(
            f"The request has {len(images)} images, more than this server's max_images ({rules.max_images}): "
            f"'{images[rules.max_images].part}' is one too many.",
            param=images[rules.max_images].part,
        )
    messages = [
        dataclasses.replace(m, images=tuple([await _read(i, rules) for i in m.images])) if m.images else m
        for m in request.messages
    ]
    return dataclasses.replace(request, messages=tuple(messages))


async def _read(image: ImageInput, rules: ImageRules) -> ImageInput:
    if image.encoded is not None:
        data, header = await _decoded(image.encoded, image.part, rules)
    elif image.url is not None and image.url[:5].lower() == "data:":
        data, header = await _decoded(_data_url(image.url, image.part), image.part, rules)
    elif image.url is not None:
        data = await fetch_image(image.url, image.part, rules.hosts, rules.max_bytes, rules.timeout)
        header = _checked(data, image.part, rules)
    else:
        data, header = image.data, _checked(image.data, image.part, rules)
    return dataclasses.replace(image, data=data, media_type=header.media_type, encoded=None)


def _data_url(url: str, part: str) -> str | bytes:
    """A data URL's payload: its base64 text, or the bytes of a percent-encoded one."""
    head, _, payload = url.partition(",")
    if head.lower().endswith(";base64"):
        return payload
    return urllib.parse.unquote_to_bytes(payload)


async def _decoded(payload: str | bytes, part: str, rules: ImageRules) -> tuple[bytes, ImageHeader]:
    if isinstance(payload, bytes):
        return payload, _checked(payload, part, rules)
    if len(payload) // 4 * 3 > rules.max_bytes + 2:  # refused before decoding
        raise _too_big(len(payload) // 4 * 3, part, rules)
    if len(payload) > OFF_LOOP_BYTES:
        return await anyio.to_thread.run_sync(_decode_and_check, payload, part, rules)
    return _decode_and_check(payload, part, rules)


def _decode_and_check(text: str, part: str, rules: ImageRules) -> tuple[bytes, ImageHeader]:
    text = "".join(text.split())  # line breaks, as base64 tools write them
    try:
        data = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"The image at '{part}' is not valid base64.", param=part) from None
    return data, _checked(data, part, rules)


def _checked(data: bytes, part: str, rules: ImageRules) -> ImageHeader:
    if len(data) > rules.max_bytes:
        raise _too_big(len(data), part, rules)
    try:
        header = image_header(data)
    except NotAnImage as error:
        raise InvalidRequest(f"The image at '{part}' cannot be read: {error}", param=part) from None
    except TruncatedImage as error:
        raise InvalidRequest(f"The image at '{part}' is truncated: {error}", param=part) from None
    if header.pixels > rules.max_pixels:
        raise InvalidRequest(
            f"The image at '{part}' is {header.width}x{header.height} pixels, more than this server's "
            f"max_image_pixels ({rules.max_pixels}).",
            param=part,
        )
    return header


def _too_big(size: int, part: str, rules: ImageRules) -> InvalidRequest:
    return InvalidRequest(
        f"The image at '{part}' is {size} bytes, more than this server's max_image_bytes ({rules.max_bytes}).",
        param=part,
    )


def check_images(request: object, engine: Engine, model_id: str) -> None:
    """A request with images for a model that takes none is refused, naming the first image."""
    if not isinstance(request, ChatRequest):
        return
    images = _images(request)
    if images and not (isinstance(engine, ImageReader) and engine.reads_images):
        raise Unsupported(
            f"'{images[0].part}' is an image, and the model '{model_id}' takes no images (a local model "
            "needs its projector, `mmproj`, in the server's configuration).",
            param=images[0].part,
        )
