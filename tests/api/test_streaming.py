"""The SSE writer at its ASGI boundary: coalesced writes, whole events, and a client gone mid-write."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from harmony_responses.http.streaming import RunResponse
from harmony_responses.sse import ends_response

FRAME = b"event: response.output_text.delta\ndata: {}\n\n"


class FakeRun:
    """A run whose batches come without ever waiting, like the replay engine at zero delay."""

    request_id = "resp_test"
    final = None

    def __init__(self, batches: int) -> None:
        self.batches_left = batches
        self.closed = False
        self.produced = 0

    async def start(self, *, at_admission: bool = False) -> None:
        return None

    async def aclose(self) -> None:
        self.closed = True

    async def batches(self) -> AsyncIterator[bytes]:
        try:
            for _ in range(self.batches_left):
                self.produced += 1
                yield FRAME
        finally:
            self.closed = True


async def _receive() -> dict[str, Any]:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


def test_fast_batches_share_writes_and_every_event_arrives_whole() -> None:
    run = FakeRun(500)
    bodies: list[bytes] = []
    more: list[bool] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            bodies.append(message["body"])
            more.append(message.get("more_body", False))

    anyio.run(RunResponse(run, stream=True), {"type": "http", "method": "POST", "path": "/"}, _receive, send)
    assert b"".join(bodies) == FRAME * 500
    # The body ends with the last events, in the same write: no write of its own for the end.
    assert more == [True] * (len(bodies) - 1) + [False] and bodies[-1].endswith(FRAME)
    assert all(body.endswith(b"\n\n") for body in bodies)  # never an event split across writes
    assert len(bodies) < 500  # queued batches were coalesced instead of one write each


@pytest.mark.parametrize(
    ("make_run", "failing_write", "most_produced"),
    [
        # Batches back to back: the writer's write fails.
        (lambda: FakeRun(100_000), 2, 100_000 - 1),
        # Batches after waits: the producer's own write fails (the writer is told).
        (lambda: PacedRun(1000), 5, 19),
    ],
    ids=["flat out", "paced"],
)
def test_a_client_gone_mid_write_ends_quietly_and_stops_the_run(
    make_run: Callable[[], FakeRun], failing_write: int, most_produced: int
) -> None:
    run = make_run()
    writes = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal writes
        if message["type"] == "http.response.body":
            writes += 1
            if writes == failing_write:
                raise OSError("connection reset by peer")

    response = RunResponse(run, stream=True)
    anyio.run(response, {"type": "http", "method": "POST", "path": "/"}, _receive, send)  # must not raise
    assert response.disconnected
    assert run.closed
    assert run.produced <= most_produced  # generation stopped instead of running to the end


class SlowRun(FakeRun):
    """A run whose engine sends one batch and then waits; its close takes a loop turn or two."""

    def __init__(self) -> None:
        super().__init__(1)
        self.closing_done = False

    async def aclose(self) -> None:
        await asyncio.sleep(0.01)  # an engine's abort request: an await that a cancellation could cut
        self.closed = self.closing_done = True

    async def batches(self) -> AsyncIterator[bytes]:
        yield FRAME
        await asyncio.sleep(3600)


def test_a_disconnect_ends_the_response_quietly_and_closes_the_run() -> None:
    run = SlowRun()
    disconnect = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message["body"]:
            disconnect.set()  # the client goes away after the first event

    async def main() -> None:
        response = RunResponse(run, stream=True)
        await asyncio.wait_for(response({"type": "http", "path": "/"}, receive, send), timeout=5)  # no raise
        assert response.disconnected

    asyncio.run(main())
    assert run.closing_done


def test_a_cancelled_request_is_still_cancelled_after_its_run_is_closed() -> None:
    """A server shutting down cancels the request's task: the cancellation goes on after the run's close,
    which a cancellation arriving meanwhile does not cut short."""
    run = SlowRun()

    async def send(message: dict[str, Any]) -> None:
        return None

    async def main() -> None:
        task = asyncio.create_task(RunResponse(run, stream=True)({"type": "http", "path": "/"}, _receive, send))
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.001)
        task.cancel()  # a second cancellation, during the close
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert run.closing_done


class FailingClose(FakeRun):
    """A run whose close fails, at once or after waiting on the engine a few times."""

    def __init__(self, waits: int) -> None:
        super().__init__(1)
        self.waits = waits
        self.steps = 0

    async def aclose(self) -> None:
        for _ in range(self.waits):
            await asyncio.sleep(0)
            self.steps += 1
        raise RuntimeError("the engine's abort failed")


@pytest.mark.parametrize("waits", [0, 3], ids=["at once", "after waiting"])
def test_a_close_runs_to_its_end_and_its_failure_reaches_the_request(waits: int) -> None:
    """However the run's close goes (without waiting, or waiting on the engine), it runs to its end before the
    response is over, and an error it raises is the request's (the server logs it), not lost in a task."""
    run = FailingClose(waits)

    async def send(message: dict[str, Any]) -> None:
        return None

    with pytest.raises(RuntimeError, match="abort failed"):
        anyio.run(RunResponse(run, stream=True), {"type": "http", "path": "/"}, _receive, send)
    assert run.steps == waits


