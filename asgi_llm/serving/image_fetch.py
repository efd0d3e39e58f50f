"""A remote image (`http(s)` URL), fetched only from a host the settings allow.

`image_url_hosts` names the hosts (`images.example.com`, or `*.example.com` for its
subdomains); none by default, so nothing is fetched until an operator allows a host. A fetch
follows no redirect to another host, reads at most `max_image_bytes`, and ends within
`image_fetch_timeout`; whatever goes wrong is a 400 naming the part, since the URL is the
client's. httpx is the `upstream` extra: without it a remote image is a 400 saying so. This is
the one place a request can make the server reach the network on the client's behalf.
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING

import anyio

from ..core import InvalidRequest

if TYPE_CHECKING:
    import httpx

__all__ = ["MAX_REDIRECTS", "allowed_host", "fetch_image"]

MAX_REDIRECTS = 3
"""Redirects followed within the same host; one to another host is refused at once."""


def allowed_host(host: str, hosts: tuple[str, ...]) -> bool:
    """Whether `host` is one of `hosts`: a name itself, or below a `*.` entry (case aside)."""
    host = host.lower().rstrip(".")
    for entry in (h.lower().rstrip(".") for h in hosts):
        if host == entry or (entry.startswith("*.") and host.endswith(entry[1:])):
            return True
    return False


def _host(url: str, part: str) -> str:
    host = urllib.parse.urlsplit(url).hostname
    if not host:
        raise InvalidRequest(f"The image URL of '{part}' names no host.", param=part)
    return host


async def fetch_image(url: str, part: str, hosts: tuple[str, ...], max_bytes: int, timeout: float) -> bytes:
    """The bytes at `url`, or a 400 naming `part`."""
    host = _host(url, part)
    if not hosts:
        raise InvalidRequest(
            f"'{part}' is a remote image, and remote images are off on this server: send the image as "
            "base64 (a data: URL), or an operator adds its host to the `image_url_hosts` setting.",
            param=part,
        )
    if not allowed_host(host, hosts):
        raise InvalidRequest(
            f"'{part}' is an image on '{host}', which is not in this server's `image_url_hosts`: send the "
            "image as base64 (a data: URL), or an operator adds the host to that setting.",
            param=part,
        )
    try:
        import httpx
    except ImportError:
        raise InvalidRequest(
            f"'{part}' is a remote image; fetching one needs httpx: pip install 'asgi-llm[upstream]'.", param=part
        ) from None
    try:
        with anyio.fail_after(timeout):
            async with httpx.AsyncClient(follow_redirects=False, timeout=timeout, trust_env=False) as client:
                return await _follow(client, url, host, part, max_bytes)
    except (TimeoutError, httpx.TimeoutException):
        raise InvalidRequest(f"The image at '{part}' took longer than {timeout:g} s to fetch.", param=part) from None
    except httpx.HTTPError as error:
        raise InvalidRequest(
            f"The image at '{part}' could not be fetched ({type(error).__name__}).", param=part
        ) from None


async def _follow(client: httpx.AsyncClient, url: str, host: str, part: str, max_bytes: int) -> bytes:
    for _ in range(MAX_REDIRECTS + 1):
        async with client.stream("GET", url) as response:
            if response.is_redirect:
                url = str(response.url.join(response.headers.get("location", "")))
                if url[: url.find(":")].lower() not in ("http", "https") or _host(url, part).lower() != host.lower():
                    raise InvalidRequest(
                        f"The image at '{part}' redirects to another host, which is not followed.", param=part
                    )
                continue
            if response.status_code != 200:
                raise InvalidRequest(
                    f"The image at '{part}' could not be fetched: its host answered {response.status_code}.",
                    param=part,
                )
            return await _body(response, part, max_bytes)
    raise InvalidRequest(f"The image at '{part}' redirects more than {MAX_REDIRECTS} times.", param=part)


async def _body(response: httpx.Response, part: str, max_bytes: int) -> bytes:
    def too_big() -> InvalidRequest:
        return InvalidRequest(
            f"The image at '{part}' is more than this server's max_image_bytes ({max_bytes}).", param=part
        )

    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise too_big()
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise too_big()
        chunks.append(chunk)
    return b"".join(chunks)
