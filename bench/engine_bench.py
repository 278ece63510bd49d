"""Engine-layer benchmark (issue 4): the latency our server adds in front of a vLLM engine.

Run: ``python bench/engine_bench.py``. A vLLM fake (``_vllm_fake.py``) streams a final answer one token per
chunk; the client (``_latency_client.py``, its own process) reads it directly and through our server
(``--engine vllm``, ``store: false`` so that the figures are the engine path's), in the same run, and
notes when each text token arrives. Figures, for 1 and 64 concurrent streams:

- first token: request sent → first text token, p50/p99, direct vs ours, and the difference;
- between tokens: gaps between successive text tokens, p50/p99, direct vs ours;
- per token (paced run only): how much later than directly each token arrives through us, counted
  from the stream's first token, p50/p99.

Two runs: the fake streaming as fast as it can (what a per-token cost does to throughput-bound
streams), and paced at 10 ms per token (a fast engine's pace: what a client actually waits for).
Target: under 1 ms added to the first token and under 0.2 ms between tokens at p50 with 64 streams.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from harmony_responses.render import render_request
from harmony_responses.vocab import load_encoding

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
INPUT = "Write a long answer."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def completion(n_text: int) -> list[int]:
    enc = load_encoding()
    words = enc.encode("The quick brown fox jumps over the lazy dog, again and again, for the benchmark. " * 20)
    body = list(itertools.islice(itertools.cycle(words), n_text))
    return enc.encode("<|channel|>final<|message|>", allowed_special="all") + body + [200002]


def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not become healthy")


def client(mode: str, url: str, streams: int, repeats: int, body: Path) -> list[list[float]]:
    argv = [sys.executable, str(HERE / "_latency_client.py"), mode, url, str(streams), str(repeats), str(body)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # ms


def figures(direct: list[list[float]], ours: list[list[float]], paced: bool) -> dict[str, float]:
    f: dict[str, float] = {}
    for name, runs in (("direct", direct), ("ours", ours)):
        first = [r[0] for r in runs]
        gaps = [b - a for r in runs for a, b in itertools.pairwise(r)]
        f[f"{name}_ttft_p50"], f[f"{name}_ttft_p99"] = pct(first, 0.5), pct(first, 0.99)
        f[f"{name}_itl_p50"], f[f"{name}_itl_p99"] = pct(gaps, 0.5), pct(gaps, 0.99)
    if paced:
        # Token k's delay after the stream's first token, through us, less the same delay read directly
        # (median over the direct streams): what our layer adds to each later token, whatever it added
        # to the first.
        n = min(len(r) for r in direct + ours)
        baseline = [statistics.median(r[k] - r[0] for r in direct) for k in range(n)]
        added = [r[k] - r[0] - baseline[k] for r in ours for k in range(1, n)]
        f["added_p50"], f["added_p99"] = pct(added, 0.5), pct(added, 0.99)
    return f


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    prompt = render_request({"input": INPUT}, current_date="2025-06-01").token_ids
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "direct.json").write_bytes(
            json.dumps(
                {
                    "model": "openai/gpt-oss-20b",
                    "prompt": list(prompt),
                    "max_tokens": 4096,
                    "stream": True,
                    "return_token_ids": True,
                    "stop_token_ids": [200002, 200012],
                }
            ).encode()
        )
        (work / "ours.json").write_bytes(
            json.dumps({"model": "gpt-oss-20b", "input": INPUT, "stream": True, "store": False}).encode()
        )
        for pace_ms, n_text in ((0, 400), (10, 100)):
            (work / "tokens.json").write_text(json.dumps(completion(n_text)))
            fake_port, our_port = free_port(), free_port()
            fake = subprocess.Popen(
                [sys.executable, str(HERE / "_vllm_fake.py"), str(fake_port), str(work / "tokens.json"), str(pace_ms)],
                stderr=subprocess.PIPE,
            )
            ours = subprocess.Popen(
                [
                    str(BIN / "harmony-responses"),
                    "serve",
                    "--port",
                    str(our_port),
                    "--engine",
                    f"vllm:http://127.0.0.1:{fake_port}",
                    "--model",
                    "gpt-oss-20b",
                    "--log-level",
                    "warning",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                wait_healthy(f"http://127.0.0.1:{fake_port}", fake)
                wait_healthy(f"http://127.0.0.1:{our_port}", ours)
                label = "as fast as it can" if not pace_ms else f"paced at {pace_ms} ms per token"
                print(f"fake streaming {n_text} text tokens per stream, {label}")
                for streams, repeats in ((1, 20), (64, 2)):
                    direct = client(
                        "direct", f"http://127.0.0.1:{fake_port}/v1/completions", streams, repeats, work / "direct.json"
                    )
                    mine = client(
                        "ours", f"http://127.0.0.1:{our_port}/v1/responses", streams, repeats, work / "ours.json"
                    )
                    f = figures(direct, mine, paced=bool(pace_ms))
                    print(
                        f"  {streams:>2} stream{'s' if streams > 1 else ' '}: "
                        f"first token p50 {f['direct_ttft_p50']:.2f} → {f['ours_ttft_p50']:.2f} ms "
                        f"(+{f['ours_ttft_p50'] - f['direct_ttft_p50']:.2f}), "
                        f"p99 {f['direct_ttft_p99']:.2f} → {f['ours_ttft_p99']:.2f} ms; "
                        f"between tokens p50 {f['direct_itl_p50']:.3f} → {f['ours_itl_p50']:.3f} ms, "
                        f"p99 {f['direct_itl_p99']:.3f} → {f['ours_itl_p99']:.3f} ms"
                        + (f"; per token +{f['added_p50']:.3f} ms p50, +{f['added_p99']:.3f} ms p99" if pace_ms else "")
                    )
            finally:
                for proc in (ours, fake):
                    proc.terminate()
                    proc.wait(timeout=10)


if __name__ == "__main__":
    main()
