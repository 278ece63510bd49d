"""The benchmark's client, in its own process: POST streaming requests, read SSE, report timings as JSON.

``python _sse_client.py URL STREAMS REPEATS`` prints {"events": …, "seconds": …} for the best of REPEATS
runs of STREAMS concurrent streams (each must end with a terminal event).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import httpx

BODY = {"model": "gpt-oss-20b", "input": "Write a long answer.", "stream": True}
TERMINAL = (b"event: response.completed", b"event: response.incomplete", b"event: response.failed")


async def one_stream(client: httpx.AsyncClient, url: str) -> int:
    events = 0
    terminal = False
    async with client.stream("POST", url, json=BODY) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                events += 1
                terminal = terminal or line.encode().startswith(TERMINAL)
    if not terminal:
        raise RuntimeError("stream ended without a terminal event")
    return events


async def run(url: str, streams: int, repeats: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=streams + 4, max_keepalive_connections=streams + 4)
    best: dict[str, float] | None = None
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await one_stream(client, url)  # warm-up: connections, caches
        for _ in range(repeats):
            start = time.perf_counter()
            counts = await asyncio.gather(*(one_stream(client, url) for _ in range(streams)))
            elapsed = time.perf_counter() - start
            if best is None or elapsed < best["seconds"]:
                best = {"events": float(sum(counts)), "seconds": elapsed}
    assert best is not None
    return best


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))))
