"""The engine benchmark's client, in its own process: per-token arrival times of concurrent streams.

``python _latency_client.py MODE URL STREAMS REPEATS BODY_FILE [STAGGER_MS]`` POSTs STREAMS concurrent streams
(REPEATS times in a row) over raw asyncio connections, all at once or each STAGGER_MS after the previous one
(each stream's clock starts at its own request), and prints, per stream, the arrival time (seconds since its
request was sent) of every *text* token as JSON. MODE ``direct`` reads the vLLM fake (one ``"token_ids":[``
per token; the first three ids are the final channel's header), MODE ``ours`` reads our server (one
``response.output_text.delta`` event per text token). Counting byte patterns, not parsing, keeps the client's
own cost out of the figures (see ``_sse_client.py``).

With ``LATENCY_STARTS=1`` in the environment it prints ``{"starts": [...], "arrivals": [...], "machine": ...}``
instead: per stream also when the response began, to the client: for MODE ``ours`` the arrival of
``response.created``, for MODE ``direct`` that of the answer's first bytes (its status line: the engine's
admission, the earliest any layer in front of it can say the request was taken); and ``machine``, the whole
machine's busy and idle CPU seconds (all cores, from Linux's ``/proc/stat``; null elsewhere) from just before
the first counted stream was sent to just after the last one ended: what every process, the servers', the
engine's and this client's, spent in the bursts' own time, the warm-up stream and the interpreters' start left out.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from urllib.parse import urlsplit

HEADER_TOKENS = 3  # <|channel|> final <|message|>: no text event for them


async def one(
    mode: str, host: str, port: int, path: str, body: bytes, delay: float = 0.0
) -> tuple[float | None, list[float]]:
    """One stream: when it began (see the module docstring) and every text token's arrival."""
    await asyncio.sleep(delay)
    marker = b'"token_ids":[' if mode == "direct" else b"event: response.output_text.delta\n"
    began_marker = b"HTTP/1.1 " if mode == "direct" else b"event: response.created\n"
    began: float | None = None
    reader, writer = await asyncio.open_connection(host, port)
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    t0 = time.perf_counter()
    writer.write(request)
    await writer.drain()
    arrivals: list[float] = []
    tail = b""
    while True:
        data = await reader.read(1 << 16)
        now = time.perf_counter() - t0
        if not data:
            break
        window = tail + data
        if began is None and began_marker in window:
            began = now
        new = window.count(marker) - tail.count(marker)
        arrivals.extend([now] * new)
        tail = window[-(max(len(marker), len(began_marker)) - 1) :]
    writer.close()
    if mode == "direct":
        arrivals = arrivals[HEADER_TOKENS:-1]  # text tokens only: not the header, not <|return|>
    return began, arrivals


def machine_seconds() -> tuple[float, float] | None:
    """The machine's busy and idle CPU seconds so far, all cores (None where ``/proc/stat`` cannot be read).
    Busy is user, nice, system, irq and softirq time; idle is idle and iowait; time stolen by a hypervisor is
    neither (no process here ran in it). The kernel counts them in ticks (10 ms here): a burst of 64 streams of
    400 tokens is some 80 ticks over two cores, so one burst's share is rough and many bursts' summed is not."""
    try:
        with open("/proc/stat") as f:
            user, nice, system, idle, iowait, irq, softirq = (int(v) for v in f.readline().split()[1:8])
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / hz, (idle + iowait) / hz


async def run(
    mode: str, url: str, streams: int, repeats: int, body: bytes, stagger: float
) -> tuple[list[tuple[float | None, list[float]]], list[float] | None]:
    """Every counted stream's (began, arrivals), and the machine's busy and idle seconds while they ran."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    await one(mode, host, port, parts.path, body)  # warm-up
    out: list[tuple[float | None, list[float]]] = []
    before = machine_seconds()
    for _ in range(repeats):
        out += await asyncio.gather(*(one(mode, host, port, parts.path, body, i * stagger) for i in range(streams)))
    after = machine_seconds()
    machine = [after[0] - before[0], after[1] - before[1]] if before and after else None
    return out, machine


if __name__ == "__main__":
    mode, url, streams, repeats, body_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    stagger = float(sys.argv[6]) / 1000 if len(sys.argv) > 6 else 0.0
    with open(body_file, "rb") as f:
        body = f.read()
    results, machine = asyncio.run(run(mode, url, streams, repeats, body, stagger))
    if os.environ.get("LATENCY_STARTS") == "1":
        starts, arrivals = [b for b, _ in results], [a for _, a in results]
        print(json.dumps({"starts": starts, "arrivals": arrivals, "machine": machine}))
    else:
        print(json.dumps([a for _, a in results]))
