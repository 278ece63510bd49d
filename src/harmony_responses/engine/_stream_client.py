"""The HTTP client of engine streams: one POST per engine call, its answer read as it comes, keep-alive pooled.

Hand-written on asyncio and httptools (the parser uvicorn runs on) rather than aiohttp, for this one call
only: it is made once per engine call and read chunk by chunk, a few tokens a chunk, for the whole
answer. Measured on this machine against a local server streaming five chunks, aiohttp took 235-260 µs of
CPU per request and 88-90 µs per chunk read one at a time, this 100-107 µs and 75-76 µs: under a burst
that CPU is most of the first-token latency the server adds, and flowing, most of its cost per token.
Everything else an adapter sends (start-up checks, aborts, detokenize) stays on aiohttp, where a few
hundred microseconds do not matter and its generality does.

What it does, and no more: HTTP/1.1 over TCP (TLS for ``https://`` URLs), one request at a time per
connection, bodies framed by ``Content-Length``, chunked or by the connection's end; idle connections
kept ``KEEPALIVE`` seconds and at most ``max_connections`` open (the wait for a free one bounded, like
connecting, by the connect timeout, and served by service tier, then arrival: the queue for a replica);
no redirects, cookies, proxies or compression (none is asked for). A pooled connection the engine closed
while the request was being sent (its keep-alive ran out) is replaced once, before any of the answer has
come. Failures are the ``EngineError``s ``map_errors`` gives aiohttp's, with the same words.

Flow control: an answer's unread body is bounded (``HIGH_WATER``): past it the connection is not read
until the consumer has taken what came (TCP then slows the engine). ``transport_now`` is what the
consumer's holds pause (engine/_reading.py): None once the answer is complete and its connection back in
the pool.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit

import httptools

from ._base import EngineError, EngineProtocolError, EngineUnavailable

__all__ = ["Answer", "StreamClient"]

# How long an idle connection is kept for the next request (the engines' own keep-alive is 5 s or more:
# uvicorn's default; one the engine closed first is dropped when it does).
KEEPALIVE = 30.0
# The most unread body an answer buffers before its connection stops being read.
HIGH_WATER = 1 << 20
# What a connect that ran out of time means, whether it waited for a pooled connection or for the engine.
NO_CONNECTION = "connecting timed out, or no pooled connection was free in time (raise --engine-max-connections)"


class _Target:
    __slots__ = ("head", "host", "path", "port", "ssl")

    def __init__(self, label: str, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EngineUnavailable(f"{label}: the engine URL is invalid ({url})")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default_port = self.port == (443 if self.ssl else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        lines = [f"POST {self.path} HTTP/1.1", f"Host: {host}" + ("" if default_port else f":{self.port}")]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self.head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")


# How many ranks of waiting requests (the service tiers: priority, default, flex).
RANKS = 3


class StreamClient:
    """One engine's pool of connections (``label`` names the engine in errors)."""

    def __init__(self, label: str, *, max_connections: int, connect_timeout: float, headers: dict[str, str]) -> None:
        self.label = label
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self._headers = {"Content-Type": "application/json", "User-Agent": "harmony-responses", **headers}
        self._targets: dict[str, _Target] = {}
        self._idle: deque[_Connection] = deque()
        self._open = 0  # connections open or opening
        # Requests waiting for a connection, one queue per rank (``post``'s), the lowest rank's served first.
        self._waiters: tuple[deque[asyncio.Future[None]], ...] = tuple(deque() for _ in range(RANKS))
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def post(self, url: str, body: bytes, *, rank: int = 1, headers: bytes = b"") -> Answer:
        """Send ``body`` (JSON) and wait for the answer's status line and headers; while every connection is
        busy, requests of a lower ``rank`` (0 to ``RANKS - 1``: the service tier) get the next one first.
        ``headers``: this request's own header lines, each ending CRLF (``traceparent``: ``tracing.headers``)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # Connections belong to the loop that opened them (a closed one's are dead): start afresh.
            self._idle.clear()
            for queue in self._waiters:
                queue.clear()
            self._open = 0
            self._loop = loop
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = _Target(self.label, url, self._headers)
        request = target.head + b"%d\r\n" % len(body) + headers + b"\r\n" + body
        for attempt in (1, 2):
            connection = await self._connection(loop, target, fresh=attempt == 2, rank=rank)
            answer = Answer(connection, loop)
            try:
                connection.send(request, answer)
                await answer._head
            except _Stale:
                continue  # the engine closed the pooled connection as we sent on it: once more, on a new one
            except BaseException:
                answer.close()
                raise
            return answer
        raise AssertionError("unreachable: a new connection is never stale")

    async def _connection(
        self, loop: asyncio.AbstractEventLoop, target: _Target, fresh: bool, rank: int = 1
    ) -> _Connection:
        deadline = loop.time() + self.connect_timeout
        while True:
            if not fresh:
                while self._idle:
                    connection = self._idle.pop()  # the most recently used: the least likely to have timed out
                    if connection.usable():
                        return connection
                    connection.close()
            if self._open < self.max_connections:
                break
            waiter = loop.create_future()
            queue = self._waiters[min(max(rank, 0), RANKS - 1)]
            queue.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except BaseException as exc:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken for a connection it will not take: the next one in line takes it
                if isinstance(exc, TimeoutError):
                    raise self._unavailable(NO_CONNECTION) from None
                raise
            finally:
                if waiter in queue:
                    queue.remove(waiter)
        self._open += 1
        made: list[_Connection] = []

        def protocol() -> _Connection:
            made.append(_Connection(self))
            return made[0]

        try:
            async with asyncio.timeout_at(deadline):
                _, connection = await loop.create_connection(protocol, target.host, target.port, ssl=target.ssl)
        except Exception as exc:
            if not (made and made[0].made):  # else its connection_lost counts it gone
                self._gone()
            mapped = self._connect_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        except BaseException:
            if not (made and made[0].made):
                self._gone()
            raise
        return connection

    def _connect_error(self, exc: Exception) -> Exception:
        if isinstance(exc, TimeoutError):
            return self._unavailable(NO_CONNECTION)
        if isinstance(exc, socket.gaierror):
            return self._unavailable(f"cannot connect: the host name does not resolve ({exc})")
        if isinstance(exc, ssl.SSLCertVerificationError):
            return self._unavailable(f"cannot connect: the TLS certificate was refused ({exc})")
        if isinstance(exc, ssl.SSLError):
            return self._unavailable(f"cannot connect: the TLS handshake failed ({exc})")
        if isinstance(exc, OSError):
            return self._unavailable(f"cannot connect ({exc})")
        return exc

    def _unavailable(self, what: str) -> EngineUnavailable:
        return EngineUnavailable(f"{self.label}: {what}")

    def _give_back(self, connection: _Connection) -> None:
        """An answer read to its end on a connection that stays open: the next request may take it."""
        if self._closed:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)
        self._wake()

    def _gone(self) -> None:
        """A connection closed (or failed to open): one more may be opened."""
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        for queue in self._waiters:
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return

    async def aclose(self) -> None:
        self._closed = True
        if self._idle:
            while self._idle:
                self._idle.pop().close()
            await asyncio.sleep(0)  # the transports' own closing runs at the next loop turn: let it


class _Stale(Exception):
    """A pooled connection closed before any of the answer came: the request may go again on a new one."""


class Answer:
    """One request's answer: ``status``, then its body by ``readany()``; ``close()`` at the end."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_connection",
        "_error",
        "_head",
        "_loop",
        "_paused",
        "_waiter",
        "direct",
        "status",
    )

    def __init__(self, connection: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        self._connection: _Connection | None = connection  # None once the answer is complete or closed
        # Kept rather than asked for at each wait: on Python 3.11 asyncio.get_running_loop() makes a getpid()
        # system call every time (to notice a fork), and readany waits once per engine chunk, a token each on a
        # paced stream (4.7 % of the server's GIL-held samples there, py-spy --native).
        self._loop = loop
        self._head: asyncio.Future[None] = loop.create_future()
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False  # the connection is not read until the consumer takes what came
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self.status = 0
        # Set while the stream loop waits for a read it lets the connection's callback take (engine/_reading.py):
        # called at each read instead of waking the loop; True when it took everything that came.
        self.direct: Callable[[], bool] | None = None

    def transport_now(self) -> asyncio.Transport | None:
        """The transport the rest of the answer comes on; None once it is complete (the connection pooled)."""
        connection = self._connection
        return connection.transport if connection is not None else None

    async def readany(self) -> bytes:
        """What has come since the last call (waiting for some); ``b""`` at the end of the body."""
        while (waiter := self.waiter()) is not None:
            await waiter
        return self.take()

    def waiter(self) -> asyncio.Future[None] | None:
        """None when ``take()`` has something to return (some of the body, its end, or its failure to raise);
        else a future done when it may have. ``readany`` in two halves, for the stream loop: a coroutine less
        per read, and it reads once per engine chunk."""
        if self._chunks or self._error is not None or self._connection is None:
            return None
        waiter = self._waiter
        if waiter is None or waiter.done():
            waiter = self._waiter = self._loop.create_future()
        return waiter

    def take(self) -> bytes:
        """What has come since the last call, without waiting (after ``waiter()`` said so): raises the answer's
        failure once what came before it is taken; ``b""`` at the end of the body."""
        chunks = self._chunks
        if not chunks:
            if self._error is not None:
                raise self._error
            return b""
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()  # the same list: the parser appends to it (_Connection.send)
        self._buffered = 0
        if self._paused:
            self._paused = False
            connection = self._connection
            if connection is not None and connection.transport is not None:
                connection.transport.resume_reading()
        return data

    def close(self) -> None:
        """Done with the answer: read to its end, its connection is pooled already; before it, the connection
        is closed (an engine's sign to stop)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    # Called by the connection.

    def _arrived(self, size: int) -> None:
        """A read of ``size`` bytes has added body chunks to ``_chunks``."""
        self._buffered += size
        if self._buffered > HIGH_WATER and not self._paused:
            connection = self._connection
            if connection is not None and connection.transport is not None and connection.transport.is_reading():
                connection.transport.pause_reading()
                self._paused = True
        direct = self.direct
        if direct is not None and direct():
            return
        self._wake()

    def _headers_done(self, status: int) -> None:
        self.status = status
        if not self._head.done():
            self._head.set_result(None)

    def _complete(self) -> None:
        self._connection = None
        self._wake()

    def _fail(self, error: BaseException) -> None:
        self._connection = None
        self._error = error
        if not self._head.done():
            self._head.set_exception(error)
            self._head.exception()  # retrieved: a stale connection's error is handled by post()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """One keep-alive connection to the engine; carries one answer at a time."""

    on_body: Callable[[bytes], None]  # httptools' body callback: the current answer's list of chunks (send)

    def __init__(self, client: StreamClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.answer: Answer | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.used = False  # it has carried an answer: the engine may close it as we send (keep-alive timeout)
        self.got_any = False  # some of the current answer has come
        self.framed = False  # the current answer's body has a length or is chunked (else it ends at close)
        self.idle_since = 0.0
        self.made = False  # connection_made has run: connection_lost will follow

    # The pool's side.

    def usable(self) -> bool:
        return (
            self.transport is not None
            and not self.transport.is_closing()
            and time.monotonic() - self.idle_since < KEEPALIVE
        )

    def send(self, request: bytes, answer: Answer) -> None:
        assert self.transport is not None and self.answer is None
        self.answer = answer
        # The body's chunks go straight into the answer's list: httptools calls on_body once per chunk, which is
        # once per token from an engine that streams a line per chunk (vLLM, SGLang, llama.cpp all do), and a
        # C method there costs no Python frame; the answer's bookkeeping and wake-up run once per read
        # (data_received). httptools looks its callbacks up when the parser is made, so this is set first.
        self.on_body = answer._chunks.append
        self.parser = httptools.HttpResponseParser(self)
        self.got_any = self.framed = False
        if not self.transport.is_reading():
            self.transport.resume_reading()  # a hold may have paused it under the answer before
        self.transport.write(request)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # asyncio's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.made = True

    def data_received(self, data: bytes) -> None:
        answer = self.answer
        if answer is None or self.parser is None:
            self.close()  # bytes nobody asked for: this connection can no longer be trusted
            return
        self.got_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            failed, self.answer = self.answer, None
            if failed is not None:
                failed._fail(EngineProtocolError(f"{self.client.label}: the engine's answer is not valid HTTP ({exc})"))
            self.close()
            return
        if answer._chunks:
            answer._arrived(len(data))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        answer, self.answer = self.answer, None
        if answer is not None:
            label = self.client.label
            error: EngineError | _Stale
            if not self.got_any:
                if self.used:
                    error = _Stale()
                else:
                    error = EngineProtocolError(f"{label}: the engine closed the connection ({exc or 'no answer'})")
            elif answer._head.done() and not self.framed:
                answer._complete()  # a body that ends with the connection: this is its end
                answer = None
            else:
                error = EngineProtocolError(f"{label}: the connection was cut mid-response ({exc or 'closed early'})")
            if answer is not None:
                answer._fail(error)
        elif self in self.client._idle:
            self.client._idle.remove(self)
        self.client._gone()

    # httptools' side (no exception may escape these: the parser would report its own).

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower()):
            self.framed = True

    def on_headers_complete(self) -> None:
        if self.answer is not None and self.parser is not None:
            self.answer._headers_done(self.parser.get_status_code())

    def on_message_complete(self) -> None:
        answer, self.answer = self.answer, None
        keep = self.parser is not None and self.parser.should_keep_alive()
        self.parser = None
        self.used = True
        if answer is not None:
            answer._complete()
        if keep and self.transport is not None and not self.transport.is_closing():
            self.client._give_back(self)
        else:
            self.close()
