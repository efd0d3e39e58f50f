"""OpenAI's error envelope, written once: the OpenAI adapter answers in it, and so do the
middleware layers around an app that has no protocol of its own (`http.context`).

Plain values in, a TypedDict out: the caller reads them off its `LLMError`.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["ErrorBody", "ErrorDetail", "error_body", "error_type", "tag_error"]

_TYPES_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}
_TYPES_BY_CODE = {"insufficient_quota": "insufficient_quota"}  # a spent budget, as OpenAI words it


class ErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(TypedDict):
    error: ErrorDetail


def error_type(status: int, code: str | None) -> str:
    """OpenAI's `type`: the kind of error, by status (a few codes have their own)."""
    return _TYPES_BY_CODE.get(code or "") or _TYPES_BY_STATUS.get(status, "server_error")


def error_body(status: int, message: str, param: str | None, code: str | None) -> ErrorBody:
    return {"error": {"message": message, "type": error_type(status, code), "param": param, "code": code}}


def tag_error(body: Any, request_id: str) -> Any:
    """The id inside the error object, beside `message`: the SDKs read the object's known
    fields and keep the rest, so their error parsing is unchanged."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return {**body, "error": {**body["error"], "request_id": request_id}}
    return body
