"""Every exception → an OpenAI-shaped JSON error, in one place.

Body: ``{"error": {"message", "type", "param", "code"}}`` (responses-protocol.md §7.4). OpenAI uses
``type: "invalid_request_error"`` for 400, 401, 404 and 413 alike; server-side failures are
``server_error``. This module is the only one that decides statuses and wording for errors that happen
*before* a response starts; once ``response.created`` is on the wire, errors go in-band as ``error`` +
``response.failed`` (the translator's job), never as a status code.

Mapping (``to_api_error``):

    APIError              as raised (validation, auth, routing decisions in this package)
    RenderError           400, its param and code (the request cannot be rendered into Harmony)
    HTTPException         404 "Invalid URL (METHOD /path)", 405, or its status and detail
    EngineError           its status_hint and code_hint: 503 server_error engine_unavailable, or 400
                          context_length_exceeded when the engine refused a prompt longer than its context
    anything else         500 server_error, no detail: a bug, logged with its traceback
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..engine import EngineError
from ..render import RenderError

__all__ = [
    "APIError",
    "error_response",
    "exception_handlers",
    "json_response",
    "to_api_error",
]

logger = logging.getLogger("harmony_responses.api")

# The live API's wording for a server-side failure.
SERVER_ERROR_MESSAGE = "The server had an error while processing your request. Sorry about that!"


class APIError(Exception):
    """An error for the client, with the status and body fields the API would send."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def __repr__(self) -> str:
        return f"APIError({self.status}, {self.message!r}, param={self.param!r}, code={self.code!r})"


def json_response(content: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status_code=status, headers=headers, media_type="application/json")


def to_api_error(exc: BaseException, *, method: str = "", path: str = "") -> APIError:
    """The client-facing error for any exception raised before the response started."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, RenderError):
        return APIError(exc.message, param=exc.param, code=exc.code)
    if isinstance(exc, HTTPException):
        if exc.status_code == 404:
            return APIError(f"Invalid URL ({method} {path})", status=404)
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            return APIError(
                f"Invalid method for URL ({method} {path}): allowed methods are {allowed}.",
                status=405,
                headers=exc.headers,
            )
        return APIError(str(exc.detail), status=exc.status_code, headers=exc.headers)
    if isinstance(exc, EngineError):
        status = exc.status_hint
        return APIError(
            f"The engine could not take the request: {exc}",
            status=status,
            type="server_error" if status >= 500 else "invalid_request_error",
            code=exc.code_hint,
        )
    logger.error("unexpected error", exc_info=exc)
    return APIError(SERVER_ERROR_MESSAGE, status=500, type="server_error", code="server_error")


def error_response(exc: BaseException, *, method: str = "", path: str = "") -> Response:
    error = to_api_error(exc, method=method, path=path)
    return json_response(error.body(), error.status, error.headers)


async def _handle(request: Request, exc: Exception) -> Response:
    return error_response(exc, method=request.method, path=request.url.path)


# For Starlette(exception_handlers=...): the ``Exception`` entry makes ServerErrorMiddleware answer in
# JSON too, so that not even a bug shows the client a plain-text 500 or a traceback.
exception_handlers: dict[Any, Any] = {
    APIError: _handle,
    RenderError: _handle,
    HTTPException: _handle,
    EngineError: _handle,
    Exception: _handle,
}
