"""What one read from the engine carries: several lines at once, tokens before a bad line, lines split mid-way.

A tiny aiohttp server sends a vLLM completions stream as the test writes it (whole, or in pieces cut anywhere),
so that what the adapter gets in one read is the test's choice, not the scheduler's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from harmony_responses.engine import EngineOptions, GenerateRequest, _lines
from harmony_responses.engine._vllm import VLLMEngine
from harmony_responses.run import ResponseRun, turns
from harmony_responses.run.turns import Turns
from harmony_responses.tokens import ADMITTED, EngineEnd, TokenChunk
from harmony_responses.translate import Translator
from harmony_responses.vocab import load_encoding, load_vocabulary

PROMPT = [200006, 1428, 200008, 12194, 200007, 200006, 173781]
HELLO = [200005, 17196, 200008, 13225, 1303, 200002]  # <|channel|>final<|message|>Hello there<|return|>


def line(ids: list[int], finish: str | None = None) -> bytes:
    choice = {"index": 0, "text": "", "token_ids": ids, "finish_reason": finish, "stop_reason": None}
    return b"data: " + orjson.dumps({"id": "c", "choices": [choice]}) + b"\n\n"


@pytest.fixture(autouse=True, params=["compiled", "pure Python"])
def line_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here reads its lines both ways (engine/_lines.py): the compiled scanner, where it was built,
    and the pure-Python path."""
    if request.param == "compiled" and _lines.COMPILED is None:
        pytest.skip("the compiled scanner was not built here")
    if request.param == "pure Python":
        monkeypatch.setattr(_lines, "COMPILED", None)


