"""How the event loop's time is shared: when a producer yields, and first tokens first.

Producers. A producer whose engine never waits (replay at zero delay, a fast engine whose chunks are
already buffered) would keep the loop to itself: the writer, the disconnect watcher and every other
stream would starve. Yielding after every batch costs a whole loop turn per engine chunk, so a producer
yields once every ``YIELD_INTERVAL`` seconds of *uninterrupted* work. Work is interrupted whenever the
producer waits for its engine: a batch that arrives more than ``WAITED`` after the previous one ended
means the loop had its turns meanwhile, and the count starts again. (Counting from the last yield alone
made every chunk of a paced engine, one per 10 ms, look overdue: one needless loop turn per token per
stream.)

First tokens first. A request is *starting* from the moment it reaches the endpoint (``starting()``
counts it; the HTTP layer's ``FirstTokensFirst`` wraps the endpoint in it) until its first delta is
written (the transport calls ``Start.finish``), it ends, it turns out not to stream (``end_start``), or
``START_LIMIT`` has passed. While another request is starting, a producer working back to back that has
delivered its first delta (or has none to deliver) is *held* at its next batch, until no request is
starting (``START_LIMIT`` at most), instead of keeping its ``YIELD_INTERVAL``. A saturated server then
gives the loop to the new request's parsing, rendering, engine request and first chunks, the wait a client
notices most, while the streams already flowing pause for a few milliseconds; their tokens wait in the
buffers, nothing is lost. Without this, 64 streams each keeping the loop for 2 ms made every step of a new
request wait up to 128 ms, and its first token 200 ms (engine bench, flat out). A producer whose batch came
after a wait for its engine (a paced engine) is never held: it costs the loop little, and holding it would
only delay its tokens. ``START_LIMIT`` bounds what a slow start (a long prefill on the engine) can cost
the others, and under lasting overload (requests arriving faster than they start) flowing streams still
get a fifth of the loop (``Traffic.hold``). A starting request's own producer yields after every batch that
came right behind another, so that its writer sends the first delta as soon as it exists rather than after
up to ``YIELD_INTERVAL`` of the tokens behind it.

One start at a time. A request's start (validation, history, rendering, the engine request) is CPU
work with a few awaits in it. Interleaved, 64 requests arriving at once all finish starting together, after
the whole burst's start work, and only then does any first token go out: the median request waits for all
of them. So after arrival a request waits in the *start lane* (``Start.enter_lane``), which admits
``LANE_WIDTH`` at a time in arrival order, and leaves it as soon as its engine call is sent
(``engine_called``), its first delta is out, it ends, or ``LANE_LIMIT`` has passed (a start that waits for
something slow, an MCP server or a container, holds the next one up that long at most). The starts run one
after another while the first tokens of those already sent go out in between: the first-token median of a
burst halves for the same work, and the last one comes no later.

The bookkeeping is per event loop (``Traffic.of``): the loop's time is what is shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
import weakref
from collections import deque
from collections.abc import Iterator

from ..metrics import QUEUE_DEPTH

__all__ = [
    "LANE_LIMIT",
    "LANE_WIDTH",
    "START_LIMIT",
    "YIELD_INTERVAL",
    "Start",
    "Turns",
    "end_start",
    "engine_called",
    "starting",
]

# The longest a producer keeps the event loop to itself.
YIELD_INTERVAL = 0.002
# A gap between batches longer than this means the producer waited (back-to-back batches are µs apart).
WAITED = 0.0005
# The longest a request counts as starting, so the longest it holds the other streams' producers.
START_LIMIT = 0.05
# How many requests do their start work at once (the start lane), and the longest one keeps its place.
LANE_WIDTH = 1
LANE_LIMIT = 0.005
# The queue_depth gauges this module keeps (metrics.QUEUE_DEPTH): one update per request, and per hold.
_STARTING = QUEUE_DEPTH.labels("starting")
_HELD = QUEUE_DEPTH.labels("held")
# How long holds may keep running out (requests arriving faster than they start) before the flowing
# streams get START_LIMIT free of holds.
OVERLOAD_SPAN = 4 * START_LIMIT


class Traffic:
    """One event loop's starting requests."""

    __slots__ = ("__weakref__", "_clear", "_free_until", "_lane", "_lane_queue", "_overloaded_since", "starting")

    _of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Traffic] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.starting = 0
        self._clear: asyncio.Future[None] | None = None  # done when no request is starting
        self._free_until = 0.0  # (monotonic) no one is held before this
        self._overloaded_since: float | None = None  # since when holds have been running out
        self._lane = 0  # places taken in the start lane
        self._lane_queue: deque[asyncio.Future[None]] = deque()  # requests waiting for one, in arrival order

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> Traffic:
        traffic = cls._of.get(loop)
        if traffic is None:
            traffic = cls._of[loop] = cls()
        return traffic

    def holding(self) -> bool:
        """Whether a producer working back to back should be held now."""
        return self.starting > 0 and time.monotonic() >= self._free_until

    async def hold(self) -> None:
        """Wait until no request is starting, at most ``START_LIMIT``.

        Holds that keep running out mean requests arrive faster than they start (the process is
        overloaded). A burst of them (64 requests 2 ms apart) still gets the loop first, but after
        ``OVERLOAD_SPAN`` of it the streams already flowing get ``START_LIMIT`` free of holds, so that
        they keep a fifth of the loop instead of one batch per hold.
        """
        if self._clear is None or self._clear.done():
            self._clear = asyncio.get_running_loop().create_future()
        # asyncio.wait neither cancels the shared future on timeout nor when this task is cancelled.
        await asyncio.wait((self._clear,), timeout=START_LIMIT)
        if not self._clear.done():
            now = time.monotonic()
            if self._overloaded_since is None:
                self._overloaded_since = now - START_LIMIT
            elif now - self._overloaded_since >= OVERLOAD_SPAN:
                self._free_until = now + START_LIMIT
                self._overloaded_since = None

    def _lane_left(self) -> None:
        """A place in the start lane is free: the next request waiting (not cancelled) takes it."""
        queue = self._lane_queue
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._lane -= 1

    def _started(self) -> None:
        self.starting -= 1
        if not self.starting:
            self._overloaded_since = None
            if self._clear is not None and not self._clear.done():
                self._clear.set_result(None)


