"""The HTTP/1.1 connection: uvicorn's httptools protocol, with the API's JSON for framing errors and a bound
on how long a request's head may take.

uvicorn answers a request it cannot parse (a bad ``Content-Length``, both ``Content-Length`` and
``Transfer-Encoding``, TLS sent to the plain port, an overlong URL) with a plain-text 400; here it is the
API's error object, like every other answer. uvicorn bounds the idle time between requests but not the
time a client takes to send a request's head: 300 half-sent requests stayed open for good, before any
authentication. A connection whose head is not complete within ``HEAD_TIMEOUT`` is closed. (The body's
read time is bounded by the endpoint: ``responses.read_json_body``.)

Nor does it bound a head's size: one endless header value sent for 19 s was 92 MB taken in (httptools
grows the value by concatenation, quadratic CPU), and 100,000 headers were accepted. A head larger than
``MAX_HEAD_BYTES`` or with more than ``MAX_HEADERS`` fields gets 431, as h11 and node answer; the parser
holds an unfinished header value out of reach, so what has arrived of a head is counted read by read
and the answer comes as soon as the bound is passed. Two ``Host`` fields are a 400 (RFC 9112 §3.2).

uvicorn writes a response's status line and headers the moment the app starts the response, and its body
in a write of its own: two socket sends where one would do, and on loopback a send is as costly as the rest
of a short response's handling. Each request's head is held until the response's first body write and sent
with it (``_HeadWithBody``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from ..errors import APIError
from ..ids import random_id
from ..metrics import HTTP_REQUESTS

__all__ = [
    "DRAIN_EXTENSION",
    "HEAD_TIMEOUT",
    "MAX_HEADERS",
    "MAX_HEAD_BYTES",
    "ApiHttpProtocol",
    "ApiWebSocketProtocol",
    "answering",
    "api_http_protocol",
    "body_received",
    "body_writer",
    "when_gone",
]

# The scope extension through which a WebSocket endpoint tells the protocol it is still running responses.
DRAIN_EXTENSION = "harmony_responses.drain"

# The attribute of a uvicorn request cycle (of ApiHttpProtocol's) holding when_gone's callback.
_GONE = "harmony_responses_gone"

# The endpoint label of a request that could not be parsed (metrics.HTTP_REQUESTS).
UNPARSED = "unparsed"

# Seconds from a connection's start (or from a new request's first byte on a kept-alive connection) to the
# end of the request's headers: generous for any real client, short for a slowloris.
HEAD_TIMEOUT = 20.0
# A request's head: its request line and header fields. Codex's largest is under 2 KiB and a browser's
# cookies a few KiB; nginx takes 4 × 8 KiB lines by default, Apache 100 fields of 8 KiB, node 16 KiB in all.
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100


class _Refused(Exception):
    """Raised in a parser callback to stop parsing: the protocol answers its ``_refusal`` and closes."""


class ApiHttpProtocol(HttpToolsProtocol):
    """``uvicorn.Config(http=ApiHttpProtocol)``: see the module docstring."""

    head_timeout = HEAD_TIMEOUT
    max_head_bytes = MAX_HEAD_BYTES
    max_headers = MAX_HEADERS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        # Between a message's end (or the connection's start) and its next head's end, every byte is head.
        self._in_head = True
        self._head_bytes = 0  # what has arrived of the head, read by read (one read at most uncounted)
        self._fields = 0
        self._hosts = 0
        self._refusal: APIError | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        cycle = self.cycle
        super().connection_lost(exc)
        if sys.version_info < (3, 12) and hasattr(self.transport, "_read_ready_cb"):
            # Before 3.12 asyncio's socket transport keeps its read callback, a method of its own, once closed
            # (CPython gh-100348, fixed in 3.12 by the same clearing): every connection's transport, socket and
            # buffers would wait for the garbage collector instead of going with the connection.
            self.transport._read_ready_cb = None
        if cycle is not None and cycle.disconnected:  # the response was not complete
            gone = getattr(cycle, _GONE, None)
            if gone is not None:
                setattr(cycle, _GONE, None)
                gone()

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            # All of it, even if the head ends inside it: on_headers_complete measures a finished head exactly.
            # A head that begins inside a read (pipelined after a body) is counted from the next read.
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.max_head_bytes and not self.transport.is_closing():
            self._send_error(self._head_too_large())

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._fields = self._hosts = 0
        if self._head_timer is None:  # armed: a new connection's first request, timed from its start
            self._arm_head_timer()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self._fields > self.max_headers:
            self._refuse(
                APIError(
                    f"The request has more than {self.max_headers} header fields.",
                    status=431,
                    code="request_header_fields_too_large",
                )
            )
        if name.lower() == b"host":
            self._hosts += 1
            if self._hosts > 1:  # RFC 9112 §3.2: which one would LoopbackHosts and the app each read?
                self._refuse(APIError("The request has more than one Host header.", code="invalid_host"))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        self._in_head = False
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)  # ": ", CRLF
        if size > self.max_head_bytes:
            self._refuse(self._head_too_large())
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:  # None: an upgrade (WebSocket)
            setattr(cycle, _GONE, None)  # when_gone's callback
            transport = cycle.transport = _HeadWithBody(self.transport)  # type: ignore[assignment]
            completed = cycle.on_response

            def on_response() -> None:  # a response without a body write (HEAD): its head, then the rest
                transport.flush()
                completed()

            cycle.on_response = on_response

    def on_message_complete(self) -> None:
        self._in_head, self._head_bytes = True, 0
        super().on_message_complete()

    def _head_too_large(self) -> APIError:
        return APIError(
            f"The request's head (its request line and header fields) is larger than {self.max_head_bytes} bytes.",
            status=431,
            code="request_header_fields_too_large",
        )

    def _refuse(self, error: APIError) -> None:
        # The parser turns the exception into an HttpParserError, which uvicorn answers with send_400_response.
        self._refusal = error
        raise _Refused(error.message)

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self._send_error(self._refusal or APIError(f"{msg} The request could not be parsed as HTTP/1.1."))

    def _send_error(self, error: APIError) -> None:
        """Answer ``error`` (a request that never reaches the app) and close the connection."""
        self._cancel_head_timer()
        body = orjson.dumps(error.body())
        # Never reaches the app: the id and the count that http/observe.py gives every other answer.
        HTTP_REQUESTS.labels(UNPARSED, "", str(error.status), "").inc()
        head = [STATUS_LINE[error.status], b"x-request-id: " + random_id("req").encode() + b"\r\n"]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
            ]
        )
        self.transport.write(b"".join(head) + body)
        self.transport.close()


class _HeadWithBody:
    """The transport as one request's response writes to it: its head goes out with its first body write.

    The head is the response's first write that starts a status line (``100 Continue`` is not one: it is
    sent at once, before the response). Whatever ends the response first (a body write, a close) sends it.
    """

    __slots__ = ("_head", "_held", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._head: bytes | None = None
        self._held = False  # the head has been seen: nothing else is held

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head + data)
        elif not self._held and data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 100 "):
            self._held = True
            self._head = data
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Send the head if it is still held."""
        head, self._head = self._head, None
        if head is not None and not self._transport.is_closing():
            self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def body_received(receive: Any) -> bool:
    """Whether the request's whole body has arrived already, so that the next ``receive()`` returns all of it
    at once: uvicorn's ``receive`` is its request cycle's, which knows (False for any other server's, whose
    requests only miss the shortcuts this allows)."""
    cycle = getattr(receive, "__self__", None)
    return getattr(cycle, "more_body", True) is False


