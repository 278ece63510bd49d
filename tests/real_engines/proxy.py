"""A recording TCP proxy between our server and an engine: when each answer's status line and body came.

Shared by every engine's tests. ``RecordingProxy(upstream)`` listens on 127.0.0.1 and relays bytes both ways
unchanged, reading HTTP/1.1 framing (``Content-Length`` or chunked) only to tell the exchanges of a kept-alive
connection apart. For every answer it records an ``Exchange``: the request line, the status, and the
``time.monotonic()`` at which the status line and the first body bytes reached the proxy (the test process's
clock, so a test can order them against what its client saw).

``hold(path)`` arms a gate for the next answer to a request whose path is ``path``: its status line and
headers are relayed at once, its body (for a streaming engine: the first token on) is kept back until the
test calls ``Hold.release()`` (or the hold's timeout passes, which the hold records). A test can then assert
what our server sent its client *before* it could have seen the engine's first token: causality rather
than a wall-clock bound, which holds on a loaded machine. ``upstream`` may be changed between requests
(a replica that restarts, or that serves a smaller context than the server was started against).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["Exchange", "Hold", "RecordingProxy"]

_READ = 65536


@dataclass
class Exchange:
    """One request and its answer as the proxy saw them (times are ``time.monotonic()``)."""

    request_line: str
    status: int = 0
    status_at: float = 0.0
    first_body_at: float | None = None  # when the first body bytes reached the proxy
    forwarded_body_at: float | None = None  # when they were relayed on (later than the above while held)
    body: bytearray = field(default_factory=bytearray)  # what the engine sent, framing included

    @property
    def path(self) -> str:
        parts = self.request_line.split(" ")
        return parts[1] if len(parts) > 1 else ""


@dataclass
class Hold:
    """A gate on one answer's body: armed by ``RecordingProxy.hold``."""

    path: str
    timeout: float
    exchange: Exchange | None = None
    body_arrived: threading.Event = field(default_factory=threading.Event)  # the first body bytes came
    _release: threading.Event = field(default_factory=threading.Event)
    _relayed: threading.Event = field(default_factory=threading.Event)
    timed_out: bool = False  # the body went on because the timeout passed, not ``release()``

    def release(self) -> None:
        self._release.set()

    @property
    def held(self) -> bool:
        """Whether the body is still kept back (False once relayed, by ``release()`` or the timeout)."""
        return not self._relayed.is_set()


class _Buffered:
    """Reads from a socket through a buffer, for the framing parser."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> bool:
        try:
            data = self.sock.recv(_READ)
        except OSError:
            return False
        if not data:
            return False
        self.buf += data
        return True

    def until(self, mark: bytes) -> bytes | None:
        """Everything up to and including ``mark``; None at the end of the stream."""
        while mark not in self.buf:
            if not self._fill():
                return None
        end = self.buf.index(mark) + len(mark)
        out, self.buf = self.buf[:end], self.buf[end:]
        return out

    def exactly(self, n: int) -> Iterator[bytes]:
        """``n`` bytes, in the pieces they arrive in."""
        while n > 0:
            if not self.buf and not self._fill():
                return
            piece, self.buf = self.buf[:n], self.buf[n:]
            n -= len(piece)
            yield piece

    def rest(self) -> Iterator[bytes]:
        while True:
            if self.buf:
                piece, self.buf = self.buf, b""
                yield piece
            if not self._fill():
                return


def _body(reader: _Buffered, head: bytes, *, response: bool, status: int) -> Iterator[bytes]:
    """The raw bytes of one message's body (framing included), as they arrive."""
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    if response and (100 <= status < 200 or status in (204, 304)):
        return
    if headers.get(b"transfer-encoding", b"").endswith(b"chunked"):
        while True:
            line = reader.until(b"\r\n")
            if line is None:
                return
            yield line
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    trailer = reader.until(b"\r\n")
                    if trailer is None:
                        return
                    yield trailer
                    if trailer == b"\r\n":
                        return
            yield from reader.exactly(size + 2)
    elif b"content-length" in headers:
        yield from reader.exactly(int(headers[b"content-length"]))
    elif response:
        yield from reader.rest()  # delimited by the connection's end


class RecordingProxy:
    """Relays 127.0.0.1:``port`` to ``upstream`` ("host:port"), recording every exchange."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.exchanges: list[Exchange] = []
        self._holds: deque[Hold] = deque()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hold(self, path: str, timeout: float = 120.0) -> Hold:
        """Keep back the body of the next answer to a request for ``path`` (at most ``timeout`` seconds)."""
        gate = Hold(path=path, timeout=timeout)
        with self._lock:
            self._holds.append(gate)
        return gate

    def switch(self, upstream: str) -> None:
        """Relay new connections to ``upstream`` and cut the open ones (as a replica that restarts cuts them)."""
        self.upstream = upstream
        self._cut()

    def answers(self, path: str) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if e.path == path]

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            holds, self._holds = list(self._holds), deque()
        for gate in holds:
            gate.release()
        self._cut()

    def _cut(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            # shutdown first: it wakes the relaying thread blocked in recv (close alone may not).
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    # ------------------------------------------------------------------ relaying

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            host, _, port = self.upstream.rpartition(":")
            try:
                upstream = socket.create_connection((host, int(port)))
            except OSError:
                client.close()  # as the engine would: nothing listens
                continue
            with self._lock:
                self._sockets += [client, upstream]
            requests: deque[str] = deque()
            threading.Thread(target=self._requests, args=(client, upstream, requests), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, requests), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, requests: deque[str]) -> None:
        reader = _Buffered(client)
        try:
            while (head := reader.until(b"\r\n\r\n")) is not None:
                requests.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
                upstream.sendall(head)
                for piece in _body(reader, head, response=False, status=0):
                    upstream.sendall(piece)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_WR)

    def _take_hold(self, path: str) -> Hold | None:
        with self._lock:
            for gate in self._holds:
                if gate.path == path:
                    self._holds.remove(gate)
                    return gate
        return None

    def _responses(self, upstream: socket.socket, client: socket.socket, requests: deque[str]) -> None:
        reader = _Buffered(upstream)
        try:
            while (head := reader.until(b"\r\n\r\n")) is not None:
                at = time.monotonic()
                status = int(head.split(b" ", 2)[1])
                exchange = Exchange(requests.popleft() if requests else "?", status=status, status_at=at)
                with self._lock:
                    self.exchanges.append(exchange)
                gate = self._take_hold(exchange.path)
                if gate is not None:
                    gate.exchange = exchange
                client.sendall(head)
                for piece in _body(reader, head, response=True, status=status):
                    exchange.body += piece
                    if exchange.first_body_at is None:
                        exchange.first_body_at = time.monotonic()
                        if gate is not None:
                            gate.body_arrived.set()
                            gate.timed_out = not gate._release.wait(gate.timeout)
                            gate._relayed.set()  # from here on it counts as relayed (it is, next line)
                        exchange.forwarded_body_at = time.monotonic()
                    client.sendall(piece)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_WR)
