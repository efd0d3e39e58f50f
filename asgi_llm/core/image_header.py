"""What an image's first bytes say: its format and its size, read without decoding it.

The formats are those llama.cpp's multimodal library decodes (stb_image): PNG, JPEG (baseline
and progressive), GIF, WebP and BMP. Anything else is `NotAnImage`; bytes that begin as one of
them but end before their size is written are `TruncatedImage`. Pure: no I/O, no decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FORMATS", "ImageHeader", "NotAnImage", "TruncatedImage", "image_header"]

FORMATS = ("PNG", "JPEG", "GIF", "WebP", "BMP")
"""The formats read, in the words an error uses."""


class NotAnImage(ValueError):
    """The bytes are none of `FORMATS` (or a kind of one the decoder cannot read)."""


class TruncatedImage(ValueError):
    """The bytes begin as an image but end before its header says its size."""


@dataclass(frozen=True)
class ImageHeader:
    media_type: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


def _le(data: bytes, at: int, size: int) -> int:
    return int.from_bytes(data[at : at + size], "little")


def _be(data: bytes, at: int, size: int) -> int:
    return int.from_bytes(data[at : at + size], "big")


def _need(data: bytes, size: int, kind: str) -> None:
    if len(data) < size:
        raise TruncatedImage(f"The {kind} image ends before its header does.")


def _png(data: bytes) -> ImageHeader:
    _need(data, 24, "PNG")
    if data[12:16] != b"IHDR":
        raise TruncatedImage("The PNG image has no header chunk (IHDR) first.")
    return ImageHeader("image/png", _be(data, 16, 4), _be(data, 20, 4))


def _gif(data: bytes) -> ImageHeader:
    _need(data, 10, "GIF")
    return ImageHeader("image/gif", _le(data, 6, 2), _le(data, 8, 2))


_BMP_HEADERS = {12, 16, 40, 52, 56, 64, 108, 124}
"""The sizes of the info headers BMP files carry (core, OS/2 2.x, info, v2 to v5)."""


def _bmp(data: bytes) -> ImageHeader:
    _need(data, 26, "BMP")
    if _le(data, 14, 4) not in _BMP_HEADERS:
        raise NotAnImage("The data begins as a BMP image but has no header size a BMP has.")
    if _le(data, 14, 4) == 12:  # OS/2's core header: 16-bit sizes
        return ImageHeader("image/bmp", _le(data, 18, 2), _le(data, 20, 2))
    width = int.from_bytes(data[18:22], "little", signed=True)
    height = int.from_bytes(data[22:26], "little", signed=True)  # negative: rows top-down
    return ImageHeader("image/bmp", abs(width), abs(height))


def _webp(data: bytes) -> ImageHeader:
    _need(data, 30, "WebP")
    chunk = data[12:16]
    if chunk == b"VP8 ":  # lossy: a key frame's start code, then 14-bit sizes
        if data[23:26] != b"\x9d\x01\x2a":
            raise TruncatedImage("The WebP image's first frame has no start code.")
        return ImageHeader("image/webp", _le(data, 26, 2) & 0x3FFF, _le(data, 28, 2) & 0x3FFF)
    if chunk == b"VP8L":  # lossless: a signature byte, then 14 bits each of size minus one
        bits = _le(data, 21, 4)
        return ImageHeader("image/webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X":  # extended: the canvas, 24 bits each of size minus one
        return ImageHeader("image/webp", _le(data, 24, 3) + 1, _le(data, 27, 3) + 1)
    raise NotAnImage("The WebP image's first chunk is none of VP8, VP8L and VP8X.")


_JPEG_READ = {0xC0, 0xC1, 0xC2}
"""Baseline, extended and progressive frames (Huffman): what stb_image decodes."""
_JPEG_OTHER = {0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
"""Lossless, hierarchical and arithmetic-coded frames: JPEG, but not one stb_image decodes."""


def _jpeg(data: bytes) -> ImageHeader:
    at = 2
    while True:
        while at < len(data) and data[at] == 0xFF:  # a marker, after any fill bytes
            at += 1
        _need(data, at + 1, "JPEG")
        marker = data[at]
        at += 1
        if marker == 0xD8 or marker == 0x01 or 0xD0 <= marker <= 0xD7:
            continue  # markers that stand alone
        if marker == 0xD9:
            raise TruncatedImage("The JPEG image ends before its frame header.")
        _need(data, at + 2, "JPEG")
        length = _be(data, at, 2)
        if marker in _JPEG_READ:
            _need(data, at + 7, "JPEG")
            return ImageHeader("image/jpeg", _be(data, at + 5, 2), _be(data, at + 3, 2))
        if marker in _JPEG_OTHER:
            raise NotAnImage("The JPEG image is lossless, hierarchical or arithmetic-coded, which is not read.")
        if length < 2:
            raise TruncatedImage("The JPEG image has a segment of no length.")
        at += length


_SIGNATURES: tuple[tuple[bytes, Callable[[bytes], ImageHeader]], ...] = (
    (b"\x89PNG\r\n\x1a\n", _png),
    (b"\xff\xd8\xff", _jpeg),
    (b"GIF87a", _gif),
    (b"GIF89a", _gif),
    (b"BM", _bmp),
)


def image_header(data: bytes) -> ImageHeader:
    """The format and size `data` says it has, or `NotAnImage` / `TruncatedImage`."""
    reader = next((read for signature, read in _SIGNATURES if data.startswith(signature)), None)
    if reader is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        reader = _webp
    if reader is None:
        raise NotAnImage(f"The data is not an image in a format this server reads ({', '.join(FORMATS)}).")
    header = reader(data)
    if header.width == 0 or header.height == 0:
        raise TruncatedImage("The image's header gives it no pixels.")
    return header
