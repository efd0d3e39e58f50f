"""The web page: a chat playground and an operator view, plain files shipped in the package."""

from .page import PAGE_PATHS, WebPage

__all__ = ["PAGE_PATHS", "WebPage"]
