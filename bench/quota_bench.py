"""What per-key quotas cost: events per second and time to the first delta, for a key without limits and a
limited one (limits too high to refuse anything), on the same server, in one run.

Run: ``python bench/quota_bench.py``. One server subprocess (replay engine, 200-token answers one token per
chunk at zero delay, the SQLite store in a temporary folder, its quota counters beside it) with two keys: an
``--api-key`` one (nothing counted) and a ``[[keys]]`` one with requests, tokens and concurrency limits (one
admission transaction and one slot per request, tokens taken in lots of 64). A client process runs rounds of
``STREAMS`` concurrent streams, taking turns (unlimited, limited, unlimited again, the order rotated each
round); the last is the floor, how far two measurements of the same thing differ on this machine now. It
prints each mode's median events/s and first-delta p50 and the ratios limited / unlimited and again /
unlimited.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from server_bench import BIN, completion, free_port, wait_healthy

STREAMS = 64
ROUNDS = 6
TOKENS = 200
MODES = ("unlimited", "limited", "again")
KEYS = {"unlimited": "sk-bench-unlimited", "limited": "sk-bench-limited", "again": "sk-bench-unlimited"}
CONFIG = """api-key = ["sk-bench-unlimited"]
[[keys]]
key = "sk-bench-limited"
requests_per_minute = 1_000_000_000
tokens_per_minute = 1_000_000_000_000
max_concurrent = 1_000_000
"""
DELTA = b"event: response.output_text.delta\n"


async def _one(port: int, key: str) -> tuple[int, float]:
    """One stream: its deltas and the seconds to its first."""
    body = json.dumps({"model": "gpt-oss-20b", "input": "Write.", "stream": True, "store": False})
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {key}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}".encode()
    )
    await writer.drain()
    deltas, tail, first = 0, b"", 0.0
    while data := await reader.read(1 << 16):
        window = tail + data
        deltas += window.count(DELTA) - tail.count(DELTA)
        if deltas and not first:
            first = time.perf_counter() - start
        tail = window[-48:]
    writer.close()
    if not deltas:
        raise RuntimeError(f"a stream had no delta: {tail!r}")
    return deltas, first


async def _client(port: int) -> dict[str, dict[str, list[float]]]:
    await _one(port, KEYS["limited"])  # warm-up (and the counters' tables)
    out: dict[str, dict[str, list[float]]] = {m: {"rate": [], "first": []} for m in MODES}
    for n in range(ROUNDS):
        for mode in MODES[n % 3 :] + MODES[: n % 3]:  # each mode in each place in turn: no order's advantage
            start = time.perf_counter()
            results = await asyncio.gather(*(_one(port, KEYS[mode]) for _ in range(STREAMS)))
            out[mode]["rate"].append(sum(d for d, _ in results) / (time.perf_counter() - start))
            out[mode]["first"].append(statistics.median(f for _, f in results))
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.jsonl"
        script.write_text(json.dumps({"tokens": completion(TOKENS)}) + "\n")
        config = Path(tmp) / "serve.toml"
        config.write_text(CONFIG)
        port = free_port()
        argv = [str(BIN / "harmony-responses"), "serve", "--port", str(port), "--engine", f"replay:{script}"]
        argv += ["--model", "gpt-oss-20b", "--log-level", "warning", "--config", str(config)]
        argv += ["--store", f"sqlite:{Path(tmp) / 'responses.sqlite3'}"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc)
            done = subprocess.run(
                [sys.executable, __file__, "--client", str(port)], capture_output=True, text=True, timeout=900
            )
            if done.returncode != 0:
                raise SystemExit(done.stderr)
            figures = json.loads(done.stdout)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    rate = {m: statistics.median(figures[m]["rate"]) for m in MODES}
    first = {m: statistics.median(figures[m]["first"]) for m in MODES}
    print(f"{STREAMS} concurrent streams of {TOKENS} tokens, replay engine at zero delay, {ROUNDS} rounds of each")
    for mode in MODES:
        print(f"{mode:>10}: {rate[mode]:,.0f} events/s, first delta p50 {first[mode] * 1000:.1f} ms")
    print(
        f"limited / unlimited: events/s {rate['limited'] / rate['unlimited']:.2f}, first delta "
        f"{first['limited'] / first['unlimited']:.2f}; floor (again / unlimited): events/s "
        f"{rate['again'] / rate['unlimited']:.2f}, first delta {first['again'] / first['unlimited']:.2f}"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        print(json.dumps(asyncio.run(_client(int(sys.argv[2])))))
    else:
        main()
