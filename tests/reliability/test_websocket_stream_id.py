"""A WebSocket ``stream_id`` is bounded like other client-chosen names, and a refused one is never echoed
(issue 25 #11: a 1 MiB ``stream_id`` was copied into every event of its response)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from websockets.sync.client import connect

from api.helpers import MODEL

from .server_process import ServerProcess, server_process

MAX_STREAM_ID_LENGTH = 128  # http/websocket.py


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with server_process([]) as process:
        yield process


def test_an_overlong_stream_id_is_refused_without_being_echoed(server: ServerProcess) -> None:
    lane = "L" * (1 << 20)
    with connect(f"ws://127.0.0.1:{server.port}/v1/responses", max_size=None) as socket:
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi", "stream_id": lane}))
        message = socket.recv(timeout=30)
        assert len(message) < 1000  # the id is not in it
        error = json.loads(message)
        assert error["type"] == "error" and error["status"] == 400 and "stream_id" not in error
        assert error["error"]["param"] == "stream_id" and error["error"]["code"] == "string_above_max_length"
        # The socket still serves, and an id within the bound is echoed as before.
        lane = "l" * MAX_STREAM_ID_LENGTH
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi", "stream_id": lane}))
        while (event := json.loads(socket.recv(timeout=30)))["type"] != "response.completed":
            assert event["stream_id"] == lane
