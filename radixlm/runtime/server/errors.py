"""The one error type of the HTTP layer and its JSON shape."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered to the client as ``{"error": {"message", "type", "param", "code"}}``.

    That is the OpenAI error shape; the native API uses the same body (its ``message`` is what
    SGLang clients read).
    """

    def __init__(
        self,
        message: str,
        status_code: int = 400,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.param = param
        self.headers = headers  # e.g. Retry-After on a 503

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.status_code, self.param)


_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    503: "overloaded_error",
}


def error_body(message: str, status_code: int, param: str | None = None) -> dict[str, Any]:
    err_type = _TYPES.get(status_code, "server_error" if status_code >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": err_type, "param": param, "code": status_code}}


ANTHROPIC_PATH = "/v1/messages"  # this path and those under it answer errors in Anthropic's shape
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def anthropic_error_body(message: str, status_code: int) -> dict[str, Any]:
    """Anthropic's error shape: ``{"type": "error", "error": {"type", "message"}}``."""
    default = "api_error" if status_code >= 500 else "invalid_request_error"
    err_type = _ANTHROPIC_TYPES.get(status_code, default)
    return {"type": "error", "error": {"type": err_type, "message": message}}


def error_body_for_path(path: str, message: str, status_code: int) -> dict[str, Any]:
    """The error body in the shape of the API that serves ``path``."""
    if path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/"):
        return anthropic_error_body(message, status_code)
    return error_body(message, status_code)


class AnthropicError(ApiError):
    """An ``ApiError`` answered in Anthropic's shape (the Messages API's routes raise these)."""

    @classmethod
    def of(cls, error: ApiError) -> AnthropicError:
        return cls(error.message, error.status_code, error.param, error.headers)

    def body(self) -> dict[str, Any]:
        return anthropic_error_body(self.message, self.status_code)
