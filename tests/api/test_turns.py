"""First tokens first (run/turns.py, http/first_tokens.py), at the ASGI boundary of two streams sharing one event loop.

A stream already flowing flat out must give the loop to a request that is starting until that request's
first delta is written; a stream paced by its engine, a request answered in JSON and a start that takes
too long must not hold anyone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from harmony_responses.http.first_tokens import FirstTokensFirst
from harmony_responses.http.streaming import RunResponse
from harmony_responses.run import turns as _turns

DELTA = b"event: response.output_text.delta\ndata: {}\n\n"
CREATED = b"event: response.created\ndata: {}\n\n"
SCOPE = {"type": "http", "method": "POST", "path": "/v1/responses"}


class Run:
    """A run whose engine answers after ``start_turns`` loop turns (or ``start_delay`` seconds), then sends
    ``batches`` deltas, ``pace`` seconds apart (0: back to back, like a flat-out engine)."""

    request_id = "resp_test"
    final: dict[str, Any] | None = None

    def __init__(self, batches: int, *, pace: float = 0, start_turns: int = 0, start_delay: float = 0) -> None:
        self.left = batches
        self.pace = pace
        self.start_turns = start_turns
        self.start_delay = start_delay

    async def start(self, *, at_admission: bool = False) -> None:
        for _ in range(self.start_turns):
            await anyio.sleep(0)  # each a loop turn, like the awaits of an engine request
        await anyio.sleep(self.start_delay)

    async def aclose(self) -> None:
        return None

    async def batches(self) -> AsyncIterator[bytes]:
        yield CREATED
        for _ in range(self.left):
            if self.pace:
                await anyio.sleep(self.pace)
            yield DELTA
        self.final = {"status": "completed"}


async def _receive() -> dict[str, Any]:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


class Log:
    """What both requests wrote, in order: ("old", bytes) for the flowing stream, ("new", …) for the new one."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, bytes]] = []
        self.new_arrived: int | None = None

    def sender(self, who: str) -> Any:
        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message["body"]:
                self.entries.append((who, message["body"]))

        return send

    def old_writes(self) -> int:
        return sum(1 for who, _ in self.entries if who == "old")

    def old_deltas(self) -> int:
        return sum(body.count(b".delta\n") for who, body in self.entries if who == "old")

    def old_writes_during_start(self) -> int:
        """The flowing stream's writes after the new request arrived and before its first delta went out."""
        assert self.new_arrived is not None
        later = self.entries[self.new_arrived :]
        first_delta = next(i for i, (who, body) in enumerate(later) if who == "new" and b".delta\n" in body)
        return sum(1 for who, _ in later[:first_delta] if who == "old")


async def _two_streams(log: Log, old: Run, new: Any, *, new_stream: bool = True) -> None:
    """Run ``old`` until it has written a few times, then let the ``new`` request arrive; wait for both."""
    async with anyio.create_task_group() as group:
        group.start_soon(FirstTokensFirst(RunResponse(old, stream=True)), SCOPE, _receive, log.sender("old"))
        while log.old_writes() < 5:
            await anyio.sleep(0)
        log.new_arrived = len(log.entries)
        group.start_soon(FirstTokensFirst(RunResponse(new, stream=new_stream)), SCOPE, _receive, log.sender("new"))


@pytest.fixture
def long_start_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # So that a slow test machine cannot end a start by its time limit before its first delta.
    monkeypatch.setattr(_turns, "START_LIMIT", 10.0)


def test_a_flat_out_stream_waits_for_a_new_request_first_delta(long_start_limit: None) -> None:
    log = Log()
    anyio.run(_two_streams, log, Run(20_000), Run(50, start_turns=30))
    # Without the hold the old stream writes once per loop turn of the new request's 30-turn start.
    assert log.old_writes_during_start() <= 2
    # Held, not dropped: every event of both streams arrived.
    for who, n in (("old", 20_000), ("new", 50)):
        body = b"".join(b for w, b in log.entries if w == who)
        assert body == CREATED + DELTA * n


def test_a_paced_stream_is_not_held(long_start_limit: None) -> None:
    log = Log()
    anyio.run(_two_streams, log, Run(300, pace=0.002), Run(5, start_delay=0.1))
    # One write per engine chunk, every 2 ms, all through the new request's 100 ms start.
    assert log.old_writes_during_start() >= 10


def test_a_start_holds_the_others_for_start_limit_at_most() -> None:
    log = Log()
    anyio.run(_two_streams, log, Run(20_000), Run(5, start_delay=20 * _turns.START_LIMIT))
    assert log.old_writes_during_start() >= 10


