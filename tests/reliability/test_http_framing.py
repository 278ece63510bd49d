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


def _dechunk(body: bytes) -> bytes:
    """A chunked body decoded; fails on anything that is not well-formed chunked encoding to its end."""
    out = b""
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n", body[:50]
            return out
        out += body[:size]
        assert body[size : size + 2] == b"\r\n"
        body = body[size + 2 :]


def test_a_streamed_answer_is_well_formed_http_from_its_head_to_its_end(server: ServerProcess) -> None:
    """The head goes out with the first events and the last chunk with the end of the body (fewer writes):
    what the client reads is still one well-formed response, every event in it, ending with completed."""
    body = json.dumps({"model": MODEL, "input": "hi", "stream": True, "store": False}).encode()
    request = (
        f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    head, _, chunked = _raw(server.port, request, wait=30).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
    events = [line[7:] for line in _dechunk(chunked).split(b"\n") if line.startswith(b"event: ")]
    assert events[:2] == [b"response.created", b"response.in_progress"] and events[-1] == b"response.completed"


def test_heads_without_a_body_and_pipelined_requests_are_all_answered(server: ServerProcess) -> None:
    """A HEAD answer has no body write to carry its head; two requests sent at once get two answers."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"HEAD /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.count(b"HTTP/1.1 200 OK\r\n") == 3, answer[:500]
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.rstrip().endswith(b"}")  # the models list, last


def test_expect_100_continue_is_answered_before_the_body(server: ServerProcess) -> None:
    body = json.dumps({"model": MODEL, "input": "hi"}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nConnection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer[:300]
    assert json.loads(payload)["status"] == "completed"
