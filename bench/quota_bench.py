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

Shared with ``operators_bench.py`` (tracing and quotas, off and on, in one run): ``server()`` starts such a
server (``--otel`` too when given a collector) and ``rounds_of()`` / ``measure()`` run the client's rounds
over any set of modes, each a server's port and a key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from engine_bench import spawn
from server_bench import BIN, completion, free_port, wait_healthy

STREAMS = 64
ROUNDS = 6
TOKENS = 200
UNLIMITED = "sk-bench-unlimited"
LIMITED = "sk-bench-limited"
CONFIG = f"""api-key = ["{UNLIMITED}"]
[[keys]]
key = "{LIMITED}"
requests_per_minute = 1_000_000_000
tokens_per_minute = 1_000_000_000_000
max_concurrent = 1_000_000
"""
DELTA = b"event: response.output_text.delta\n"
# A mode: the port of the server it is measured on and the key its requests carry.
Target = tuple[int, str]


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


async def _client(targets: dict[str, Target], rounds: int, streams: int) -> dict[str, dict[str, list[float]]]:
    for port, key in set(targets.values()):
        await _one(port, key)  # warm-up (and the counters' tables)
    modes = list(targets)
    out: dict[str, dict[str, list[float]]] = {m: {"rate": [], "first": []} for m in modes}
    for n in range(rounds):
        shift = n % len(modes)
        for mode in modes[shift:] + modes[:shift]:  # each mode in each place in turn: no order's advantage
            port, key = targets[mode]
            start = time.perf_counter()
            results = await asyncio.gather(*(_one(port, key) for _ in range(streams)))
            out[mode]["rate"].append(sum(d for d, _ in results) / (time.perf_counter() - start))
            out[mode]["first"].append(statistics.median(f for _, f in results))
    return out


def rounds_of(
    targets: dict[str, Target], rounds: int = ROUNDS, streams: int = STREAMS
) -> dict[str, dict[str, list[float]]]:
    """Each mode's events/s and first-delta p50 (seconds) per round (``"rate"``, ``"first"``), the modes taking
    turns in a client process."""
    job = json.dumps({"targets": targets, "rounds": rounds, "streams": streams})
    done = subprocess.run([sys.executable, __file__, "--client", job], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout)


def measure(targets: dict[str, Target], rounds: int = ROUNDS, streams: int = STREAMS) -> dict[str, tuple[float, float]]:
    """Each mode's median events/s and first-delta p50 (seconds) over the rounds of ``rounds_of``."""
    figures = rounds_of(targets, rounds, streams)
    return {m: (statistics.median(figures[m]["rate"]), statistics.median(figures[m]["first"])) for m in targets}


@contextlib.contextmanager
def server(workdir: Path, *, collector: str | None = None, tokens: int = TOKENS) -> Iterator[int]:
    """A ``serve`` process with both keys (its port), ``--otel`` exporting to ``collector`` when given."""
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "script.jsonl"
    script.write_text(json.dumps({"tokens": completion(tokens)}) + "\n")
    config = workdir / "serve.toml"
    config.write_text(CONFIG)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARMONY_RESPONSES_", "OTEL_"))}
    argv = [str(BIN / "harmony-responses"), "serve", "--port", str(port), "--engine", f"replay:{script}"]
    argv += ["--model", "gpt-oss-20b", "--log-level", "warning", "--config", str(config)]
    argv += ["--store", f"sqlite:{workdir / 'responses.sqlite3'}"]
    if collector is not None:
        argv.append("--otel")
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector
    proc = spawn(argv, stdout=subprocess.DEVNULL, env=env)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, server(Path(tmp)) as port:
        figures = measure({"unlimited": (port, UNLIMITED), "limited": (port, LIMITED), "again": (port, UNLIMITED)})
    rate = {m: r for m, (r, _) in figures.items()}
    first = {m: f for m, (_, f) in figures.items()}
    print(f"{STREAMS} concurrent streams of {TOKENS} tokens, replay engine at zero delay, {ROUNDS} rounds of each")
    for mode in figures:
        print(f"{mode:>10}: {rate[mode]:,.0f} events/s, first delta p50 {first[mode] * 1000:.1f} ms")
    print(
        f"limited / unlimited: events/s {rate['limited'] / rate['unlimited']:.2f}, first delta "
        f"{first['limited'] / first['unlimited']:.2f}; floor (again / unlimited): events/s "
        f"{rate['again'] / rate['unlimited']:.2f}, first delta {first['again'] / first['unlimited']:.2f}"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        job = json.loads(sys.argv[2])
        targets = {m: (int(port), str(key)) for m, (port, key) in job["targets"].items()}
        print(json.dumps(asyncio.run(_client(targets, int(job["rounds"]), int(job["streams"])))))
    else:
        main()
