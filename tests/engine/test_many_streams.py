"""Many streams through one server process: one pooled client, 64 concurrent streams, slow readers."""

from __future__ import annotations

import asyncio
import socket
import time
from collections import defaultdict

import httpx
import orjson
import pytest

from harmony_responses.engine import Engine, EngineOptions, EngineStream, GenerateRequest, VLLMEngine
from harmony_responses.http.connection import api_http_protocol
from harmony_responses.tokens import TokenChunk

from .fakes import Scenario, VLLMFake, harmony, run_fake
from .helpers import MODEL, dechunked, sse_events, stack

WORDS = 150
ANSWER = "<|channel|>final<|message|>" + "word " * WORDS + "<|return|>"
BIG = "<|channel|>final<|message|>" + "token " * 20_000 + "<|return|>"


class Counting(Engine):
    """Counts the tokens the wrapped engine has yielded per request: what the server has pulled in."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.name
        self.pulled: dict[str, int] = defaultdict(int)

    async def start(self) -> None:
        await self.engine.start()

    async def aclose(self) -> None:
        await self.engine.aclose()

    async def generate(self, request: GenerateRequest) -> EngineStream:  # type: ignore[override]
        async for item in self.engine.generate(request):
            if isinstance(item, TokenChunk):
                self.pulled[request.request_id or ""] += len(item.token_ids)
            yield item


async def _stream(client: httpx.AsyncClient, url: str) -> str:
    body = {"model": MODEL, "input": "Hi", "stream": True}
    async with client.stream("POST", url, json=body) as response:
        raw = await response.aread()
    events = sse_events(raw)
    assert events[-1]["type"] == "response.completed", events[-1]
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def test_64_concurrent_streams_share_one_pool() -> None:
    fake = VLLMFake(Scenario(tokens=harmony(ANSWER), delay=0.001))
    with stack("vllm", fake) as s:

        async def main() -> list[str]:
            limits = httpx.Limits(max_connections=100)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                return await asyncio.gather(*(_stream(client, f"{s.base_url}/responses") for _ in range(64)))

        started = time.monotonic()
        texts = asyncio.run(main())
        elapsed = time.monotonic() - started
    assert texts == ["word " * WORDS] * 64
    assert len(fake.requests) == 64 and len(fake.disconnects) == 0
    assert elapsed < 30


def _unit_stalls(counter: dict[str, int], key: str, settle: float = 0.4, timeout: float = 15) -> int:
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        value = counter.get(key, 0)
        if value != last:
            last, since = value, time.monotonic()
        elif value and time.monotonic() - since >= settle:
            return value
        time.sleep(0.05)
    raise AssertionError(f"the stream never stalled (at {last} tokens)")


# Our connection protocol writes a stream's later events straight to the socket, past uvicorn's send
# (connection.body_writer), uvicorn's own through send: backpressure and framing must hold for both.
PROTOCOLS = pytest.mark.parametrize("http", [api_http_protocol(), "auto"], ids=["ours", "uvicorn's"])


@PROTOCOLS
def test_a_slow_reader_slows_only_its_own_stream(http: object) -> None:
    big = harmony(BIG)
    fake = VLLMFake(Scenario(tokens=big), Scenario(tokens=harmony(ANSWER)))
    engines: list[Counting] = []

    def counting(url: str) -> Counting:
        engines.append(Counting(VLLMEngine(EngineOptions(url=url))))
        return engines[0]

    with stack("vllm", fake, engine=counting, sndbuf=32 * 1024, http=http) as s:
        (engine,) = engines
        host, port = s.root.removeprefix("http://").split(":")
        # A client that sends its request and then reads nothing, with a small receive buffer.
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect((host, int(port)))
        # store: false: the server pumps the engine for this client alone, so that backpressure reaches
        # the engine. (A stored response is pumped by a task of its own whatever the client does, its
        # events kept in memory up to the response's size: run/live.py.)
        body = orjson.dumps({"model": MODEL, "input": "Hi", "stream": True, "store": False})
        slow.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        try:
            deadline = time.monotonic() + 10
            while not engine.pulled and time.monotonic() < deadline:
                time.sleep(0.01)
            (key,) = engine.pulled
            stalled = _unit_stalls(engine.pulled, key)
            # Bounded: the server stopped pulling from the engine long before the end of the answer.
            assert stalled < len(big) // 2

            async def others() -> list[str]:
                async with httpx.AsyncClient(timeout=30) as client:
                    return await asyncio.gather(*(_stream(client, f"{s.base_url}/responses") for _ in range(16)))

            started = time.monotonic()
            assert asyncio.run(others()) == ["word " * WORDS] * 16
            assert time.monotonic() - started < 10
            assert engine.pulled[key] <= stalled + 64  # the slow stream did not move meanwhile

            # Once the reader reads, its stream goes on to the end.
            slow.settimeout(30)
            raw = bytearray()
            while not raw.endswith(b"0\r\n\r\n"):
                data = slow.recv(1 << 16)
                if not data:
                    break
                raw += data
            assert b"event: response.completed" in raw
            assert engine.pulled[key] == len(big)
            # Every event whole and in order, however the writes went: the client reads the whole answer.
            events = sse_events(dechunked(bytes(raw)))
            assert [e["sequence_number"] for e in events] == list(range(len(events)))
            deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
            assert deltas == "token " * 20_000
        finally:
            slow.close()


def test_a_burst_on_a_warm_pool_gets_its_connections_at_once() -> None:
    # 64 streams running and a burst of 48 more: 112 connections, more than aiohttp's default pool of
    # 100. (httpcore once offered one idle connection to every queued request, one winner per event-loop
    # round: through the server, a burst next to 64 streams waited 0.5-1.7 s for its connections.)
    running, burst = 64, 48
    short = Scenario(tokens=harmony("<|channel|>final<|message|>Hi<|return|>"))
    fake = VLLMFake(*[short] * (running + burst), Scenario(tokens=harmony(ANSWER), delay=0.02))

    def request() -> GenerateRequest:
        return GenerateRequest(prompt_ids=harmony("<|start|>assistant"))

    waits: list[float] = []
    all_started = asyncio.Event()

    async def first_chunk(engine: Engine, started: float) -> None:
        stream = engine.generate(request())
        try:
            async for item in stream:
                if isinstance(item, TokenChunk):
                    waits.append(time.monotonic() - started)
                    if len(waits) == burst:
                        all_started.set()
                    await all_started.wait()  # holding the connection, as a real stream would
                    return
        finally:
            await stream.aclose()
        raise AssertionError("the stream ended without a token")

    async def drain(engine: Engine) -> None:
        async for _ in engine.generate(request()):
            pass

    async def main() -> None:
        async with VLLMEngine(EngineOptions(url=fake.url)) as engine:
            await asyncio.gather(*(drain(engine) for _ in range(running + burst)))  # a warm pool
            tasks = [asyncio.create_task(drain(engine)) for _ in range(running)]
            try:
                while len(fake.sent) < 2 * running + burst:  # every running stream has sent tokens
                    await asyncio.sleep(0.01)
                started = time.monotonic()
                await asyncio.gather(*(first_chunk(engine, started) for _ in range(burst)))
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    with run_fake(fake):
        asyncio.run(main())
    assert max(waits) < 1.0, sorted(waits)
