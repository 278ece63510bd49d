"""The span of each HTTP request and WebSocket connection (``--otel``), as ASGI middleware inside ``Observe``.

Installed only when tracing is on (``app.ObservedStarlette``), so this module is the only one importing the
OpenTelemetry API at import time. The span continues the client's W3C ``traceparent``/``tracestate``; it is
named ``METHOD route`` once routing matched (``unmatched`` otherwise), and is current for everything the
request runs, the tasks it starts included (a background response's run, a WebSocket connection's turns).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import propagate
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import tracing
from ..logs import current_request_id

__all__ = ["TraceRequests"]

_CARRIED = (b"traceparent", b"tracestate")


class TraceRequests:
    """See the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in _CARRIED
        }
        method = "WEBSOCKET" if kind == "websocket" else scope.get("method", "")
        status: dict[str, int] = {}

        async def send_traced(message: Message) -> None:
            if message["type"] in ("http.response.start", "websocket.http.response.start"):
                status["code"] = message["status"]
            elif message["type"] == "websocket.accept":
                status["code"] = 101
            await send(message)

        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.path": scope.get("path", ""),
            "harmony.request_id": current_request_id(),
        }
        with tracing.tracer().start_as_current_span(
            f"{method} {scope.get('path', '')}",
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={k: v for k, v in attributes.items() if v is not None},
            record_exception=True,
            set_status_on_exception=True,
        ) as span:
            token = tracing.REQUEST_SPAN.set(span)
            try:
                await self.app(scope, receive, send_traced)
            finally:
                tracing.REQUEST_SPAN.reset(token)
                route = getattr(scope.get("route"), "path", None)
                span.update_name(f"{method} {route or 'unmatched'}")
                if route:
                    span.set_attribute("http.route", route)
                code = status.get("code")
                if code is not None:
                    span.set_attribute("http.response.status_code", code)
                    if code >= 500:
                        span.set_status(Status(StatusCode.ERROR))