def test_a_request_answered_in_json_holds_no_one(long_start_limit: None) -> None:
    log = Log()
    new = Run(50, pace=0.004)  # 200 ms of generation before the JSON answer

    async def main() -> None:
        await _two_streams(log, Run(20_000), new, new_stream=False)

    anyio.run(main)
    assert new.final is not None
    answer = next(i for i, (who, _) in enumerate(log.entries) if who == "new")
    assert log.new_arrived is not None
    assert sum(1 for who, _ in log.entries[log.new_arrived : answer] if who == "old") >= 10


def test_a_starting_stream_writes_its_first_delta_at_once() -> None:
    """A flat-out engine's first delta is not kept back while the producer works on (up to 2 ms) behind it."""
    log = Log()

    async def main() -> None:
        await FirstTokensFirst(RunResponse(Run(20_000), stream=True))(SCOPE, _receive, log.sender("new"))

    anyio.run(main)
    first = next(body for _, body in log.entries if b".delta\n" in body)
    assert first.count(b".delta\n") == 1
    # Once the first delta is out, batches share writes again.
    assert len(log.entries) < 20_000


def test_requests_arriving_without_end_cannot_stop_a_flowing_stream() -> None:
    """Overload: a new request every 20 ms, each starting until its limit (no delta): someone is always
    starting. The flowing stream still gets a share of the loop (START_LIMIT free after each OVERLOAD_SPAN of
    holds), not one batch per hold."""
    log = Log()
    arrivals, most = 0, 250

    async def main() -> None:
        nonlocal arrivals
        async with anyio.create_task_group() as group:
            group.start_soon(FirstTokensFirst(RunResponse(Run(10**9), stream=True)), SCOPE, _receive, log.sender("old"))
            while log.old_writes() < 5:
                await anyio.sleep(0)
            before = log.old_deltas()
            # Requests keep arriving until the flowing stream has sent 2,000 more deltas, however slowly a loaded
            # machine gets there: its free spells bring thousands each (hundreds on a loaded machine).
            while log.old_deltas() - before < 2000 and arrivals < most:
                never = Run(1, start_delay=1.0)
                group.start_soon(FirstTokensFirst(RunResponse(never, stream=True)), SCOPE, _receive, log.sender("new"))
                arrivals += 1
                await anyio.sleep(0.02)
            group.cancel_scope.cancel()

    anyio.run(main)
    # Without the free spells one delta per hold, a hold every START_LIMIT: a few hundred in 250 arrivals.
    assert arrivals < most, f"{log.old_deltas()} deltas in {arrivals} arrivals"


def test_a_start_past_its_limit_is_still_not_held_before_its_first_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request whose engine answers after START_LIMIT stops holding the others, but its own first delta
    must not then wait behind a newer request's start (a paced burst: the tail's first tokens did)."""
    monkeypatch.setattr(_turns, "START_LIMIT", 0.2)
    times: dict[str, float] = {}

    def sender(who: str) -> Any:
        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and b".delta\n" in message["body"]:
                times.setdefault(who, anyio.current_time())

        return send

    async def main() -> None:
        async with anyio.create_task_group() as group:
            slow = Run(20_000, start_delay=0.3)  # its start runs out at 0.2 s, its first delta comes at 0.3 s
            group.start_soon(FirstTokensFirst(RunResponse(slow, stream=True)), SCOPE, _receive, sender("slow"))
            await anyio.sleep(0.25)
            times["newer"] = anyio.current_time()
            blocker = Run(1, start_delay=1.0)  # starting until 0.45 s (its limit)
            group.start_soon(FirstTokensFirst(RunResponse(blocker, stream=True)), SCOPE, _receive, sender("newer"))
            while "slow" not in times:
                await anyio.sleep(0.01)
            group.cancel_scope.cancel()

    anyio.run(main)
    # About 0.05 s after the newer request arrived; held, it would come when that start ends (0.2 s).
    assert times["slow"] - times["newer"] < 0.12


def _burst_through_lane(burst: int) -> tuple[list[float], list[float], list[float]]:
    """A stream flowing flat out, then ``burst`` requests at once, each asking for the lane and keeping it for
    LANE_LIMIT: when the flowing stream wrote, when each request was let in (sorted), when each sent its
    first delta."""
    old_writes: list[float] = []
    let_in: list[float] = []
    first_deltas: list[float] = []

    async def old_send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message["body"]:
            old_writes.append(anyio.current_time())

    async def new_send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and b".delta\n" in message["body"]:
            first_deltas.append(anyio.current_time())

    async def laned(scope: Any, receive: Any, send: Any) -> None:
        await _turns.enter_lane()
        let_in.append(anyio.current_time())
        await RunResponse(Run(1, start_delay=0.1), stream=True)(scope, receive, send)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(FirstTokensFirst(RunResponse(Run(10**9), stream=True)), SCOPE, _receive, old_send)
            while len(old_writes) < 5:
                await anyio.sleep(0)
            for _ in range(burst):
                group.start_soon(FirstTokensFirst(laned), SCOPE, _receive, new_send)
            while len(first_deltas) < burst:
                await anyio.sleep(0.01)
            group.cancel_scope.cancel()

    anyio.run(main)
    return old_writes, sorted(let_in), first_deltas


def test_streams_held_through_the_lane_stay_held_until_its_last_requests_have_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the lane drains, its last requests are still starting: the streams held meanwhile wait for their
    first deltas too (START_LIMIT at most). Woken as the lane drained, a few hundred held streams would each
    run a batch (a big read after the hold) in the loop turn those requests' first chunks wait behind."""
    monkeypatch.setattr(_turns, "START_LIMIT", 0.3)
    monkeypatch.setattr(_turns, "OVERLOAD_SPAN", 4 * 0.3)
    monkeypatch.setattr(_turns, "LANE_LIMIT", 0.03)  # each start keeps the lane this long: 15 of them, 0.45 s
    monkeypatch.setattr(_turns, "LANE_GROUP", 0)  # one by one, so that the lane drains for that long
    old_writes, let_in, first_deltas = _burst_through_lane(15)
    # From before the last request was let in (the lane drained as it was) to its first delta: none.
    before_last, last_first = let_in[-2], max(first_deltas)
    assert before_last - let_in[0] > _turns.START_LIMIT  # the old stream's hold went on through the queue
    assert [t for t in old_writes if before_last <= t <= last_first] == []


