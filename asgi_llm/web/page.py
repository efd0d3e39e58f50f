"""Serves the page's own files below the mount (`/ui`, `/ui/app.js`, `/ui/style.css`).

No key is asked for: the files are the same for everyone and carry nothing; the page sends the
key the user types with each API call it makes. The files are read from the package on the
first request, never at import. A strict Content-Security-Policy keeps the page to its own
scripts and its own origin, so what a model writes can never run as code.
"""

from __future__ import annotations

import html
from importlib import resources

from asgi_llm.http.asgi import Receive, Scope, Send, send_text
from asgi_llm.http.routing import route_path

__all__ = ["PAGE_PATHS", "WebPage"]

PAGE_PATHS = ("/ui", "/ui/{file}")
"""The routes, relative to the mount."""

_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'self'; form-action 'none'; frame-ancestors 'none'"
)
_BASE = "<!--base-->"


class WebPage:
    """`GET /ui` (the HTML) and `GET /ui/{file}` (its script and style); anything else is a 404."""

    def __init__(self) -> None:
        self._files: dict[str, bytes] = {}

    def _file(self, name: str) -> bytes:
        if name not in self._files:
            self._files[name] = (resources.files(__package__) / name).read_bytes()
        return self._files[name]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = route_path(scope)
        name = "index.html" if path == "/ui" else path.removeprefix("/ui/")
        if name not in _TYPES:
            await send_text(send, 404, "Not found.")
            return
        body = self._file(name)
        if name == "index.html":  # relative links resolve below the mount, with or without a trailing slash
            base = html.escape(scope.get("root_path", "").rstrip("/") + "/ui/", quote=True)
            body = body.replace(_BASE.encode(), f'<base href="{base}">'.encode())
        headers = [
            (b"content-type", _TYPES[name].encode()),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-cache"),
            (b"content-security-policy", _CSP.encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope.get("method") == "HEAD" else body})
