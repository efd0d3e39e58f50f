"""Protocol-neutral errors; each adapter renders them in its own envelope."""

from __future__ import annotations

__all__ = [
    "BadGateway",
    "ContextOverflow",
    "Forbidden",
    "GatewayTimeout",
    "InsufficientMemory",
    "InternalError",
    "InvalidRequest",
    "LLMError",
    "MethodNotAllowed",
    "ModelNotFound",
    "ModelNotReady",
    "Overloaded",
    "PayloadTooLarge",
    "QuotaExhausted",
    "RateLimited",
    "RetryLater",
    "RouteNotFound",
    "Unauthorized",
    "Unavailable",
    "Unsupported",
]


class LLMError(Exception):
    """Base of every error a client may see; `message` must be safe to show."""

    status = 500
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(LLMError):
    status = 400
    code = "invalid_request"


class Unsupported(InvalidRequest):
    """Well-formed, but asks for something this server or model cannot do."""

    code = "unsupported"


class ContextOverflow(InvalidRequest):
    code = "context_length_exceeded"


class ModelNotFound(LLMError):
    status = 404
    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(f"The model '{model}' does not exist.", param="model")
        self.model = model


class PayloadTooLarge(LLMError):
    status = 413
    code = "payload_too_large"


class Unauthorized(LLMError):
    status = 401
    code = "invalid_api_key"


class Forbidden(LLMError):
    status = 403
    code = "forbidden"


class RetryLater(LLMError):
    """Temporarily refused; rendered with a `Retry-After` header."""

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimited(RetryLater):
    status = 429
    code = "rate_limit_exceeded"


class QuotaExhausted(LLMError):
    """A budget that never renews by itself is spent: retrying will not help, so no `Retry-After`."""

    status = 429
    code = "insufficient_quota"


class Overloaded(RetryLater):
    status = 503
    code = "overloaded"


class ModelNotReady(RetryLater):
    """The model is still loading, or failed to load."""

    status = 503
    code = "model_not_ready"


class Unavailable(RetryLater):
    """What serves the model (an upstream server) cannot be reached now."""

    status = 503
    code = "service_unavailable"


class InsufficientMemory(LLMError):
    """The model cannot be loaded within the residency budget even after unloading every model
    that may be unloaded; retrying will not help until the configuration changes."""

    status = 507
    code = "insufficient_memory"


class BadGateway(LLMError):
    """What serves the model (an upstream server) answered with an error or nonsense."""

    status = 502
    code = "bad_gateway"


class GatewayTimeout(LLMError):
    """What serves the model (an upstream server) took too long to answer."""

    status = 504
    code = "gateway_timeout"


class RouteNotFound(LLMError):
    status = 404
    code = "not_found"


class MethodNotAllowed(LLMError):
    status = 405
    code = "method_not_allowed"


class InternalError(LLMError):
    status = 500
    code = "internal_error"
