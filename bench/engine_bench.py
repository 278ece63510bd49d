"""Engine-layer benchmark (issue 4): the latency our server adds in front of a vLLM engine.

Run: ``python bench/engine_bench.py``. A vLLM fake (``_vllm_fake.py``) streams a final answer one token per
chunk; the client (``_latency_client.py``, its own process) reads it directly and through our server
(``--engine vllm``, ``store: false`` so that the figures are the engine path's), in the same run, and
notes when each text token arrives. Figures, for 1 and 64 concurrent streams (64 requests sent at once, and
64 sent ``STAGGER_MS`` apart: row ``64/2``):

- first token: request sent → first text token, p50/p99;
- between tokens: gaps between successive text tokens, p50/p99;
- late (paced run only): how late each token arrives against its stream's own pace, p50/p99.

Four readers: the fake directly; a bare pass-through proxy in front of it (``_bare_proxy.py``: uvicorn and
aiohttp, as our server uses, and nothing else: the floor of any Python layer here); our server with the
in-process replay engine playing the same tokens at the same pace (the server without the HTTP engine);
our server with ``--engine vllm`` in front of the fake. ours/vllm − direct is what the whole layer adds,
ours/vllm − bare proxy what harmony-responses adds beyond the HTTP hops, ours/vllm − ours/replay what the
HTTP adapter adds.

Two runs: the fake streaming as fast as it can (what a per-token cost does to throughput-bound
streams), and paced at 10 ms per token (a fast engine's pace: what a client actually waits for).
Target: under 1 ms added to the first token and under 0.2 ms between tokens at p50 with 64 streams.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from harmony_responses.render import render_request
from harmony_responses.vocab import load_encoding

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
INPUT = "Write a long answer."
# The third row of each run: 64 streams whose requests arrive this many ms apart (shown as 64/2) instead of
# all at once, so that each first token waits for the streams already running, not for 63 request starts.
STAGGER_MS = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def completion(n_text: int) -> list[int]:
    enc = load_encoding()
    words = enc.encode("The quick brown fox jumps over the lazy dog, again and again, for the benchmark. " * 20)
    body = list(itertools.islice(itertools.cycle(words), n_text))
    return enc.encode("<|channel|>final<|message|>", allowed_special="all") + body + [200002]


def direct_body() -> dict[str, object]:
    """The completions request our server sends the fake for ``INPUT``: what the direct reader sends it."""
    prompt = render_request({"input": INPUT}, current_date="2025-06-01").token_ids
    return {
        "model": "openai/gpt-oss-20b",
        "prompt": list(prompt),
        "max_tokens": 4096,
        "stream": True,
        "return_token_ids": True,
        "stop_token_ids": [200002, 200012],
    }


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv)`` with its stderr in a temporary file (``stderr_of``): a pipe nobody reads
    during a run fills at 64 KiB of log lines and then stops the process at its next one (the bare proxy did,
    logging errors under a burst of 256, and its readers waited for ever)."""
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, stderr=log, **kwargs)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def stderr_of(proc: subprocess.Popen[bytes]) -> str:
    """What a process started by ``spawn`` has written to stderr so far (its last 2,000 characters)."""
    log = getattr(proc, "log", None)
    if log is None:  # not started by spawn: its stderr is the bench's own
        return ""
    log.seek(0)
    return log.read().decode(errors="replace")[-2000:]


