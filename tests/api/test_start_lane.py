"""The start lane (run/turns.py): a burst's requests start one after another, and the first answers stream
while the later ones are still starting.

Through the real server on 127.0.0.1: a burst of streaming requests sent at once on raw sockets, an
in-process engine that notes when each call reaches it and answers a few milliseconds later, like an
engine's prefill. Without the lane every request of the burst starts in the same loop turn and no answer
is read before the last one has reached the engine. Both moments are taken in the server's thread (the
first delta where the app hands it to uvicorn): the client shares the process, and its reads can wait for
the GIL for milliseconds.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.http import responses
from harmony_responses.run import turns
from harmony_responses.serve import Config, create_app
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding

from .helpers import MODEL, start_live

BURST = 24
ANSWER_IDS = load_encoding().encode("<|channel|>final<|message|>Hi<|return|>", allowed_special="all")
DELTA = b"event: response.output_text.delta\n"


class Prefilling:
    """An engine that notes when each call arrives and answers ``delay`` seconds later."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.called: list[float] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        self.called.append(time.monotonic())
        await asyncio.sleep(self.delay)
        yield TokenChunk(token_ids=ANSWER_IDS)
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


class DeltaClock:
    """ASGI wrapper noting when each response's first output-text delta is handed to the server."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.first_deltas: list[float] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        seen = False

        async def noting(message: Message) -> None:
            nonlocal seen
            if not seen and message["type"] == "http.response.body" and DELTA in message.get("body", b""):
                seen = True
                self.first_deltas.append(time.monotonic())
            await send(message)

        await self.app(scope, receive, noting)


async def _stream(port: int, body: bytes, opened: asyncio.Event) -> bytes:
    """The whole body of a request sent once ``opened`` is set."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    await opened.wait()  # every connection is open: the requests go out together
    writer.write(head + body)
    await writer.drain()
    received = b""
    while data := await reader.read(1 << 16):
        received += data
    writer.close()
    return received


async def _burst(port: int, n: int) -> list[bytes]:
    body = f'{{"model": "{MODEL}", "input": "Say hi.", "stream": true, "store": false}}'.encode()
    opened = asyncio.Event()
    tasks = [asyncio.create_task(_stream(port, body, opened)) for _ in range(n)]
    await asyncio.sleep(0.2)  # the connections are made
    opened.set()
    return await asyncio.gather(*tasks)


def test_a_burst_streams_its_first_answers_while_later_requests_start() -> None:
    engine = Prefilling(delay=0.003)
    app = create_app(Config(models=(MODEL,), current_date="2025-06-01"), engine=engine.engine)
    clock = DeltaClock(app)
    live = start_live(app, clock)
    try:
        results = asyncio.run(_burst(live.port, BURST))
    finally:
        live.stop()
    assert len(engine.called) == BURST
    for received in results:
        assert DELTA + b"data: " in received and b'"delta":"Hi"' in received
        assert b"event: response.completed\n" in received
    assert len(clock.first_deltas) == BURST
    # The first answer went out before the burst's last request had reached the engine.
    assert min(clock.first_deltas) < max(engine.called)


def test_a_burst_reads_each_body_in_the_lane_after_the_request_before_it_called_its_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A body that came with its head is read in the lane: the requests behind in a burst wait for their turn
    with all of their handling (middleware, routing, the body read), not only their start."""
    reads: list[float] = []
    read_json_body = responses.read_json_body

    async def noted(request: Any, limit: int) -> Any:
        reads.append(time.monotonic())
        return await read_json_body(request, limit)

    monkeypatch.setattr(responses, "read_json_body", noted)
    engine = Prefilling(delay=0.003)
    live = start_live(create_app(Config(models=(MODEL,), current_date="2025-06-01"), engine=engine.engine))
    try:
        results = asyncio.run(_burst(live.port, BURST))
    finally:
        live.stop()
    assert all(b'"delta":"Hi"' in received for received in results)
    assert len(reads) == len(engine.called) == BURST
    # Read before the previous request had called its engine: the lane let several in at once (it may,
    # when the loop had other work between two lets-in), or the body was read on arrival.
    early = [k for k in range(1, BURST) if reads[k] < engine.called[k - 1]]
    assert len(early) <= BURST // 4, early


def test_a_request_cancelled_in_the_lane_does_not_keep_the_others_waiting() -> None:
    async def main() -> list[str]:
        order: list[str] = []

        async def request(name: str) -> None:
            with turns.starting():
                await turns.enter_lane()
                order.append(name)
                await asyncio.sleep(0.001)  # start work with an await in it
                turns.leave_lane()

        first = asyncio.create_task(request("first"))
        await asyncio.sleep(0)  # first is in the lane
        waiting = [asyncio.create_task(request(name)) for name in ("cancelled", "next", "last")]
        await asyncio.sleep(0)  # all three wait behind it
        waiting[0].cancel()
        await asyncio.wait_for(asyncio.gather(first, *waiting[1:]), timeout=5)
        return order

    assert asyncio.run(main()) == ["first", "next", "last"]


def test_a_start_that_waits_too_long_lets_the_next_one_in() -> None:
    async def main() -> list[str]:
        order: list[str] = []

        async def request(name: str, work: float) -> None:
            with turns.starting():
                await turns.enter_lane()
                order.append(f"{name} in")
                await asyncio.sleep(work)  # waiting for something the lane does not know of
                order.append(f"{name} done")

        slow = asyncio.create_task(request("slow", 10 * turns.LANE_LIMIT))
        await asyncio.sleep(0)
        quick = asyncio.create_task(request("quick", 0))
        await asyncio.wait_for(asyncio.gather(slow, quick), timeout=5)
        return order

    # The quick one started after LANE_LIMIT, without waiting for the slow one to finish.
    assert asyncio.run(main()) == ["slow in", "quick in", "quick done", "slow done"]


def test_a_long_queue_goes_in_groups_of_at_most_lane_most(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue is let in by groups (LANE_GROUP of it), never more than LANE_MOST at once however long it is."""
    monkeypatch.setattr(turns, "LANE_GROUP", 1 / 2)
    monkeypatch.setattr(turns, "LANE_MOST", 3)

    async def main() -> list[int]:
        inside, sizes = 0, []

        async def request() -> None:
            nonlocal inside
            with turns.starting():
                await turns.enter_lane()
                inside += 1
                sizes.append(inside)
                await asyncio.sleep(0)  # the others let in with it run meanwhile
                inside -= 1
                turns.leave_lane()

        await asyncio.wait_for(asyncio.gather(*(request() for _ in range(30))), timeout=30)
        return sizes

    assert max(asyncio.run(main())) == 3


