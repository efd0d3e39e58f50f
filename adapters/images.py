"""The image forms every protocol shares, read as the wire gives them: a `data:` or `http(s)` URL
(OpenAI, Responses, Anthropic's `url` source) or bare base64 (Anthropic's `base64` source,
Ollama's `images`), and the text around them.

Nothing is decoded or fetched here: each image becomes an `ImageInput` with its `url` or
`encoded` text and the request path that names it, and the server reads it before any engine
sees it (asgi_llm/serving/images.py). A message's text holds `IMAGE_MARKER` where each image
stood; a client's own text that holds the marker is refused, naming its part, so that no text
can stand in for an image the client did not send (escaping it would change what the model
reads, and the marker is no text a client needs to send).
"""

from __future__ import annotations

from asgi_llm.core import IMAGE_MARKER, ImageInput, InvalidRequest

__all__ = ["DETAILS", "base64_image", "checked_text", "joined", "url_image"]

DETAILS = ("auto", "low", "high")
"""OpenAI's `detail`: kept for an upstream; a local model reads the image as it is."""


def checked_text(text: str, param: str) -> str:
    """`text` as it is, or a 400 naming `param` when it holds the image marker."""
    if IMAGE_MARKER in text:
        raise InvalidRequest(
            f"'{param}' holds '{IMAGE_MARKER}', which this server keeps to mark where an image stands; "
            "send images as image parts.",
            param=param,
        )
    return text


def url_image(url: str, param: str, detail: str | None = None) -> ImageInput:
    """An image by URL: `data:` (base64 or percent-encoded) or `http(s)` (fetched only from the
    hosts the server allows, by the server)."""
    if detail is not None and detail not in DETAILS:
        raise InvalidRequest(
            f"'{param}.detail' must be one of {', '.join(DETAILS)}, not '{detail}'.", param=f"{param}.detail"
        )
    scheme = url[: url.find(":") + 1].lower()
    if scheme == "data:":
        head = url[5 : url.find(",")] if "," in url else None
        if head is None:
            raise InvalidRequest(f"The data URL of '{param}' has no ',' before its data.", param=param)
        media_type = head.split(";")[0].strip().lower() or None
        return ImageInput(b"", media_type, param, url=url, detail=detail)
    if scheme in ("http:", "https:"):
        return ImageInput(b"", None, param, url=url, detail=detail)
    raise InvalidRequest(f"The image URL of '{param}' must be a data: URL or an http(s) URL.", param=param)


def base64_image(data: str, param: str, media_type: str | None = None) -> ImageInput:
    """An image as base64 text (a data URL is taken as one, as Ollama's own server does)."""
    if data[:5].lower() == "data:":
        return url_image(data, param)
    return ImageInput(b"", media_type, param, encoded=data)


def joined(pieces: list[str | ImageInput], separator: str = "") -> tuple[str, tuple[ImageInput, ...]]:
    """A message's text and images from its parts in order: each image's place holds the marker."""
    text = separator.join(IMAGE_MARKER if isinstance(piece, ImageInput) else piece for piece in pieces)
    return text, tuple(piece for piece in pieces if isinstance(piece, ImageInput))
