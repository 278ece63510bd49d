"""The benchmark's client, in its own process: POST streaming requests, read SSE, report timings as JSON.

``python _sse_client.py URL STREAMS REPEATS`` prints {"events": …, "seconds": …} for the best of REPEATS
runs of STREAMS concurrent streams (each must end with a terminal event).

It speaks HTTP/1.1 over a raw asyncio connection and only counts ``event:`` lines, because a full HTTP
client parsing every line costs more per event (~20 µs with httpx's aiter_lines) than the servers being
measured, which would hide the difference between them.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from urllib.parse import urlsplit

# store: false measures the streaming path itself; bench/store_bench.py measures what storing adds.
BODY = json.dumps({"model": "gpt-oss-20b", "input": "Write a long answer.", "stream": True, "store": False}).encode()
TERMINALS = (b"event: response.completed\n", b"event: response.incomplete\n", b"event: response.failed\n")


async def one_stream(host: str, port: int, path: str) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n".encode()
        + BODY
    )
    await writer.drain()
    events = 0
    tail = b""
    terminal = False
    while True:
        data = await reader.read(1 << 16)
        if not data:
            break
        window = tail + data
        events += window.count(b"\nevent: ") - tail.count(b"\nevent: ")
        terminal = terminal or any(t in window for t in TERMINALS)
        tail = window[-32:]
    writer.close()
    if not terminal:
        raise RuntimeError("stream ended without a terminal event")
    return events


async def run(url: str, streams: int, repeats: int) -> dict[str, float]:
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
    await one_stream(host, port, path)  # warm-up
    best: dict[str, float] | None = None
    for _ in range(repeats):
        start = time.perf_counter()
        counts = await asyncio.gather(*(one_stream(host, port, path) for _ in range(streams)))
        elapsed = time.perf_counter() - start
        if best is None or elapsed < best["seconds"]:
            best = {"events": float(sum(counts)), "seconds": elapsed}
    assert best is not None
    return best


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))))
