"""Kubernetes `Status` error bodies: the only shape an error from this API server takes."""

from __future__ import annotations

import json
from http import HTTPStatus

from aiohttp import web

# The `reason` Kubernetes clients key on, per HTTP status (apimachinery metav1.StatusReason).
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(code: int, reason: str, message: str) -> dict[str, object]:
    """The `Status` object (apiVersion v1) for a failed request."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def status_response(code: int, reason: str, message: str) -> web.Response:
    """An aiohttp response carrying a `Status` body with the given HTTP code."""
    return web.Response(
        status=code,
        body=json.dumps(status_body(code, reason, message)).encode(),
        content_type="application/json",
    )


class ApiError(Exception):
    """A request that fails with a `Status`; raised by handlers, rendered by the error middleware."""

    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code) or HTTPStatus(code).phrase.replace(" ", "")

    def response(self) -> web.Response:
        return status_response(self.code, self.reason, self.message)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def service_unavailable(message: str) -> ApiError:
    return ApiError(503, message)