class Start:
    """One request: counted as starting (``active``) until ``end()``, and never held before it has
    ``delivered`` its first delta (a start that ran out of ``START_LIMIT`` before it, behind a queue of
    requests or a slow engine, must not then wait behind the others' starts)."""

    __slots__ = ("active", "delivered", "traffic", "_in_lane", "_lane_timer", "_loop", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.traffic = Traffic.of(loop)
        self.traffic.starting += 1
        _STARTING.inc()
        self.active = True
        self.delivered = False
        self._loop = loop
        self._in_lane = False
        self._lane_timer: asyncio.TimerHandle | None = None
        self._timer = loop.call_later(START_LIMIT, self.end)

    async def enter_lane(self) -> None:
        """Wait for a place in the start lane (the module docstring), in arrival order."""
        traffic = self.traffic
        if traffic._lane < LANE_WIDTH and not traffic._lane_queue:
            traffic._lane += 1
        else:
            waiter = self._loop.create_future()
            traffic._lane_queue.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    traffic._lane_left()  # given the place, then cancelled: the next one has it
                raise
        self._in_lane = True
        self._lane_timer = self._loop.call_later(LANE_LIMIT, self.leave_lane)

    def leave_lane(self) -> None:
        """The start work is done (or took too long): the next request may start (idempotent)."""
        if self._in_lane:
            self._in_lane = False
            if self._lane_timer is not None:
                self._lane_timer.cancel()
            # Handed on at the next loop turn, not now: the requests behind may have arrived in this turn
            # (all of a burst's do), and admitted now each would start in it too, before the loop polls for
            # the engines' answers to those already sent.
            self._loop.call_soon(self.traffic._lane_left)

    def end(self) -> None:
        self.leave_lane()
        if self.active:
            self.active = False
            self._timer.cancel()
            _STARTING.dec()
            self.traffic._started()

    def finish(self) -> None:
        """The first delta is out, or there will be none to hurry: ``end()``, and holdable from now on."""
        self.delivered = True
        self.end()


# The request whose task (or a task it started) runs here: its producers are not held before its first delta.
_current: contextvars.ContextVar[Start | None] = contextvars.ContextVar("harmony_responses_start", default=None)


def engine_called() -> None:
    """The current request's engine call is being sent: its start work is done, the next one's may begin."""
    start = _current.get()
    if start is not None:
        start.leave_lane()


def end_start() -> None:
    """The current request does not stream (a JSON answer): it stops counting as starting."""
    start = _current.get()
    if start is not None:
        start.finish()


@contextlib.contextmanager
def starting() -> Iterator[Start]:
    """Count the request running in this context as starting, until its ``Start.finish()`` or the end.

    The caller awaits ``Start.enter_lane()`` before its start work."""
    start = Start(asyncio.get_running_loop())
    token = _current.set(start)
    try:
        yield start
    finally:
        start.finish()  # what runs on (a background response) is an ordinary producer
        _current.reset(token)


class Turns:
    """Call ``arrived()`` when a batch comes in and ``await done()`` when it has been handed on."""

    def __init__(self) -> None:
        self._traffic = Traffic.of(asyncio.get_running_loop())
        self._start = _current.get()
        self._clock = time.monotonic
        self._since = self._ended = self._clock()
        self._fresh = True  # the batch being handled came after a wait

    def arrived(self) -> None:
        now = self._clock()
        self._fresh = now - self._ended > WAITED
        if self._fresh:
            self._since = now

    def waited(self) -> None:
        """The producer has just waited for something else (its reader, the store): the loop had its turns."""
        self._since = self._ended = self._clock()

    async def done(self) -> None:
        now = self._ended = self._clock()
        start = self._start
        if start is not None and start.active and not self._fresh:
            # Starting, and the next batch may be waiting already: let the writer send this one first (the
            # first delta is among the next few). After a fresh batch the producer waits for its engine
            # next, which gives the writer its turn anyway; a yield would only delay the next chunk by a
            # whole loop pass, long when many requests are starting.
            await asyncio.sleep(0)
            self.waited()
        elif not self._fresh and (start is None or start.delivered) and self._traffic.holding():
            _HELD.inc()
            try:
                await self._traffic.hold()  # another request is starting: it goes first
            finally:
                _HELD.dec()
            self.waited()
        elif now - self._since >= YIELD_INTERVAL:
            await asyncio.sleep(0)
            self.waited()
