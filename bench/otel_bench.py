"""What OpenTelemetry tracing (``--otel``) costs end to end: events/s and first-token p50, off, on, and at the
revision before tracing.

Run: ``python bench/otel_bench.py [REV]``. REV (default: the parent of the commit that added
``tracing``) is checked out in a temporary git worktree and served with its ``src`` ahead of the installed
package. Each server is a real ``serve`` process with the replay engine (a final answer of ``TOKENS`` tokens, a
token per chunk); ``--otel`` exports to a collector in this process that reads and drops every export (so the
exporter's work is all in the figure). The client (``_sse_client.py``) runs ``STREAMS`` concurrent streams and
reports its best of ``REPEATS``; the first-token figure is the p50 over ``STREAMS`` staggered streams of the
first text delta (``_latency_client.py``). The servers take turns for ``ROUNDS`` rounds and each keeps its best.

Printed: the four figures and the ratios off / previous (must be 1 within the floor), the floor (previous
measured twice per round, the second time as ``again``: how far two runs of the same code differ now), and
on / off (what tracing costs while it exports).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from server_bench import BIN, HERE, client, completion, free_port

ROOT = HERE.parent
TOKENS = int(os.environ.get("OTEL_BENCH_TOKENS", "1000"))
STREAMS = int(os.environ.get("OTEL_BENCH_STREAMS", "64"))
REPEATS = int(os.environ.get("OTEL_BENCH_REPEATS", "2"))
ROUNDS = int(os.environ.get("OTEL_BENCH_ROUNDS", "3"))


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def sink() -> Iterator[str]:
    """An OTLP/HTTP endpoint in this process that reads and drops every export (its URL, for
    ``OTEL_EXPORTER_OTLP_ENDPOINT``): the exporter's work is all in the figures, the collector's none."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _default_rev() -> str:
    """The parent of the first commit importing ``tracing`` in the app (its hunks went in before tracing.py)."""
    added = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-Sfrom .. import tracing", "--format=%H", "--", "src/harmony_responses/http"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return f"{added[-1]}^" if added else "HEAD"


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    """Until the server answers /health (a loaded machine may take a while to start four in turn)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not answer within {timeout:g} s")
        time.sleep(0.1)


def _first_token_p50(url: str, workdir: Path) -> float:
    body = workdir / "body.json"
    body.write_text(json.dumps({"model": "gpt-oss-20b", "input": "Write.", "stream": True, "store": False}))
    out = subprocess.run(
        [sys.executable, str(HERE / "_latency_client.py"), "ours", url + "/v1/responses", "16", "1", str(body), "5"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return statistics.median(arrivals[0] for arrivals in json.loads(out.stdout) if arrivals) * 1000


def _measure(src: Path | None, otel: bool, script: Path, collector: str, workdir: Path) -> tuple[float, float]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_RESPONSES_")}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector
    argv = [str(BIN / "harmony-responses"), "serve", "--port", str(port), "--engine", f"replay:{script}"]
    argv += ["--model", "gpt-oss-20b", "--log-level", "warning", *(["--otel"] if otel else [])]
    # A store of its own: an older revision refuses a database a newer one migrated.
    argv += ["--data-dir", tempfile.mkdtemp(dir=workdir)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        result = client(url, STREAMS, REPEATS)
        return result["events"] / result["seconds"], _first_token_p50(url, workdir)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else _default_rev()
    runs = {"previous": (True, False), "off": (False, False), "on": (False, True), "again": (True, False)}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    with tempfile.TemporaryDirectory() as tmp, sink() as collector:
        workdir = Path(tmp)
        script = workdir / "script.jsonl"
        script.write_text(json.dumps({"tokens": completion(TOKENS)}) + "\n")
        tree = workdir / "rev"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
        try:
            for _ in range(ROUNDS):  # in turns: the machine's drift falls on all alike
                for name, (previous, otel) in runs.items():
                    figures[name].append(_measure(tree / "src" if previous else None, otel, script, collector, workdir))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    rate = {name: max(r for r, _ in values) for name, values in figures.items()}
    first = {name: min(f for _, f in values) for name, values in figures.items()}
    print(f"{STREAMS} streams x {TOKENS} tokens; previous = {rev}; best of {ROUNDS} rounds")
    for name in runs:
        print(f"  {name:>8}: {rate[name]:9,.0f} events/s   first token p50 {first[name]:6.2f} ms")
    floor = max(rate["again"], rate["previous"]) / min(rate["again"], rate["previous"])
    print(f"  off / previous: {rate['off'] / rate['previous']:.3f} events/s   (tracing off must cost nothing)")
    print(f"  floor:          {floor:.3f}   (previous against itself: a difference below this is noise)")
    print(
        f"  on / off:       {rate['on'] / rate['off']:.3f} events/s, "
        f"first token {first['on'] / first['off']:.3f}   (what tracing costs while it exports)"
    )


if __name__ == "__main__":
    main()
