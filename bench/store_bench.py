"""What storing costs: tokens per second delivered with ``store: true`` vs ``store: false``, 64 streams.

Run: ``python bench/store_bench.py`` (PostgreSQL from ``scripts/postgres``, or ``HARMONY_TEST_POSTGRES_URL``).
For SQLite (a file in a temporary data directory) and PostgreSQL (a fresh schema), a server runs as a
subprocess with the replay engine streaming a 1k-token answer one token per chunk at zero delay — the
worst case for storing, since nothing but the server's own work limits the rate — and a client process
runs 64 concurrent streams, alternating ``store: false`` and ``store: true`` rounds (ROUNDS of each); the
cost is computed from each mode's median round (this machine's figures vary by ±20 % from one round to
the next, so a single pair of rounds says little), the best rounds are shown too.
A stored stream writes its response row, input items, every event of its log (batched across all
streams by the store's group-commit writer) and its output items, and sends each event only once it is
committed. Target: storing costs under 15 % of throughput.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _postgres import postgres_url, run_sql
from engine_bench import spawn
from server_bench import BIN, completion, free_port, wait_healthy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STREAMS = 64
ROUNDS = 7
TOKENS = 1_000
TERMINAL = b"event: response.completed\n"


async def _one(port: int, store: bool) -> int:
    body = json.dumps({"model": "gpt-oss-20b", "input": "Write a long answer.", "stream": True, "store": store})
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}".encode()
    )
    await writer.drain()
    deltas, tail, done = 0, b"", False
    marker = b"event: response.output_text.delta\n"
    while data := await reader.read(1 << 16):
        window = tail + data
        deltas += window.count(marker) - tail.count(marker)
        done = done or TERMINAL in window
        tail = window[-48:]
    writer.close()
    if not done:
        raise RuntimeError("a stream ended without response.completed")
    return deltas


async def _client(port: int) -> dict[str, list[float]]:
    await _one(port, True)  # warm-up
    rates: dict[str, list[float]] = {"false": [], "true": []}
    for _ in range(ROUNDS):
        for store in (False, True):
            start = time.perf_counter()
            tokens = sum(await asyncio.gather(*(_one(port, store) for _ in range(STREAMS))))
            rates["true" if store else "false"].append(tokens / (time.perf_counter() - start))
    return rates


def measure(store: str, script: Path) -> dict[str, list[float]]:
    port = free_port()
    argv = [str(BIN / "harmony-responses"), "serve", "--port", str(port), "--engine", f"replay:{script}"]
    argv += ["--model", "gpt-oss-20b", "--log-level", "warning", "--store", store]
    proc = spawn(argv, stdout=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        out = subprocess.run(
            [sys.executable, __file__, "--client", str(port)], capture_output=True, text=True, check=True, timeout=900
        )
        return json.loads(out.stdout)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.jsonl"
        script.write_text(json.dumps({"tokens": completion(TOKENS)}) + "\n")
        url = postgres_url()
        schema = f"bench_{secrets.token_hex(4)}"
        run_sql(url, f"CREATE SCHEMA {schema}")
        try:
            stores = {
                "sqlite": f"sqlite:{Path(tmp) / 'responses.sqlite3'}",
                "postgresql": f"{url}?search_path={schema}",
            }
            print(
                f"{STREAMS} concurrent streams of {TOKENS} tokens, replay engine at zero delay, {ROUNDS} rounds of each"
            )
            for name, spec in stores.items():
                rates = measure(spec, script)
                off, on = statistics.median(rates["false"]), statistics.median(rates["true"])
                print(
                    f"{name:>10}: median store:false {off:,.0f} tokens/s, store:true {on:,.0f} tokens/s, storing "
                    f"costs {1 - on / off:.1%} (best rounds: {max(rates['false']):,.0f} and {max(rates['true']):,.0f})"
                )
        finally:
            run_sql(url, f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        print(json.dumps(asyncio.run(_client(int(sys.argv[2])))))
    else:
        main()
