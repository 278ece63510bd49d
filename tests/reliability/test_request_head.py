"""A request's head is bounded in size and in fields: 431 with the API's JSON error, then the connection closes
(issue 25 #3).

Before: an endless header value was read until the head timeout (92 MB in 19 s on one connection, 13 s of
server CPU), and 16 MiB heads or 100,000 headers were accepted.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from .server_process import ServerProcess, server_process

MAX_HEAD_BYTES = 64 * 1024  # the defaults (http/connection.py)
MAX_HEADERS = 100
# What a client may push before it notices the close: the head bound plus what the socket buffers hold.
SENT_BOUND = 16 * 1024 * 1024


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with server_process([]) as process:
        yield process


def _answer(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except (TimeoutError, ConnectionResetError):
        pass
    return b"".join(chunks)


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed before all of it was sent: the answer is still there to read
        return _answer(sock)


def _assert_431(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"content-type: application/json" in head.lower() and b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "request_header_fields_too_large"


def test_an_endless_header_value_is_refused_once_the_bound_is_passed(server: ServerProcess) -> None:
    """The client never ends its header; it is told 431 while it is still sending, and cannot push on."""
    sent = 0
    stop = threading.Event()
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:

        def send() -> None:
            nonlocal sent
            try:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: ")
                chunk = b"a" * 65536
                while not stop.is_set() and sent < 4 * SENT_BOUND:
                    sock.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # the server closed the connection

        sender = threading.Thread(target=send)
        sender.start()
        try:
            answer = _answer(sock)
        finally:
            stop.set()
            sender.join()
    _assert_431(answer)
    assert sent < SENT_BOUND, f"the server took in {sent} bytes of one header"


@pytest.mark.parametrize(
    "fields",
    [
        [b"X-Big: " + b"b" * (16 * 1024 * 1024)],  # one 16 MiB header, sent at once
        [b"X-Big-%d: " % i + b"b" * 8000 for i in range(9)],  # 72 KB in fields each of a usual size
    ],
    ids=["16 MiB header", "nine 8 KB headers"],
)
def test_a_head_over_the_bound_gets_431(server: ServerProcess, fields: list[bytes]) -> None:
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(f + b"\r\n" for f in fields) + b"\r\n"
    _assert_431(_exchange(server.port, head))


def test_more_header_fields_than_the_bound_get_431(server: ServerProcess) -> None:
    fields = b"".join(b"X-F%d: 1\r\n" % i for i in range(MAX_HEADERS))  # with Host: one too many
    _assert_431(_exchange(server.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields + b"\r\n"))
    many = b"".join(b"X-F%d: 1\r\n" % i for i in range(100_000))
    _assert_431(_exchange(server.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + many + b"\r\n"))


def test_heads_within_the_bounds_are_served(server: ServerProcess) -> None:
    # Up to the bounds: 100 fields (98 besides Host and Connection), about 60 KB.
    fields = b"".join(b"X-F%d: " % i + b"v" * 600 + b"\r\n" for i in range(MAX_HEADERS - 2))
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields + b"Connection: close\r\n\r\n"
    assert len(head) < MAX_HEAD_BYTES
    assert _exchange(server.port, head).startswith(b"HTTP/1.1 200 OK\r\n")
    # A large body followed by a pipelined request in the same write: the body is not counted as a head.
    body = json.dumps({"items": [], "metadata": {"k": "v" * 500}}).encode() + b" " * (300 * 1024)
    request = (
        b"POST /v1/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body
    answer = _exchange(server.port, request + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert answer.count(b"HTTP/1.1 200 OK\r\n") == 2, answer[:300]


def test_the_bounds_are_options() -> None:
    with server_process(["--max-head-bytes", "4096", "--max-headers", "10"]) as small:
        fields = b"".join(b"X-F%d: 1\r\n" % i for i in range(8))  # ten with Host and Connection
        head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + fields
        assert _exchange(small.port, head + b"\r\n").startswith(b"HTTP/1.1 200 OK\r\n")
        _assert_431(_exchange(small.port, head + b"X-F8: 1\r\n\r\n"))
        _assert_431(
            _exchange(small.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * 4096 + b"\r\n\r\n")
        )


def test_two_host_headers_are_a_400(server: ServerProcess) -> None:
    """RFC 9112 §3.2: the loopback check and the app could each read a different one."""
    answer = _exchange(server.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert json.loads(body)["error"]["code"] == "invalid_host"