def body_writer(send: Any) -> Callable[[bytes], bool] | None:
    """A writer of a streamed response's next body chunk straight to the socket, past uvicorn's ``send``; None
    when ``send`` is not one of ``ApiHttpProtocol``'s requests' (another server's).

    It writes what ``send({"type": "http.response.body", "body": body, "more_body": True})`` would (the chunk in
    the chunked encoding) and returns True, when nothing else is owed first: the response has started chunked,
    is not complete, its client is not gone and the socket is not write-paused. Otherwise it writes nothing and
    returns False, and the caller awaits ``send`` (which waits for the socket to drain, or ends the response).
    uvicorn's ``send`` is a coroutine run once per body write, a token a write on a paced engine: it and the
    wrappers' frames cost more than the write's own Python.
    """
    cycle = getattr(send, "__self__", None)
    if not hasattr(cycle, _GONE):
        return None
    flow = cycle.flow

    def write(body: bytes) -> bool:
        if (
            flow.write_paused
            or cycle.disconnected
            or cycle.response_complete
            or not cycle.response_started
            or cycle.chunked_encoding is not True
        ):
            return False
        cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True

    return write


def when_gone(receive: Any, callback: Callable[[], None]) -> Callable[[], None] | None:
    """Have ``callback`` called once if the client goes away before the response to ``receive``'s request is
    complete, straight from the connection's loss; returns what stops that. None when ``receive`` is not one of
    ``ApiHttpProtocol``'s requests: the caller watches ``receive()`` for ``http.disconnect`` itself.

    The ASGI way is a task waiting on ``receive()`` for the whole response, cancelled at its end: a task, a
    future and a cancellation's exception per request (with the close's task, ``streaming._shielded``, 4 % of a
    one-token stream's CPU in an A/B run).
    """
    cycle = getattr(receive, "__self__", None)
    if not hasattr(cycle, _GONE):
        return None
    if cycle.disconnected:
        callback()
        return _nothing
    setattr(cycle, _GONE, callback)
    # What receive() does before it waits: reading stays on (paused by a large body, say), so that the
    # connection's loss is seen while the response has nothing to write.
    cycle.flow.resume_reading()

    def stop() -> None:
        setattr(cycle, _GONE, None)

    return stop