def stop(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    """Terminate ``procs``, all at once, wait for each, and say which wrote to stderr (``report_stderr``)."""
    for proc in procs.values():
        proc.terminate()
    for proc in procs.values():
        proc.wait(timeout=30)
    report_stderr(procs)


def report_stderr(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    """Say which of ``procs`` wrote to stderr during the run (an error there may explain its figures)."""
    for name, proc in procs.items():
        lines = stderr_of(proc).strip().splitlines()
        if lines:
            print(f"  {name} wrote to stderr, ending with: {lines[-1][:300]}")


def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {stderr_of(proc)}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not become healthy")


def client(mode: str, url: str, streams: int, repeats: int, body: Path, stagger_ms: float = 0) -> list[list[float]]:
    argv = [sys.executable, str(HERE / "_latency_client.py"), mode, url, str(streams), str(repeats), str(body)]
    argv.append(str(stagger_ms))
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # ms


def summary(runs: list[list[float]], pace_ms: float) -> dict[str, float]:
    """Percentiles (ms) of one way of reading: first token, gaps between tokens, lateness per token."""
    first = [r[0] for r in runs]
    gaps = [b - a for r in runs for a, b in itertools.pairwise(r)]
    f = {
        "ttft50": pct(first, 0.5),
        "ttft99": pct(first, 0.99),
        "itl50": pct(gaps, 0.5),
        "itl99": pct(gaps, 0.99),
    }
    if pace_ms:
        # How late each token is against its stream's own schedule (the engine emits one every pace_ms; the
        # schedule's origin is the stream's most punctual token): what delays the reader between tokens,
        # whatever happened to the first one.
        pace = pace_ms / 1000
        late = []
        for r in runs:
            origin = min(t - k * pace for k, t in enumerate(r))
            late += [t - k * pace - origin for k, t in enumerate(r)]
        f["late50"], f["late99"] = pct(late, 0.5), pct(late, 0.99)
    return f


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux), to report our server's cost per token."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve(argv: list[str], port: int) -> subprocess.Popen[bytes]:
    return spawn(
        [
            str(BIN / "harmony-responses"),
            "serve",
            "--port",
            str(port),
            "--model",
            "gpt-oss-20b",
            "--log-level",
            "warning",
        ]
        + argv,
        stdout=subprocess.DEVNULL,
    )


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "direct.json").write_bytes(json.dumps(direct_body()).encode())
        ours_body = {"model": "gpt-oss-20b", "input": INPUT, "stream": True, "store": False}
        (work / "ours.json").write_bytes(json.dumps(ours_body).encode())
        for pace_ms, n_text in ((0, 400), (10, 100)):
            tokens = completion(n_text)
            (work / "tokens.json").write_text(json.dumps(tokens))
            (work / "replay.jsonl").write_text(json.dumps({"tokens": tokens, "delay_ms": pace_ms}) + "\n")
            fake_port, vllm_port, replay_port, proxy_port = free_port(), free_port(), free_port(), free_port()
            fake = spawn(
                [sys.executable, str(HERE / "_vllm_fake.py"), str(fake_port), str(work / "tokens.json"), str(pace_ms)]
            )
            proxy = spawn(
                [sys.executable, str(HERE / "_bare_proxy.py"), str(proxy_port), f"http://127.0.0.1:{fake_port}"]
            )
            procs = [
                fake,
                serve(["--engine", f"vllm:http://127.0.0.1:{fake_port}"], vllm_port),
                serve(["--engine", f"replay:{work / 'replay.jsonl'}"], replay_port),
                proxy,
            ]
            readers = {
                "direct": ("direct", f"http://127.0.0.1:{fake_port}/v1/completions", work / "direct.json", fake),
                "bare proxy": ("direct", f"http://127.0.0.1:{proxy_port}/v1/completions", work / "direct.json", proxy),
                "ours, replay engine": (
                    "ours",
                    f"http://127.0.0.1:{replay_port}/v1/responses",
                    work / "ours.json",
                    procs[2],
                ),
                "ours, vllm engine": (
                    "ours",
                    f"http://127.0.0.1:{vllm_port}/v1/responses",
                    work / "ours.json",
                    procs[1],
                ),
            }
            try:
                for proc, port in zip(procs, (fake_port, vllm_port, replay_port, proxy_port), strict=True):
                    wait_healthy(f"http://127.0.0.1:{port}", proc)
                label = "as fast as it can" if not pace_ms else f"paced at {pace_ms} ms per token"
                print(f"\nfake vLLM streaming {n_text} text tokens per stream, {label} (all figures in ms)")
                print(
                    f"  {'streams':<7}  {'reading':<20} {'first p50':>9} {'p99':>8}  {'between p50':>11} {'p99':>7}"
                    + (f"  {'late p50':>8} {'p99':>7}" if pace_ms else "")
                    + f"  {'server CPU µs/token':>19}"
                )
                for streams, repeats, stagger in ((1, 20, 0), (64, 2, 0), (64, 2, STAGGER_MS)):
                    for name, (mode, url, body, server) in readers.items():
                        cpu = cpu_seconds(server.pid)
                        runs = client(mode, url, streams, repeats, body, stagger)
                        # Text tokens of the measured runs plus the warm-up stream (the client runs one first).
                        per_token = (cpu_seconds(server.pid) - cpu) / (sum(map(len, runs)) + len(runs[0])) * 1e6
                        f = summary(runs, pace_ms)
                        label = f"{streams}/{stagger:g}" if stagger else str(streams)
                        print(
                            f"  {label:<7}  {name:<20} {f['ttft50']:>9.2f} {f['ttft99']:>8.2f}  "
                            f"{f['itl50']:>11.3f} {f['itl99']:>7.3f}"
                            + (f"  {f['late50']:>8.3f} {f['late99']:>7.3f}" if pace_ms else "")
                            + f"  {per_token:>19.1f}"
                        )
            finally:
                for proc in procs:
                    proc.terminate()
                    proc.wait(timeout=10)


if __name__ == "__main__":
    main()
