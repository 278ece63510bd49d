"""Every exception → an OpenAI-shaped JSON error, in one place.

Body: ``{"error": {"message", "type", "param", "code"}}`` (responses-protocol.md §7.4). OpenAI uses
``type: "invalid_request_error"`` for 400, 401, 404 and 413 alike; server-side failures are
``server_error``. This module is the only one that decides statuses and wording for errors that happen
*before* a response starts; once ``response.created`` is on the wire, errors go in-band as ``error`` +
``response.failed`` (the translator's job), never as a status code.

Mapping (``to_api_error``):

    APIError              as raised (validation, auth, routing and run decisions)
    HTTPException         404 "Invalid URL (METHOD /path)", 405, or its status and detail
    what the layers below raise before a response starts: as ``run.api_error`` maps it (a render error
                          400, an engine that refused 503 or 400 ``context_length_exceeded``)
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

from ..errors import APIError
from ..run import REFUSALS, api_error

__all__ = [
    "APIError",
    "error_response",
    "exception_handlers",
    "json_response",
    "to_api_error",
]

logger = logging.getLogger("harmony_responses.http")

# The live API's wording for a server-side failure.
SERVER_ERROR_MESSAGE = "The server had an error while processing your request. Sorry about that!"


def json_response(content: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status_code=status, headers=headers, media_type="application/json")


def to_api_error(exc: BaseException, *, method: str = "", path: str = "") -> APIError:
    """The client-facing error for any exception raised before the response started."""
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
    error = api_error(exc)
    if error is not None:
        return error
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
    **dict.fromkeys(REFUSALS, _handle),
    HTTPException: _handle,
    Exception: _handle,
}
