"""End-to-end server benchmark (issue 3): our server with the replay engine vs a bare Starlette SSE endpoint.

Run: ``python bench/server_bench.py``. Both servers run as subprocesses on 127.0.0.1 and the client runs
in a third process, reading SSE over loopback. The replay engine streams one token per chunk at zero
delay; the bare endpoint sends the very same SSE frames, pre-built. Figures, from one run:

- µs per event for one stream with a final message of 1k and 16k tokens (target: ours within 2× of the
  bare endpoint, and growing no more than 15 % from 1k to 16k);
- events per second with 64 concurrent streams of 1k tokens (target: at least 50 % of the bare endpoint).
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

import httpx

from engine_bench import spawn
from harmony_responses.sse import encode_events
from harmony_responses.translate import Translator
from harmony_responses.vocab import load_encoding, load_vocabulary

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def completion(n_tokens: int) -> list[int]:
    enc = load_encoding()
    text_ids = enc.encode("The quick brown fox jumps over the lazy dog, again and again, for the benchmark. " * 40)
    body = list(itertools.islice(itertools.cycle(text_ids), n_tokens))
    return (
        enc.encode("<|channel|>final<|message|>", allowed_special="all")
        + body
        + enc.encode("<|return|>", allowed_special="all")
    )


def sse_frames(tokens: list[int]) -> bytes:
    counter = itertools.count()
    t = Translator(vocab=load_vocabulary(), new_id=lambda p: f"{p}_{next(counter):048d}", clock=lambda: 0)
    t.receive_tokens(tokens)
    t.receive_end("stop")
    return encode_events(t.events())


def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("server did not become healthy")


def client(url: str, streams: int, repeats: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, str(HERE / "_sse_client.py"), url + "/v1/responses", str(streams), str(repeats)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout)


def measure(tokens: list[int], workdir: Path) -> dict[str, dict[int, dict[str, float]]]:
    script = workdir / "script.jsonl"
    script.write_text(json.dumps({"tokens": tokens}) + "\n")
    frames = workdir / "frames.sse"
    frames.write_bytes(sse_frames(tokens))
    results: dict[str, dict[int, dict[str, float]]] = {}
    servers = {
        "ours": lambda port: [
            str(BIN / "harmony-responses"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--engine",
            f"replay:{script}",
            "--model",
            "gpt-oss-20b",
            "--log-level",
            "warning",
        ],
        "bare": lambda port: [sys.executable, str(HERE / "_bare_sse.py"), str(port), str(frames)],
    }
    for name, argv in servers.items():
        port = free_port()
        proc = spawn(argv(port), stdout=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, proc)
            results[name] = {1: client(url, 1, 5)}
            if len(tokens) < 4000:
                results[name][64] = client(url, 64, 2)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return results


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with tempfile.TemporaryDirectory() as tmp:
        per_event: dict[int, dict[str, float]] = {}
        for size in (1_000, 16_000):
            res = measure(completion(size), Path(tmp))
            per_event[size] = {k: v[1]["seconds"] / v[1]["events"] * 1e6 for k, v in res.items()}
            ours_us, bare_us = per_event[size]["ours"], per_event[size]["bare"]
            print(
                f"1 stream, {size:>6} tokens: ours {ours_us:.2f} µs/event, "
                f"bare {bare_us:.2f} µs/event, ratio {ours_us / bare_us:.2f}"
            )
            if 64 in res["ours"]:
                ours = res["ours"][64]["events"] / res["ours"][64]["seconds"]
                bare = res["bare"][64]["events"] / res["bare"][64]["seconds"]
                print(
                    f"64 streams, {size:>6} tokens: ours {ours:,.0f} events/s, bare {bare:,.0f} events/s, "
                    f"ours/bare {ours / bare:.0%}"
                )
        growth = per_event[16_000]["ours"] / per_event[1_000]["ours"] - 1
        print(f"growth of ours per event from 1k to 16k tokens: {growth:+.1%}")


if __name__ == "__main__":
    main()