def _nothing() -> None:
    return None


def answering(connection: object) -> bool:
    """Whether a connection of uvicorn's ``server_state.connections`` has a response under way: an HTTP request
    not yet answered in full, or a WebSocket running responses (what a shutdown's grace waits for)."""
    if isinstance(connection, HttpToolsProtocol):
        return connection.cycle is not None and not connection.cycle.response_complete
    drain = getattr(connection, "scope", {}).get("extensions", {}).get(DRAIN_EXTENSION)
    return drain is not None and drain.busy()


def api_http_protocol(
    head_timeout: float = HEAD_TIMEOUT, *, max_head_bytes: int = MAX_HEAD_BYTES, max_headers: int = MAX_HEADERS
) -> type[ApiHttpProtocol]:
    """The protocol class for ``uvicorn.Config(http=…)`` with its own bounds on a request's head."""
    bounds = {"head_timeout": head_timeout, "max_head_bytes": max_head_bytes, "max_headers": max_headers}
    return type("ApiHttpProtocol", (ApiHttpProtocol,), bounds)


class ApiWebSocketProtocol(WebSocketsSansIOProtocol):
    """``uvicorn.Config(ws=ApiWebSocketProtocol)``: a server shutdown lets the socket's running responses end first.

    uvicorn closes every WebSocket at once when the server shuts down (1012), which would cancel a response
    mid-stream, while an SSE stream gets ``--shutdown-grace`` to finish (and is then ended failed, in-band).
    An endpoint that registered a drain in ``scope["extensions"][DRAIN_EXTENSION]`` (``http/websocket.py``)
    and still runs responses gets the same: the drain is told to close the socket once they have ended
    (or at the backstop, when uvicorn stops waiting).
    """

    def shutdown(self) -> None:
        drain = getattr(self, "scope", {}).get("extensions", {}).get(DRAIN_EXTENSION)
        if drain is not None and self.handshake_complete and not self.close_sent and drain.busy():
            drain.close_when_idle(super().shutdown)
            return
        super().shutdown()
