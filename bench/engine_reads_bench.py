"""CPU per token of the vLLM adapter's stream loop, against bare readers of the same bytes (issue 30 goal 3).

Run: ``python bench/engine_reads_bench.py``. A vLLM-shaped server in its own process (aiohttp) answers every
``/v1/completions`` with 2,000 one-token SSE lines, written 8 lines at a time (what one socket read held under
a flat-out burst of 64 through our server: ~8 tokens per read). In this process, 16 streams at once, read by:

1. ``bare read``: aiohttp's ``iter_any`` and nothing else (the floor: the bytes off the socket);
2. ``bare parse``: that, split into lines and each ``data:`` line parsed with ``orjson.loads`` (the least an
   adapter reading token ids must do);
3. ``ours``: ``VLLMEngine.generate``, the adapter our server runs (our stream client, the line loop with the
   compiled scanner taking the common lines (engine/_lines.py), one ``TokenChunk`` per read, the watchdog);
4. ``ours, Python``: the same with the scanner off, every line parsed with ``orjson`` and fed by
   ``CompletionsReader.feed`` (the pure-Python path, as without a C compiler).

The readers take turns, round after round (``READS_ROUNDS``, default 7); figures are medians of µs of this
process's CPU time per token, and ours over each floor per round.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson

from engine_bench import free_port, wait_healthy
from harmony_responses.engine import EngineOptions, GenerateRequest, _lines
from harmony_responses.engine._vllm import VLLMEngine

HERE = Path(__file__).resolve().parent
ROUNDS = int(os.environ.get("READS_ROUNDS", "7"))
STREAMS = 16
TOKENS = 2_000
PER_WRITE = 8
MODEL = "gpt-oss-20b"
SCANNER = _lines.COMPILED


def serve(port: int) -> None:
    """The server side (``python engine_reads_bench.py --serve PORT``)."""
    from aiohttp import web

    def line(token: int, last: bool) -> bytes:
        choice = {
            "index": 0,
            "text": "",
            "logprobs": None,
            "finish_reason": "stop" if last else None,
            "stop_reason": 200002 if last else None,
            "token_ids": [token],
        }
        obj = {"id": "cmpl-b", "object": "text_completion", "created": 0, "model": MODEL, "choices": [choice]}
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    tokens = [200005, 17196, 200008] + [1000 + i % 5000 for i in range(TOKENS - 4)] + [200002]
    lines = [line(t, i == len(tokens) - 1) for i, t in enumerate(tokens)]
    blocks = [b"".join(lines[i : i + PER_WRITE]) for i in range(0, len(lines), PER_WRITE)]
    usage = {"prompt_tokens": 3, "completion_tokens": TOKENS, "total_tokens": TOKENS + 3}
    blocks.append(b"data: " + orjson.dumps({"id": "cmpl-b", "choices": [], "usage": usage}) + b"\n\ndata: [DONE]\n\n")

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for block in blocks:
            await response.write(block)
            await asyncio.sleep(0)  # one write per loop turn: each block its own read on the other side
        return response

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": MODEL}]})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", health)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None)  # type: ignore[arg-type]


async def bare(session: aiohttp.ClientSession, url: str, parse: bool) -> int:
    async with session.post(url, data=b'{"prompt": [1], "stream": true}') as response:
        tokens = 0
        tail = b""
        async for data in response.content.iter_any():
            if not parse:
                tokens += data.count(b'"token_ids"')
                continue
            lines = (tail + data).split(b"\n")
            tail = lines.pop()
            for line in lines:
                if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                    choices = orjson.loads(line[5:])["choices"]
                    tokens += len(choices[0]["token_ids"]) if choices else 0
        return tokens


async def ours(engine: VLLMEngine, compiled: bool = True) -> int:
    tokens = 0
    _lines.COMPILED = SCANNER if compiled else None  # read when a stream starts
    async for item in engine.generate(GenerateRequest(prompt_ids=[200006, 1428, 200008], max_tokens=10_000)):
        tokens += len(getattr(item, "token_ids", None) or ())
    return tokens


async def measure() -> dict[str, list[float]]:
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server)
        url = f"http://127.0.0.1:{port}/v1/completions"
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
        engine = VLLMEngine(EngineOptions(url=f"http://127.0.0.1:{port}", model=MODEL))
        readers: dict[str, Callable[[], Awaitable[int]]] = {
            "bare read": lambda: bare(session, url, parse=False),
            "bare parse": lambda: bare(session, url, parse=True),
            "ours": lambda: ours(engine),
            "ours, Python": lambda: ours(engine, compiled=False),
        }
        if SCANNER is None:
            print(f"the compiled scanner is not here ({_lines.describe()}): ours is the pure-Python path too")
        runs: dict[str, list[float]] = {name: [] for name in readers}
        try:
            for number in range(ROUNDS + 1):  # the first round warms up (connections, imports) and is not counted
                order = list(readers.items())
                for name, read in order if number % 2 else order[::-1]:
                    start = time.process_time()
                    tokens = sum(await asyncio.gather(*[read() for _ in range(STREAMS)]))
                    if number:
                        runs[name].append((time.process_time() - start) / tokens * 1e6)
        finally:
            await engine.aclose()
            await session.close()
        return runs
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    runs = asyncio.run(measure())
    print(f"{ROUNDS} rounds of {STREAMS} streams x {TOKENS} tokens, {PER_WRITE} token lines per write; medians")
    print(f"  {'reader':<14} {'CPU µs/token':>12} {'ours ÷ it':>10}")
    for name, values in runs.items():
        ratio = statistics.median(o / v for o, v in zip(runs["ours"], values, strict=True))
        print(f"  {name:<14} {statistics.median(values):>12.3f} {ratio:>10.2f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]))
    else:
        main()
