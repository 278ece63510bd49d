"""What the layers below raise before a response starts, as the client's ``APIError``: mapped in one place.

    RenderError    400, its param and code (the request cannot be rendered into Harmony)
    EngineError    its status_hint and code_hint: 503 server_error engine_unavailable, or 400
                   context_length_exceeded when the engine refused a prompt longer than its context
    StoreError     503 server_error store_unavailable (the store failed a read or write the request needed)
    anything else  None: not the client's doing (the HTTP layer answers 500 and logs it)

Once ``response.created`` is on the wire, failures go in-band as ``error`` + ``response.failed`` (the
translator's job), never through here.
"""

from __future__ import annotations

from ..engine import EngineError
from ..errors import APIError, store_unavailable
from ..render import RenderError
from ..store import StoreError

__all__ = ["REFUSALS", "api_error"]

# The exception classes ``api_error`` maps, for frameworks that dispatch handlers by class.
REFUSALS: tuple[type[Exception], ...] = (APIError, RenderError, EngineError, StoreError)


def api_error(exc: BaseException) -> APIError | None:
    """The client-facing error for ``exc`` raised before the response started; None when it is a bug."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, RenderError):
        return APIError(exc.message, param=exc.param, code=exc.code)
    if isinstance(exc, EngineError):
        status = exc.status_hint
        return APIError(
            f"The engine could not take the request: {exc}",
            status=status,
            type="server_error" if status >= 500 else "invalid_request_error",
            code=exc.code_hint,
        )
    if isinstance(exc, StoreError):
        return store_unavailable(exc)
    return None
