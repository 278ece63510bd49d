"""A refused request leaves nothing large behind for the garbage collector, on either transport.

The server collects young garbage only every 50,000 allocations (``serve/cli.py``'s tuning), so anything a
refused request leaves in a reference cycle stays until a rare full pass: a prompt refused as too long for
the context once kept its whole rendering (about 21 MB for a 1 MiB input) alive per request, and 300 such
creates on one WebSocket took a server to 6.5 GB. Measured here as a user would see it: the server
process's resident memory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from .server_process import ServerProcess, server_process

MODEL = "gpt-oss-120b"
# 256 KiB of words: a leak of the rendering added ~160 MB over the measured requests (WebSocket, before the fix).
LONG_INPUT = "word " * (1 << 16)
WARM_UP = 10
MEASURED = 100
SLACK_MB = 40


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _bodies() -> list[dict[str, object]]:
    too_long = {"model": MODEL, "input": LONG_INPUT}
    # Refused by validation after the long items were read and normalised.
    invalid = {
        "model": MODEL,
        "input": [{"role": "user", "content": LONG_INPUT}, {"type": "function_call_output", "output": "x"}],
    }
    return [too_long, invalid]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with server_process(["--context-window", "4096"]) as process:
        yield process


def _over_http(server: ServerProcess, count: int) -> None:
    with httpx.Client(base_url=server.root, timeout=120) as client:
        for i in range(count):
            body = _bodies()[i % 2]
            answer = client.post("/v1/responses", json=body)
            assert answer.status_code == 400, answer.text


def _over_websocket(server: ServerProcess, count: int) -> None:
    async def run() -> None:
        url = server.root.replace("http://", "ws://") + "/v1/responses"
        async with websockets.connect(url, max_size=None) as socket:
            for i in range(count):
                await socket.send(json.dumps({"type": "response.create", **_bodies()[i % 2]}))
                message = json.loads(await socket.recv())
                assert message["type"] == "error" and message["status"] == 400, message

    asyncio.run(run())


@pytest.mark.parametrize("send", [_over_http, _over_websocket], ids=["http", "websocket"])
def test_refused_creates_leave_the_servers_memory_where_it_was(server: ServerProcess, send) -> None:
    send(server, WARM_UP)  # caches and allocator pools reach their size
    before = _rss_mb(server.process.pid)
    send(server, MEASURED)
    after = _rss_mb(server.process.pid)
    assert after - before < SLACK_MB, f"{MEASURED} refused creates grew the server from {before:.0f} to {after:.0f} MB"
