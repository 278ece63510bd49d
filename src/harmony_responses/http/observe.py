"""Request ids and HTTP metrics, as pure ASGI middleware around the whole app.

Every request and WebSocket handshake gets an id: the client's ``x-request-id`` when it is usable
(``logs.accepted_request_id``: up to 512 printable characters), else ``req_`` + 48 hex digits. It is set for
everything the request runs (``logs.request_scope``: each log line names it, in every layer and in the
tasks the request starts) and returned as ``x-request-id`` on the answer, whatever it is: a stream, an error
of any layer, a 404, a 500 from a bug, a WebSocket handshake accepted or denied.

Each answer is counted in ``harmony_responses_http_requests_total`` by route template (``/v1/responses/{id}``,
``unmatched`` for a 404 that matched none, never the raw path), method (``WEBSOCKET`` for a handshake,
``other`` for a method HTTP does not define),
status (101 for an accepted socket) and the error body's ``code`` (``""`` for none). The code is read from
the JSON body of an answer of 400 and more, the only place every layer's errors agree on; those bodies
are small, and the successful path reads nothing.

It wraps Starlette's own error middleware (``app.ObservedStarlette``), so that the 500 it writes for a bug
also carries the id and is counted.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..logs import accepted_request_id, request_scope
from ..metrics import HTTP_REQUEST_DURATION, HTTP_REQUESTS, labelled
from .connection import body_writer

__all__ = ["BODY_SEND", "BODY_WRITE", "REQUEST_ID_HEADER", "Observe"]

REQUEST_ID_HEADER = b"x-request-id"
# The scope key of this middleware's own ``send`` (the server's, observed), for an endpoint's body writes once
# its answer has started and its first delta is out (http/streaming.py). Every wrapper between here and the
# endpoint (quotas' and tracing's, ``FirstTokensFirst``, Starlette's error and exception middleware and its
# route's) acts on a response's start alone, ``FirstTokensFirst`` on its first delta too, and passes each
# later body write on unchanged: a coroutine frame apiece, five per write of a streamed response.
BODY_SEND = "harmony_responses.body_send"
# The scope key of the same writes made without a coroutine: a function that writes a body chunk (more to come)
# straight to the socket and returns True, or returns False when ``BODY_SEND`` must be awaited instead
# (``connection.body_writer``). Absent under another server than ours.
BODY_WRITE = "harmony_responses.body_write"
# The most of an error body read for its code: the API's error bodies are a few hundred bytes.
MAX_ERROR_BODY = 64 * 1024
UNMATCHED = "unmatched"
# The method label's values: every other method a client sends counts as OTHER (labels must stay few).
METHODS = frozenset({"GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS", "WEBSOCKET"})
OTHER = "other"


def _request_id_header(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == REQUEST_ID_HEADER:
            return value.decode("latin-1")
    return None


class _Answer:
    """What the app sent back, as far as the counting needs it."""

    __slots__ = ("body", "status")

    def __init__(self) -> None:
        self.status: int | None = None
        self.body: list[bytes] | None = None  # collected for an error's code; None: not collecting

    def code(self) -> str:
        if not self.body:
            return ""
        try:
            error = orjson.loads(b"".join(self.body)).get("error")
        except (orjson.JSONDecodeError, AttributeError):
            return ""
        code = error.get("code") if isinstance(error, dict) else None
        if not isinstance(code, str):
            return ""
        # The API's codes are a few dozen snake_case words; anything else (a code passed on from elsewhere)
        # must not make a series of its own.
        return code if len(code) <= 64 and code.replace("_", "").isalnum() and code.isascii() else OTHER


class Observe:
    """See the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        arrived = time.monotonic()
        request_id = accepted_request_id(_request_id_header(scope))
        header = (REQUEST_ID_HEADER, request_id.encode("latin-1"))
        answer = _Answer()

        # A plain function returning send's awaitable, not a coroutine of its own: each body write of a
        # stream passes here, and an extra coroutine frame per write cost 0.3 µs of an event's 6.
        def send_observed(message: Message) -> Awaitable[None]:
            if answer.status is not None and answer.body is None:
                return send(message)  # the answer has started and nothing is collected: pass it on
            kind = message["type"]
            if kind in ("http.response.start", "websocket.http.response.start"):
                answer.status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), header]}
                if answer.status >= 400:
                    answer.body = []
            elif kind == "websocket.accept":
                answer.status = 101
                message = {**message, "headers": [*message.get("headers", ()), header]}
            elif kind == "websocket.close" and answer.status is None:
                answer.status = 403  # closed before the handshake was answered: the server sends a 403
            elif answer.body is not None and kind in ("http.response.body", "websocket.http.response.body"):
                if sum(map(len, answer.body)) < MAX_ERROR_BODY:
                    answer.body.append(message.get("body", b""))
            return send(message)

        if kind == "http":
            scope[BODY_SEND] = send_observed
            write = body_writer(send)
            if write is not None:
                scope[BODY_WRITE] = write
        context = request_scope(request_id, arrived)
        context.__enter__()
        try:
            await self.app(scope, receive, send_observed)
        except BaseException:
            # The id stays set: uvicorn's own line about the exception, logged next in this task (uvicorn runs
            # each request in a task of its own, which ends with it), names the request too.
            if answer.status is None:
                answer.status = 500
            raise
        else:
            context.__exit__(None, None, None)
        finally:
            # The scope belongs to the connection's request cycle, and these close over the cycle's send: left
            # there, they would make the cycle a reference cycle, freed only by the garbage collector.
            scope.pop(BODY_SEND, None)
            scope.pop(BODY_WRITE, None)
            self._count(scope, answer, arrived)

    @staticmethod
    def _count(scope: Scope, answer: _Answer, arrived: float) -> None:
        route: Any = scope.get("route")
        endpoint = getattr(route, "path", None) or UNMATCHED
        method = "WEBSOCKET" if scope["type"] == "websocket" else scope.get("method", "")
        if method not in METHODS:
            method = OTHER  # a client's made-up method must not make a series of its own
        status = answer.status if answer.status is not None else 500
        labelled(HTTP_REQUESTS, endpoint, method, str(status), answer.code()).inc()
        labelled(HTTP_REQUEST_DURATION, endpoint, method).observe(time.monotonic() - arrived)
