"""``APIError``: an error for the client, as the OpenAI API would state it.

Every layer that refuses a request raises it (the request's validation, the run's checks against the
engine and the tools); the HTTP layer alone turns it into a status and a JSON body (``http/errors.py``).
It holds the API's fields only, so that the layers below HTTP never need to know how it is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["APIError", "not_found", "shutting_down", "store_unavailable"]


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


def not_found(kind: str, id: str) -> APIError:
    # The API's wording ("Response with id 'resp_x' not found."), param and code null, status 404.
    return APIError(f"{kind} with id '{id}' not found.", status=404)


def shutting_down() -> APIError:
    # New work refused while the server stops (its running responses get their grace): 503, worth a retry.
    return APIError("The server is shutting down; try again.", status=503, type="server_error", code="shutting_down")


def store_unavailable(reason: object) -> APIError:
    # The store cannot keep what the request would store (down, full, refusing, its file deleted): refused before
    # anything is handed out that would be a 404 later. 503: worth a retry, once the store is back.
    return APIError(
        f"The store could not keep this request's data ({reason}); nothing was stored. Try again later.",
        status=503,
        type="server_error",
        code="store_unavailable",
    )