def test_a_burst_draining_through_the_lane_is_not_overload(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst's requests starting one group after another, none arriving behind them, keep the flowing stream
    held while they wait in the lane, however long past OVERLOAD_SPAN that takes (up to DRAIN_SPAN): a free
    spell in the middle put the flowing streams' work before the burst's last first tokens (p99 of a burst of
    256, bench/ab_bench.py)."""
    monkeypatch.setattr(_turns, "START_LIMIT", 0.3)
    monkeypatch.setattr(_turns, "OVERLOAD_SPAN", 0.6)
    monkeypatch.setattr(_turns, "DRAIN_SPAN", 30.0)
    monkeypatch.setattr(_turns, "LANE_LIMIT", 0.03)  # each start keeps the lane this long: 48 of them, ~1.2 s
    # Groups of a sixteenth of the queue (one by one below 32 waiting): a drain longer than a span, in groups.
    monkeypatch.setattr(_turns, "LANE_GROUP", 1 / 16)
    burst = 48
    old_writes, let_in, first_deltas = _burst_through_lane(burst)
    assert let_in[-1] - let_in[0] > _turns.OVERLOAD_SPAN  # the drain outlasted a span of the overload rule
    assert [t for t in old_writes if let_in[1] <= t <= let_in[-1]] == []
    # In groups while the queue was long (16 or more waiting): fewer let-ins than requests, the first alone.
    moments = [t for i, t in enumerate(let_in) if i == 0 or t - let_in[i - 1] > 0.01]
    assert len(moments) <= burst - 6 and let_in[1] - let_in[0] > 0.01


def test_held_producers_wake_at_their_deadlines_or_all_at_once() -> None:
    """A hold ends at its own deadline or as soon as no request is starting, whichever comes first; a held
    producer cancelled meanwhile (its client gone) wakes no one and is woken by no one."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        wakes = _turns._Wakes(loop)
        soon, later, gone = wakes.wait(0.001), wakes.wait(60), wakes.wait(60)
        await soon
        assert not later.done()
        gone.cancel()
        wakes.wake_all()
        assert later.done() and gone.cancelled()
        await later

    asyncio.run(main())


def test_holds_that_keep_running_out_are_not_kept_once_woken() -> None:
    """Requests starting back to back for long: no moment with none starting wakes every holder at once, and
    the waiters the deadlines woke are dropped with their deadlines, so the bookkeeping holds only the holds
    under way (not one entry per hold since the server last had no request starting)."""

    async def main() -> None:
        wakes = _turns._Wakes(asyncio.get_running_loop())
        for _ in range(50):
            held = [wakes.wait(0.001) for _ in range(40)]
            await asyncio.gather(*held)
        assert not wakes._due
        wakes.wake_all()

    asyncio.run(main())
