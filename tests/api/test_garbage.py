"""A finished request leaves no reference cycle behind: what it made goes when it ends, not at the garbage
collector's next pass.

Each request used to leave three cycles: its start-lane state and the timer holding its context
(run/turns.py), the request cycle and the writers in its scope (http/observe.py), and asyncio's socket
transport and its own read callback (CPython before 3.12, http/connection.py). The collector then found some 40
objects a request, and its passes over a burst's objects took 20-40 ms, in the middle of later requests' starts.

Through the real server on 127.0.0.1 with the server's own connection protocol, and the collector off while
the requests run: once each response has been read to its end and its connection closed, none of those
objects is left. The client is a blocking socket, so the only asyncio transports are the server's.
"""

from __future__ import annotations

import gc
import socket
import time
from asyncio.selector_events import _SelectorSocketTransport  # type: ignore[attr-defined]

import pytest
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from harmony_responses.http.connection import api_http_protocol
from harmony_responses.run.turns import Start

from .conftest import Serve
from .helpers import ANSWER, MODEL

KINDS = (Start, RequestResponseCycle, _SelectorSocketTransport)
# How long the server may take to let go of a closed connection's objects (it does at once; this is a bound).
SETTLE = 10.0


def _alive() -> dict[str, int]:
    counts = dict.fromkeys((kind.__name__ for kind in KINDS), 0)
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance() reads __class__, and some objects of other libraries alive in the
        # process (torch's deprecated ones) warn when asked.
        if type(obj) in KINDS:
            counts[type(obj).__name__] += 1
    return counts


def _at_most(counts: dict[str, int], bound: dict[str, int]) -> bool:
    return all(counts[kind] <= bound[kind] for kind in counts)


def _request(port: int, body: bytes) -> bytes:
    """The whole answer to one request on a connection of its own, which the server closes after it."""
    head = (
        f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + body)
        received = b""
        while data := sock.recv(1 << 16):
            received += data
    return received


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "json"])
@pytest.mark.parametrize("store", [True, False], ids=["stored", "not stored"])
def test_a_finished_request_leaves_nothing_for_the_garbage_collector(serve: Serve, stream: bool, store: bool) -> None:
    live = serve([ANSWER] * 4, http=api_http_protocol())
    port = live.port
    body = (
        f'{{"model": "{MODEL}", "input": "Say hi.", "stream": {str(stream).lower()}, "store": {str(store).lower()}}}'
    ).encode()
    _request(port, body)  # the first request's one-time work (caches, the store's tables) is not a request's
    gc.collect()
    before = _alive()
    gc.disable()
    try:
        for _ in range(3):
            answer = _request(port, body)
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
            assert b"response.completed" in answer if stream else b'"status":"completed"' in answer
        # At most what there was before: the first request's last objects may have gone since.
        deadline = time.monotonic() + SETTLE
        while not _at_most(left := _alive(), before) and time.monotonic() < deadline:
            time.sleep(0.01)  # the server's thread finishing the last request's task
        assert _at_most(left, before), f"{left} alive after the requests, {before} before"
    finally:
        gc.enable()