COMPLETED = b'event: response.completed\ndata: {"type":"response.completed"}\n\n'


class EndingRun(FakeRun):
    """A run whose last batch is its terminal event, and which has work left after it (usage, logs)."""

    finished_up = False

    async def batches(self) -> AsyncIterator[bytes]:
        try:
            yield FRAME
            yield FRAME + COMPLETED
            await asyncio.sleep(0.01)  # the run finishing up after its last event
            self.finished_up = True
        finally:
            self.closed = True


def test_the_terminal_event_goes_out_with_the_end_of_the_body_and_the_run_finishes_up() -> None:
    run = EndingRun(0)
    sent: list[dict[str, Any]] = []
    complete = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            complete.set()

    async def receive() -> dict[str, Any]:
        await complete.wait()
        return {"type": "http.disconnect"}  # what uvicorn answers once the response is complete

    async def main() -> None:
        await RunResponse(run, stream=True)({"type": "http", "method": "POST", "path": "/"}, receive, send)

    asyncio.run(main())
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert bodies[-1]["body"].endswith(COMPLETED) and bodies[-1]["more_body"] is False
    assert [m.get("more_body") for m in bodies].count(False) == 1  # no empty write for the end
    # The "disconnect" that follows a complete response is not the client's: the run was not cut short.
    assert run.finished_up and run.closed


@pytest.mark.parametrize(
    ("body", "ends"),
    [
        (FRAME + COMPLETED, True),
        (COMPLETED, True),
        (b"event: response.failed\ndata: {}\n\n", True),
        (COMPLETED + FRAME, False),
        (FRAME, False),
        # A delta whose text names a terminal event: inside data: JSON the newline is escaped.
        (b'event: response.output_text.delta\ndata: {"delta":"\\nevent: response.completed\\n"}\n\n', False),
    ],
)
def test_the_end_of_a_response_is_told_by_its_last_frame(body: bytes, ends: bool) -> None:
    assert ends_response(body) is ends


class PacedRun(FakeRun):
    """A run whose batches come a few milliseconds apart, as a paced engine's tokens do."""

    async def batches(self) -> AsyncIterator[bytes]:
        try:
            for i in range(self.batches_left):
                await asyncio.sleep(0.002)
                self.produced += 1
                yield b'event: response.output_text.delta\ndata: {"n":%d}\n\n' % i
            await asyncio.sleep(0.002)
            yield COMPLETED
        finally:
            self.closed = True


def test_a_paced_stream_arrives_whole_and_in_order_one_write_per_batch() -> None:
    """Batches that come after a wait are written as they come (by the producer, past the idle writer):
    every event once, in order, the last with the end of the body."""
    run = PacedRun(30)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(RunResponse(run, stream=True)({"type": "http", "method": "POST", "path": "/"}, _receive, send))
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    expected = b"".join(b'event: response.output_text.delta\ndata: {"n":%d}\n\n' % i for i in range(30))
    assert b"".join(m["body"] for m in bodies) == expected + COMPLETED
    assert [m.get("more_body") for m in bodies].count(False) == 1 and bodies[-1]["more_body"] is False
    assert len(bodies) >= 25  # written as they came, not held back to be coalesced
