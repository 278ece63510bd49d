"""tokentrace — a response's per-token debug trace: prompt tokens, engine calls, every generated token, the
translator's state at it, the events it caused, tool calls and recoveries from malformed Harmony.

Off by default. ``--trace`` traces every stored response; ``--trace-header`` lets a client ask for one with
the ``x-harmony-trace: 1`` request header (``REQUESTED`` carries it from the HTTP layer to the run). The
trace is kept in the store beside its response (same owner, deleted with it, same retention) and served by
``GET /v1/responses/{id}/trace`` as a self-contained HTML page (``page.render_page``) or as JSON.

This is not OpenTelemetry: it is a debugging record of one response, token by token.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from ._page import render_page
from ._recorder import TRACE_VERSION, Recorder

__all__ = ["DEFAULT_MAX_BYTES", "HEADER", "REQUESTED", "TRACE_VERSION", "Recorder", "TraceOptions", "render_page"]

HEADER = "x-harmony-trace"
# A few thousand tokens' trace is a few hundred KB; 8 MiB holds a long agent turn.
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
# Set by the HTTP layer for the request being handled: the client sent ``x-harmony-trace: 1``.
REQUESTED: ContextVar[bool] = ContextVar("harmony_trace_requested", default=False)


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """Which responses are traced, and how large a trace may grow.

    Args:
        every: trace every stored response (``--trace``).
        header: trace those whose request carries ``x-harmony-trace: 1`` (``--trace-header``).
        max_bytes: a trace stops recording tokens and events past about this size (``--trace-max-bytes``).
    """

    every: bool = False
    header: bool = False
    max_bytes: int = DEFAULT_MAX_BYTES

    def wanted(self) -> bool:
        """Whether the request being handled is traced."""
        return self.every or (self.header and REQUESTED.get())


def requested(value: str | None) -> bool:
    """Whether a header value asks for a trace (``1``, ``true``, ``yes``)."""
    return value is not None and value.strip().lower() in ("1", "true", "yes")
