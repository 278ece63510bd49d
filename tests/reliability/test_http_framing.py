"""What reaches the socket that is not a request: the API's JSON error, and bounded waits (issue 16 #10, #14)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from api.helpers import MODEL

from .server_process import ServerProcess, server_process


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with server_process(["--head-timeout", "1", "--body-timeout", "1"]) as process:
        yield process


def _raw(port: int, data: bytes, *, wait: float = 5) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks)


CLIENT_HELLO = bytes.fromhex("16030100a5010000a10303") + b"\x00" * 64  # TLS sent to the plain port


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n{}",
        b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
        CLIENT_HELLO,
        b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    ],
    ids=["bad content-length", "content-length and transfer-encoding", "tls", "100k url"],
)
def test_framing_errors_get_the_apis_json_error(server: ServerProcess, request_bytes: bytes) -> None:
    answer = _raw(server.port, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 4"), answer[:200]
    assert b"content-type: application/json" in head.lower()
    assert b"\r\nx-request-id: req_" in head.lower()  # like every other answer (http/observe.py)
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["message"]


def test_a_request_whose_head_never_ends_is_closed(server: ServerProcess) -> None:
    started = time.monotonic()
    answer = _raw(server.port, b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n", wait=10)
    assert answer == b""  # closed without an answer
    assert time.monotonic() - started < 5
    # Nothing at all sent: closed too.
    started = time.monotonic()
    assert _raw(server.port, b"", wait=10) == b""
    assert time.monotonic() - started < 5


def test_a_trickled_body_gets_408(server: ServerProcess) -> None:
    head = (
        b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{"
    )
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert time.monotonic() - started < 5
    # The server is still fine for everyone else.
    ok = httpx.post(f"{server.root}/v1/responses", json={"model": MODEL, "input": "hi"}, timeout=30)
    assert ok.status_code == 200