def _let_ins(*bursts: int) -> list[list[int]]:
    """How many requests each let-in of a burst's drain let into the lane, for bursts one after another in one
    event loop (a burst's requests all arriving in one loop turn, each start a loop turn long)."""

    async def main() -> list[list[int]]:
        return [await drain(burst) for burst in bursts]

    async def drain(burst: int) -> list[int]:
        turn, turns_let_in = 0, []

        async def ticker() -> None:
            nonlocal turn
            while True:
                turn += 1
                await asyncio.sleep(0)

        async def request() -> None:
            with turns.starting():
                await turns.enter_lane()
                turns_let_in.append(turn)  # those let in together resume in the same turn
                await asyncio.sleep(0)
                turns.leave_lane()

        ticking = asyncio.create_task(ticker())
        await asyncio.wait_for(asyncio.gather(*(request() for _ in range(burst))), timeout=30)
        ticking.cancel()
        return [turns_let_in.count(t) for t in sorted(set(turns_let_in))]

    return asyncio.run(main())


def test_a_long_queue_drains_by_halves_a_short_one_by_small_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue of LANE_LONG or more goes in by halves until it is empty: a burst of 256's last requests wait
    for a few let-ins, not for one each (each a loop turn in which the first tokens of those before go out,
    all before theirs: the burst's first-token p99). A shorter queue goes in by LANE_GROUP of it, so that the
    first tokens of a burst of 64 come group by group (its median)."""
    # Not the rule that lets more in when the loop had other work between two let-ins (a loaded machine's
    # pause would count as that).
    monkeypatch.setattr(turns, "LANE_SHARE", 1e9)
    long, short = _let_ins(256, 64)
    # The first straight in (the lane empty), then halves of the rest down to the last one.
    assert long == [1, 127, 64, 32, 16, 8, 4, 2, 1, 1]
    # The next burst, shorter, by small groups again.
    assert sum(short) == 64 and max(short) == int(63 * turns.LANE_GROUP) == 3
    assert len(short) >= 40


@pytest.mark.parametrize("n", [1, 3])
def test_requests_in_a_quiet_loop_start_at_once(n: int) -> None:
    """Requests that arrive one loop turn or more apart are let in straight away."""

    async def main() -> list[float]:
        waits: list[float] = []
        for _ in range(n):
            with turns.starting():
                asked = time.monotonic()
                await turns.enter_lane()
                waits.append(time.monotonic() - asked)
                turns.leave_lane()
            await asyncio.sleep(0.01)
        return waits

    assert all(wait < turns.LANE_LIMIT for wait in asyncio.run(main()))


def test_no_garbage_collection_runs_while_requests_wait_in_the_lane() -> None:
    """A young collection in the middle of a burst stopped every start behind it for tens of milliseconds:
    while requests wait in the lane the collector is off, and on again once the lane is clear."""

    async def main() -> list[bool]:
        seen: list[bool] = []

        async def request() -> None:
            with turns.starting():
                await turns.enter_lane()
                seen.append(gc.isenabled())
                await asyncio.sleep(0.001)
                turns.leave_lane()

        await asyncio.wait_for(asyncio.gather(*(request() for _ in range(4))), timeout=5)
        await asyncio.sleep(0)  # the lane's last reopening
        seen.append(gc.isenabled())
        return seen

    assert gc.isenabled()
    # The first goes straight in; the other three waited behind it; then the lane is clear.
    assert asyncio.run(main()) == [True, False, False, True, True]


def test_the_collector_runs_again_after_a_long_queue_and_when_waiting_requests_are_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(turns, "GC_DEFER_LIMIT", 0.02)

    async def main() -> tuple[bool, bool, bool]:
        async def request(work: float) -> None:
            with turns.starting():
                await turns.enter_lane()
                await asyncio.sleep(work)
                turns.leave_lane()

        first = asyncio.create_task(request(0.05))
        await asyncio.sleep(0)
        waiting = [asyncio.create_task(request(0.05)) for _ in range(3)]
        await asyncio.sleep(0.01)
        held = not gc.isenabled()
        await asyncio.sleep(0.08)  # past GC_DEFER_LIMIT, requests still waiting: collecting again
        limited = gc.isenabled()
        for task in waiting:
            task.cancel()
        await asyncio.gather(first, *waiting, return_exceptions=True)
        return held, limited, gc.isenabled()

    assert asyncio.run(main()) == (True, True, True)
    assert gc.isenabled()


def test_a_collector_disabled_by_the_application_stays_disabled() -> None:
    async def main() -> None:
        async def request() -> None:
            with turns.starting():
                await turns.enter_lane()
                await asyncio.sleep(0.001)
                turns.leave_lane()

        await asyncio.gather(*(request() for _ in range(3)))
        await asyncio.sleep(0)

    gc.disable()
    try:
        asyncio.run(main())
        assert not gc.isenabled()
    finally:
        gc.enable()


class TokenByToken:
    """An engine writing the answer one token per chunk, ``gap`` seconds apart, then the rest after ``pause``
    (noting when that last chunk went out)."""

    def __init__(self, gap: float, pause: float = 0.0) -> None:
        self.gap = gap
        self.pause = pause
        self.resumed: list[float] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        header, text = ANSWER_IDS[:3], ANSWER_IDS[3:]
        for token in header:
            yield TokenChunk(token_ids=[token])
            await asyncio.sleep(self.gap)
        await asyncio.sleep(self.pause)
        self.resumed.append(time.monotonic())
        yield TokenChunk(token_ids=text)
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


class BodyWrites:
    """ASGI wrapper noting each response body write: when, and what."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.writes: list[tuple[float, bytes]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def noting(message: Message) -> None:
            if message["type"] == "http.response.body":
                self.writes.append((time.monotonic(), message.get("body", b"")))
            await send(message)

        await self.app(scope, receive, noting)


def _stream_through(engine: MockEngine) -> tuple[list[tuple[float, bytes]], bytes]:
    app = create_app(Config(models=(MODEL,), current_date="2025-06-01"), engine=engine)
    writes = BodyWrites(app)
    live = start_live(app, writes)
    try:
        (received,) = asyncio.run(_burst(live.port, 1))
    finally:
        live.stop()
    return writes.writes, received


def test_the_events_before_the_first_delta_go_out_in_one_write_with_it() -> None:
    """A header read token by token made the response's opening events two or three writes of their own (a
    socket send each) before the first delta: they wait for it while the request is starting."""
    writes, received = _stream_through(TokenByToken(gap=0.003).engine)
    first = writes[0][1]
    assert first.startswith(b"event: response.created\n")
    assert b"event: response.output_item.added\n" in first and DELTA + b"data: " in first
    assert b'"delta":"Hi"' in received and b"event: response.completed\n" in received


def test_what_comes_before_a_late_first_delta_goes_out_when_the_start_ends() -> None:
    """Nothing is held longer than the request counts as starting: a model that pauses before its first
    delta (a built-in tool running, a slow engine) still shows its response begun."""
    engine = TokenByToken(gap=0.0, pause=5 * turns.START_LIMIT)
    writes, received = _stream_through(engine.engine)
    first_at, first = writes[0]
    assert first.startswith(b"event: response.created\n") and DELTA not in first
    assert first_at < engine.resumed[0] - 2 * turns.START_LIMIT
    assert b'"delta":"Hi"' in received and b"event: response.completed\n" in received


def test_a_starting_response_sends_its_first_delta_before_translating_the_rest_of_its_chunk() -> None:
    """An engine read that holds many tokens (a flat-out engine's first one does): the first delta is written
    before the tokens behind it are translated, and all of them follow."""
    words = load_encoding().encode(" one two three four five six seven eight nine ten")

    async def whole(request: GenerateRequest) -> EngineStream:
        yield TokenChunk(token_ids=[*ANSWER_IDS[:3], *words, ANSWER_IDS[-1]])
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))

    writes, received = _stream_through(MockEngine(whole))
    assert writes[0][1].count(b".delta\n") == 1
    assert received.count(DELTA) == len(words)
    assert b'"text":" one two three four five six seven eight nine ten"' in received