@contextlib.asynccontextmanager
async def _vllm_server(
    completions: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[tuple[VLLMEngine, int]]:
    """A tiny aiohttp server answering ``/v1/completions`` with ``completions``, and the vLLM adapter on it
    (and the server's port)."""
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    engine = VLLMEngine(EngineOptions(url=f"http://127.0.0.1:{port}", model="m"))
    try:
        yield engine, port
    finally:
        await engine.aclose()
        await runner.cleanup()


async def run(pieces: list[bytes]) -> list[TokenChunk | EngineEnd]:
    async def completions(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for piece in pieces:
            await response.write(piece)
            await asyncio.sleep(0.01)  # each piece its own read
        return response

    async with _vllm_server(completions) as (engine, _):
        stream: AsyncIterator[TokenChunk | EngineEnd] = engine.generate(
            GenerateRequest(prompt_ids=PROMPT, max_tokens=50)
        )
        items = [item async for item in stream]
        assert items[0] is ADMITTED  # the status line came first
        return items[1:]


def test_lines_read_together_arrive_as_one_chunk_in_order() -> None:
    body = b"".join(line([t]) for t in HELLO[:-1]) + line([HELLO[-1]], "stop") + b"data: [DONE]\n\n"
    items = asyncio.run(run([body]))
    *chunks, end = items
    assert [t for c in chunks for t in c.token_ids] == HELLO
    assert len(chunks) == 1 and isinstance(end, EngineEnd) and end.reason == "stop"


@pytest.mark.parametrize("cut", [1, 7, 30, 61])
def test_a_line_cut_across_reads_is_read_whole(cut: int) -> None:
    body = b"".join(line([t]) for t in HELLO[:-1]) + line([HELLO[-1]], "stop") + b"data: [DONE]\n\n"
    items = asyncio.run(run([body[:cut], body[cut:]]))
    assert [t for c in items if isinstance(c, TokenChunk) for t in c.token_ids] == HELLO
    assert isinstance(items[-1], EngineEnd) and items[-1].reason == "stop"


def test_tokens_before_a_bad_line_in_the_same_read_are_kept() -> None:
    body = line(HELLO[:3]) + line(HELLO[3:4]) + b"data: {not json\n\n"
    *chunks, end = asyncio.run(run([body]))
    assert [t for c in chunks for t in c.token_ids] == HELLO[:4]  # what the model wrote before is kept
    assert isinstance(end, EngineEnd) and end.reason == "error" and "not JSON" in (end.message or "")


def test_tokens_before_an_error_object_in_the_same_read_are_kept() -> None:
    error = b'data: {"error": {"message": "CUDA error: out of memory", "code": 500}}\n\n'
    *chunks, end = asyncio.run(run([line(HELLO[:2]) + line(HELLO[2:4]) + error]))
    assert [t for c in chunks for t in c.token_ids] == HELLO[:4]
    assert isinstance(end, EngineEnd) and end.reason == "error" and "CUDA error" in (end.message or "")


@pytest.fixture
def long_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The starts last as long as the test says, however slow the machine: no time limit ends them first."""
    for limit in ("START_LIMIT", "LANE_LIMIT", "OVERLOAD_SPAN"):
        monkeypatch.setattr(turns, limit, 10.0)


async def _starting(started: asyncio.Event, done: asyncio.Event) -> None:
    """A request in the start lane: ``started`` once let in, its start work lasting until ``done``."""
    with turns.starting():
        await turns.enter_lane()
        started.set()
        await done.wait()
        turns.leave_lane()


def _unread(server_port: int, client_port: int) -> int:
    """Bytes the kernel holds on our connection from ``client_port`` to 127.0.0.1:``server_port`` (Linux
    /proc/net/tcp): unread on our side, and not yet sent on the server's. Both ends are matched: a closed
    connection of an earlier test can linger (TIME_WAIT) with the same remote port."""
    ours, theirs = f"0100007F:{client_port:04X}", f"0100007F:{server_port:04X}"
    held, seen = 0, False
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = row.split()
        tx, rx = (int(n, 16) for n in fields[4].split(":"))
        if (fields[1], fields[2]) == (ours, theirs):
            held, seen = held + rx, True
        elif (fields[1], fields[2]) == (theirs, ours):
            held += tx
    if not seen:
        raise AssertionError(f"no connection from port {client_port} to port {server_port}")
    return held


class _HeldAnswer:
    """``completions``: a ``/v1/completions`` answer of ``first`` at once and ``rest`` once ``go`` is set
    (``written`` then); ``peers``: the client's port of each request (our end of the connection, ``_unread``)."""

    def __init__(self, first: bytes, rest: bytes) -> None:
        self.first, self.rest = first, rest
        self.go, self.written = asyncio.Event(), asyncio.Event()
        self.peers: list[int] = []

    async def completions(self, request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        self.peers.append(request.transport.get_extra_info("peername")[1])
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(self.first)
        await self.go.wait()
        await response.write(self.rest)
        self.written.set()
        return response


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the kernel's socket queues (Linux)")
def test_a_held_consumer_leaves_its_engine_bytes_unread_until_the_hold_ends(long_starts: None) -> None:
    """While a request waits in the start lane, a flowing stream is held (run/turns.py) and its engine
    connection is not read: the engine's bytes wait in the kernel. When the starts are done, all of it comes."""
    rest = line(HELLO[2:-1]) * 200 + line([HELLO[-1]], "stop") + b"data: [DONE]\n\n"

    async def main() -> tuple[list[int], int]:
        answer = _HeldAnswer(line(HELLO[:2]), rest)
        got: list[int] = []
        held = asyncio.Event()

        async with _vllm_server(answer.completions) as (engine, port):

            async def consume() -> None:
                flow = Turns()
                async for item in engine.generate(GenerateRequest(prompt_ids=PROMPT, max_tokens=500)):
                    if item is ADMITTED:
                        continue  # the status line: the first chunk is what is held behind
                    if isinstance(item, TokenChunk):
                        got.extend(item.token_ids)
                    flow.arrived()
                    held.set()
                    await flow.done()

            first_in, first_done, second_in = asyncio.Event(), asyncio.Event(), asyncio.Event()
            first = asyncio.create_task(_starting(first_in, first_done))
            await first_in.wait()
            second = asyncio.create_task(_starting(second_in, asyncio.Event()))
            await asyncio.sleep(0)  # the second waits in the lane: flowing streams are held
            consumer = asyncio.create_task(consume())
            await held.wait()
            answer.go.set()
            await answer.written.wait()
            await asyncio.sleep(0.05)  # time enough for the loop to read what came, were it reading
            unread = _unread(port, answer.peers[0])
            assert len(got) == 2  # held
            first_done.set()
            await second_in.wait()
            second.cancel()  # its start ends: no one is starting, the hold ends
            await asyncio.wait_for(consumer, 5)
            await first
            return got, unread

    got, unread = asyncio.run(main())
    assert unread >= len(rest) // 2  # the engine's bytes waited in the kernel, not in our buffers
    assert got == HELLO[:2] + HELLO[2:-1] * 200 + [HELLO[-1]]  # nothing lost


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the kernel's socket queues (Linux)")
def test_a_run_held_before_its_producer_read_anything_leaves_its_engine_bytes_unread(long_starts: None) -> None:
    """As the server runs a response: the engine's first chunk is read by ``ResponseRun.start()`` in the
    request's task, the rest by a producer task it starts then. A producer held at its first batch, before it
    has read from the engine itself (the first read held the first delta), still has its connection paused:
    the engine's bytes wait in the kernel, and all of them come once the hold ends."""
    rest = line(HELLO[4:5]) * 200 + line([HELLO[-1]], "stop") + b"data: [DONE]\n\n"

    async def main() -> tuple[str, int]:
        answer = _HeldAnswer(line(HELLO[:4]), rest)  # the header and the first text token: the first delta

        async with _vllm_server(answer.completions) as (engine, port):
            translator = Translator(vocab=load_vocabulary(), new_id=lambda prefix: f"{prefix}_1", clock=lambda: 0)
            run = ResponseRun(
                translator=translator, engine=engine, request=GenerateRequest(prompt_ids=PROMPT, max_tokens=500)
            )
            first_in, first_done, second_in = asyncio.Event(), asyncio.Event(), asyncio.Event()
            first = asyncio.create_task(_starting(first_in, first_done))
            await first_in.wait()
            second = asyncio.create_task(_starting(second_in, asyncio.Event()))
            await asyncio.sleep(0)  # the second waits in the lane: flowing streams are held
            await run.start()  # the first chunk, read in this task
            held = asyncio.Event()

            async def produce() -> None:
                flow = Turns()
                async for _ in run.batches():
                    flow.arrived()
                    held.set()
                    await flow.done()

            producer = asyncio.create_task(produce())
            await held.wait()
            answer.go.set()
            await answer.written.wait()
            await asyncio.sleep(0.05)  # time enough for the loop to read what came, were it reading
            unread = _unread(port, answer.peers[0])
            first_done.set()
            await second_in.wait()
            second.cancel()  # its start ends: no one is starting, the hold ends
            await asyncio.wait_for(producer, 5)
            await first
            assert run.final is not None
            return run.final["output"][0]["content"][0]["text"], unread

    text, unread = asyncio.run(main())
    assert unread >= len(rest) // 2  # not read into our buffers while held
    assert text == load_encoding().decode(HELLO[3:4] + HELLO[4:5] * 200)  # nothing lost


def test_a_held_consumer_does_not_pause_a_connection_its_finished_stream_gave_back(long_starts: None) -> None:
    """A consumer whose engine stream is over (its connection back in the pool) may still be held, running a
    tool say: the next request's stream, on the same connection now, goes on being read meanwhile."""
    whole = line(HELLO[:-1]) + line([HELLO[-1]], "stop") + b"data: [DONE]\n\n"

    async def main() -> tuple[list[Any], list[int]]:
        peers: list[Any] = []

        async def completions(request: web.Request) -> web.StreamResponse:
            peers.append(request.transport.get_extra_info("peername") if request.transport else None)
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            for piece in (whole[:40], whole[40:90], whole[90:]):
                await response.write(piece)
                await asyncio.sleep(0.01)  # each piece its own read
            return response

        request = GenerateRequest(prompt_ids=PROMPT, max_tokens=50)
        finished, release = asyncio.Event(), asyncio.Event()

        async with _vllm_server(completions) as (engine, _):

            async def first_consumer() -> None:
                flow = Turns()
                async for _ in engine.generate(request):
                    flow.arrived()
                    await flow.done()
                finished.set()
                await release.wait()  # the run goes on without its engine (a tool call), then hands on a batch
                flow.arrived()
                await flow.done()  # held: a request waits in the lane

            first = asyncio.create_task(first_consumer())
            await finished.wait()
            inside, inside_done, waiting_in = asyncio.Event(), asyncio.Event(), asyncio.Event()
            holder = asyncio.create_task(_starting(inside, inside_done))
            await inside.wait()
            waiter = asyncio.create_task(_starting(waiting_in, asyncio.Event()))
            await asyncio.sleep(0)  # the lane has a queue: the first consumer's next batch is held
            second = asyncio.create_task(_collect(engine.generate(request)))
            await asyncio.sleep(0.005)  # the second stream is under way on the pooled connection
            release.set()
            ids = await asyncio.wait_for(second, 5)  # read to its end while the first consumer is held
            assert not first.done()
            inside_done.set()
            await waiting_in.wait()
            waiter.cancel()
            await asyncio.wait_for(first, 5)
            await holder
            return peers, ids

    peers, ids = asyncio.run(main())
    assert len(peers) == 2 and peers[0] == peers[1]  # one connection, given back and taken again
    assert ids == HELLO


async def _collect(stream: AsyncIterator[TokenChunk | EngineEnd]) -> list[int]:
    return [t for item in [item async for item in stream] if isinstance(item, TokenChunk) for t in item.token_ids]
