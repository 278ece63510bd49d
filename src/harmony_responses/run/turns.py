"""How the event loop's time is shared: when a producer yields, and first tokens first.

Producers. A producer whose engine never waits (replay at zero delay, a fast engine whose chunks are
already buffered) would keep the loop to itself: the writer, the disconnect watcher and every other
stream would starve. Yielding after every batch costs a whole loop turn per engine chunk, so a producer
yields once every ``YIELD_INTERVAL`` seconds of *uninterrupted* work. Work is interrupted whenever the
producer waits for its engine: a batch that arrives more than ``WAITED`` after the previous one ended
means the loop had its turns meanwhile, and the count starts again. (Counting from the last yield alone
made every chunk of a paced engine, one per 10 ms, look overdue: one needless loop turn per token per
stream.)

First tokens first. A request is *starting* from the moment it reaches the server (``starting()`` counts
it; the HTTP layer's ``FirstTokensFirst`` wraps ``POST /v1/responses`` in it) until its first delta is
written (the transport calls ``Start.finish``), it ends, it turns out not to stream (``end_start``), or
``START_LIMIT`` has passed (counted from its arrival until it asks for the start lane below, not while it
waits there, and again from when the lane lets it in). While another request is starting, a producer
working back to back that has handed on its first delta (``Turns.handed_first_delta``: its writer, never
held, sends it at its next turn) or has none to deliver is *held* at its next batch, until no request is
starting (``START_LIMIT`` at most), instead of keeping its ``YIELD_INTERVAL``. A saturated server then
gives the loop to the new request's parsing, rendering, engine request and first chunks, the wait a client
notices most, while the streams already flowing pause for a few milliseconds; their tokens wait in the
buffers, nothing is lost. Without this, 64 streams each keeping the loop for 2 ms made every step of a new
request wait up to 128 ms, and its first token 200 ms (engine bench, flat out). A held producer's engine
connection is not read meanwhile (engine/_reading.py): read, a few hundred held streams flowing flat out
took most of each loop turn between two starts. A producer whose batch came after a wait for its engine (a
paced engine) is held only while requests wait in the start lane: otherwise it costs the loop little, and
holding it would only delay its tokens. ``START_LIMIT`` bounds what a slow
start (a long prefill on the engine) can cost the others, and under lasting overload (requests arriving
faster than they start) flowing streams still get a fifth of the loop (``Traffic.hold``); a burst whose
requests wait in the start lane with none arriving behind them is not overload while its queue shrinks
(``DRAIN_SPAN`` at most). A starting
request's own producer yields after every batch that came right behind another, so that its writer sends
the first delta as soon as it exists rather than after up to ``YIELD_INTERVAL`` of the tokens behind it.

The start lane. A request's start (validation, history, rendering, the engine request) is CPU work with
few awaits in it, and asyncio runs every ready task once per loop turn: 64 requests arriving together all
start in the same turn, and no engine's answer is read before the last of them has sent its own, so the
median request waits for the whole burst's start work before its first token. So once its body is in a
request waits in the *start lane* (``enter_lane``; before the middleware when the body came with the head,
``http/first_tokens.py``), in arrival order, and leaves it when its engine call is
sent or it is about to wait for something else (``leave_lane``: the store, a thread, an MCP server), when it
ends, or after ``LANE_LIMIT`` at most. The lane lets the next requests in a loop turn after the last one
left: the engines' answers to the starts already sent are read in between and their first tokens go out,
so first tokens come group by group instead of all after the last start (one by one, the median of a burst
of 64 about halved, but the last ones of a large burst came later, behind the first ones' streams). When the loop's
other work between two lets-in is many starts' worth (``LANE_SHARE``: streams that are not held, a free
spell of the overload rule), it lets in several at once; a queue goes in by groups (``LANE_GROUP`` of it at
least: each let-in costs a loop turn), and a long one (``LANE_LONG``) by halves until it is empty: a burst of
256 in ten let-ins, its first half in one as through a proxy. While requests wait there, Python's cyclic
garbage collector is held off (``GC_DEFER_LIMIT`` at most): a burst's new requests are tens of thousands of
young objects, and one young collection in the middle of it took 30-50 ms, each start behind it waiting;
it runs once the lane is clear instead.
The lane's order is by ``service_tier`` first (``tier_rank``: ``priority`` before ``default`` before
``flex``), arrival within a tier: a priority request arriving behind a queue of flex ones starts next.
While requests wait there, every producer that has handed on its first delta is held, a paced one too (a
loop turn spent on the tokens of streams already flowing is a turn between two starts), and a hold that
runs out waits again while the queue lasts, up to the overload rule: as a bare proxy, which starts a
whole burst in one turn, gives the flowing streams nothing meanwhile.

The bookkeeping is per event loop (``Traffic.of``): the loop's time is what is shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import math
import re
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator

from ..engine import reading_here
from ..metrics import QUEUE_DEPTH

__all__ = [
    "LANE_LIMIT",
    "RANKS",
    "START_LIMIT",
    "YIELD_INTERVAL",
    "Start",
    "Turns",
    "current_start",
    "end_start",
    "enter_lane",
    "leave_lane",
    "starting",
    "tier_rank",
]

# The longest a producer keeps the event loop to itself.
YIELD_INTERVAL = 0.002
# A gap between batches longer than this means the producer waited (back-to-back batches are µs apart).
WAITED = 0.0005
# The longest a request counts as starting, so the longest it holds the other streams' producers.
START_LIMIT = 0.05
# The longest a request keeps its place in the start lane; the most it lets in at once; how many starts'
# worth of other work between two lets it in before it lets in more than one; a start's work before any
# was measured; the least part of its queue it lets in at once; from how many waiting a queue is long, and
# the least part of a long queue it lets in at once until it is empty.
LANE_LIMIT = 0.005
LANE_MOST = 256
LANE_SHARE = 8
LANE_FIRST_COST = 0.0003
LANE_GROUP = 1 / 16
LANE_LONG = 96
LANE_LONG_GROUP = 1 / 2
# The queue_depth gauges this module keeps (metrics.QUEUE_DEPTH): one update per request, and per hold.
_STARTING = QUEUE_DEPTH.labels("starting")
_HELD = QUEUE_DEPTH.labels("held")
_LANE_QUEUE = QUEUE_DEPTH.labels("start_lane")
# The longest the garbage collector is held off while requests wait in a start lane (requests arriving
# faster than they start for longer than this: reference cycles must still be collected).
GC_DEFER_LIMIT = 0.5
# How long holds may keep running out (requests arriving faster than they start) before the flowing
# streams get START_LIMIT free of holds; and how long at most while the start lane drains (a burst's
# requests starting, none arriving behind them), which is not overload.
OVERLOAD_SPAN = 4 * START_LIMIT
DRAIN_SPAN = 20 * START_LIMIT


# The start lane's order by service_tier (what a request asks for, openai's ServiceTier): lower goes first.
RANKS = {"priority": 0, "fast": 0, "ultrafast": 0, "flex": 2}
_DEFAULT_RANK = 1
_TIER_IN_JSON = re.compile(rb'"service_tier"\s*:\s*"([a-z]+)"')


def tier_rank(body: object) -> int:
    """A request's place in the start lane's order: from its parsed body, or its raw JSON (a body that came
    with the head is let in before it is parsed, http/first_tokens.py)."""
    if isinstance(body, dict):
        tier = body.get("service_tier")
        return RANKS.get(tier, _DEFAULT_RANK) if isinstance(tier, str) else _DEFAULT_RANK
    if isinstance(body, bytes | bytearray) and b'"service_tier"' in body:
        found = _TIER_IN_JSON.search(body)
        return RANKS.get(found.group(1).decode(), _DEFAULT_RANK) if found else _DEFAULT_RANK
    return _DEFAULT_RANK


class _Ranked:
    """The lane's waiting requests: a queue per rank, the lowest rank's first."""

    __slots__ = ("_queues",)

    def __init__(self) -> None:
        self._queues: tuple[deque[asyncio.Future[None]], ...] = (deque(), deque(), deque())

    def __bool__(self) -> bool:
        return any(self._queues)

    def __len__(self) -> int:
        return sum(map(len, self._queues))

    def __iter__(self) -> Iterator[asyncio.Future[None]]:
        for queue in self._queues:
            yield from queue

    def append(self, waiter: asyncio.Future[None], rank: int = _DEFAULT_RANK) -> None:
        self._queues[rank].append(waiter)

    def popleft(self) -> asyncio.Future[None]:
        for queue in self._queues:
            if queue:
                return queue.popleft()
        raise IndexError("pop from an empty lane")

    def clear(self) -> None:
        for queue in self._queues:
            queue.clear()


class _Wakes:
    """The held producers' wake-ups: all at once (``wake_all``: no request is starting any more), or each at
    its deadline, rounded up to the millisecond so that the holds of a burst share their loop timers. A
    deadline's waiters are kept until its timer fires, no longer: whatever is waiting is in ``_due``.

    Hand-written rather than ``asyncio.wait((shared_future,), timeout=...)``: that cost each hold a timer, a
    waiter future, a set and a callback added to and removed from the shared future, about 7 µs more than a
    bare future (a burst of 256 made five holds per request flat out, many more paced).
    """

    __slots__ = ("_due", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._due: dict[int, list[asyncio.Future[None]]] = {}  # by deadline, in loop milliseconds

    def wait(self, timeout: float) -> asyncio.Future[None]:
        """A future done at ``wake_all`` or after ``timeout`` (at most a millisecond later), whichever first.
        Cancelling it (its task cancelled) touches no other waiter."""
        loop = self._loop
        waiter = loop.create_future()
        tick = math.ceil((loop.time() + timeout) * 1000)
        due = self._due.get(tick)
        if due is None:
            due = self._due[tick] = []
            loop.call_at(tick / 1000, self._wake_due, tick)
        due.append(waiter)
        return waiter

    def _wake_due(self, tick: int) -> None:
        for waiter in self._due.pop(tick):
            if not waiter.done():
                waiter.set_result(None)

    def wake_all(self) -> None:
        # Each deadline's list is emptied, not dropped: its timer still comes, and finds nothing left to wake.
        for due in self._due.values():
            for waiter in due:
                if not waiter.done():
                    waiter.set_result(None)
            due.clear()


class Traffic:
    """One event loop's starting requests."""

    __slots__ = (
        "__weakref__",
        "_cleared",
        "_free_until",
        "_overloaded_since",
        "_wakes",
        "_window_queue",
        "_window_since",
        "lane",
        "starting",
    )

    _of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Traffic] = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.starting = 0
        self._cleared = 0  # how many times no request was starting any more
        self._wakes = _Wakes(loop)
        self._free_until = 0.0  # (monotonic) no one is held before this
        self._overloaded_since: float | None = None  # since when holds have been running out
        # The overload rule's current span: since when, and how many requests waited in the lane then.
        self._window_since = 0.0
        self._window_queue = 0
        self.lane = _Lane(loop)

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> Traffic:
        traffic = cls._of.get(loop)
        if traffic is None:
            traffic = cls._of[loop] = cls(loop)
        return traffic

    def holding(self) -> bool:
        """Whether a producer working back to back should be held now."""
        return self.starting > 0 and time.monotonic() >= self._free_until

    async def hold(self) -> None:
        """Wait until no request is starting: at most ``START_LIMIT``, or while requests wait in the start
        lane, until they have started or the overload rule below frees the flowing streams.

        Holds that keep running out mean requests arrive faster than they start (the process is
        overloaded). A burst of them (64 requests 2 ms apart) still gets the loop first, but after
        ``OVERLOAD_SPAN`` of it the streams already flowing get ``START_LIMIT`` free of holds, so that
        they keep a fifth of the loop instead of one batch per hold; unless fewer requests wait in the lane
        than a span before (a burst draining, nothing arriving behind it), for ``DRAIN_SPAN`` at most, so
        that the burst's last starts do not wait behind a spell of the flowing streams. While the lane has a
        queue its starts are going on, one after another: a hold that ran out would give the loop one batch
        of a flowing stream (hundreds of tokens after a fast engine's read, a millisecond), and a burst of 256
        lost most of the loop to those between its starts.
        """
        cleared = self._cleared
        await self._wakes.wait(START_LIMIT)
        while self._cleared == cleared:
            now = time.monotonic()
            if self._overloaded_since is None:
                self._overloaded_since = self._window_since = now - START_LIMIT
                self._window_queue = self.lane.waiting
            elif now - self._window_since >= OVERLOAD_SPAN:
                waiting = self.lane.waiting
                if waiting < self._window_queue and now - self._overloaded_since < DRAIN_SPAN:
                    # Fewer wait than a span ago: a burst being started, not overload; a free spell in it would
                    # put a spell of the flowing streams' work before its last requests' first tokens.
                    self._window_since, self._window_queue = now, waiting
                else:
                    self._free_until = now + START_LIMIT
                    self._overloaded_since = None
            if now < self._free_until or not self.lane.queued:
                return
            # Requests still wait in the lane: wake when none is starting, or when the overload rule frees the
            # flowing streams, and not every START_LIMIT meanwhile (a few hundred held streams woke thousands of
            # times during a burst of 256, for nothing). Not when the lane drains: its last requests are still
            # starting then, and every stream held through it would run a batch (a big read after a hold) in the
            # loop turn their first chunks wait behind. (A wake at the span's end after the lane drained does
            # return: waiting there too for the last starts made the p99 of bursts of 256 worse, 093ade8.)
            free_in = self._window_since + OVERLOAD_SPAN - now
            await self._wakes.wait(max(free_in, 0.001))

    def _started(self) -> None:
        self.starting -= 1
        if not self.starting:
            self._overloaded_since = None
            self._cleared += 1
            self._wakes.wake_all()


class _Collections:
    """Python's cyclic garbage collector, held off while requests wait in any loop's start lane."""

    def __init__(self) -> None:
        self._queues = 0  # lanes with requests waiting
        self._held_since: float | None = None  # when this disabled the collector (None: it did not)

    def hold(self) -> None:
        self._queues += 1
        if self._queues == 1 and gc.isenabled():  # a collector disabled by someone else stays theirs
            gc.disable()
            self._held_since = time.monotonic()

    def release(self) -> None:
        self._queues -= 1
        if not self._queues:
            self._enable()

    def check(self, now: float) -> None:
        """Held for ``GC_DEFER_LIMIT``: collect again, though requests still wait."""
        if self._held_since is not None and now - self._held_since >= GC_DEFER_LIMIT:
            self._enable()

    def _enable(self) -> None:
        if self._held_since is not None:
            self._held_since = None
            gc.enable()


_COLLECTIONS = _Collections()


class _Lane:
    """One event loop's start lane (the module docstring)."""

    __slots__ = ("_cost", "_group", "_inside", "_let_in_at", "_loop", "_queue", "_reopening", "_work")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue = _Ranked()  # requests waiting, by tier, in arrival order
        self._inside = 0  # let in, not left yet
        # One left in this loop turn: whoever comes next waits for the next turn (they arrive in this one
        # together, a burst's all do, and let straight in each would start before any answer is read).
        self._reopening = False
        self._let_in_at: float | None = None  # when the last ones were let in, while requests queue
        self._work = 0.0  # the start work measured since then
        self._cost = LANE_FIRST_COST  # one start's work, a moving average
        self._group = LANE_GROUP  # LANE_LONG_GROUP once the queue was long, until it is empty

    @property
    def queued(self) -> bool:
        """Whether requests are waiting to start."""
        return bool(self._queue)

    @property
    def waiting(self) -> int:
        """How many requests wait to start."""
        return len(self._queue)

    def _emptied(self) -> None:
        self._group = LANE_GROUP
        _COLLECTIONS.release()

    async def enter(self, rank: int = _DEFAULT_RANK) -> None:
        if not self._inside and not self._queue and not self._reopening:
            self._inside = 1
            return
        waiter = self._loop.create_future()
        if not self._queue:
            _COLLECTIONS.hold()
        self._queue.append(waiter, rank)
        _LANE_QUEUE.inc()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.left(0.0)  # let in, then cancelled: its place goes on
            elif self._queue and all(w.done() for w in self._queue):
                self._queue.clear()  # every request still waiting was cancelled (a loop closing, say)
                self._emptied()
            raise
        finally:
            _LANE_QUEUE.dec()

    def left(self, took: float) -> None:
        self._inside -= 1
        if took:
            self._work += took
            self._cost += (took - self._cost) / 8
        if not self._inside and not self._reopening:
            self._reopening = True
            self._loop.call_soon(self._reopen)

    def _reopen(self) -> None:
        self._reopening = False
        queue = self._queue
        if not queue:
            self._let_in_at = None
            return
        if self._inside:
            return
        now = time.monotonic()
        _COLLECTIONS.check(now)
        most = 1
        if self._let_in_at is not None:
            # The loop's other work since the last ones were let in: when it is many starts' worth (streams
            # that cannot be held, or a free spell of the overload rule), more start together.
            other = now - self._let_in_at - self._work
            most = int(other / (LANE_SHARE * self._cost))
        # A queue goes in by groups, LANE_GROUP of it at a time at least, and a long one (LANE_LONG waiting at
        # once) by halves until it is empty: each let-in is a loop turn of its own, and between two the first
        # tokens of those let in before are read and written, all before the last requests' starts. Groups of
        # a sixteenth (down from one by one) took a burst of 256's p99 from 422 to 380 ms paced; halves, from
        # 1.48-1.63x the bare proxy's to 1.04-1.14x, but a burst of 64 by halves had its median over 1.10x in
        # four runs in five, and `--workers 2` (32 a worker) fell from about 1.8x one process to 1.4-1.6x
        # (docs/reference/benchmarks.md, "The start lane by halves"). LANE_MOST at most.
        waiting = len(queue)
        if waiting >= LANE_LONG:
            self._group = LANE_LONG_GROUP
        most = max(1, min(LANE_MOST, max(most, int(waiting * self._group))))
        self._let_in_at = now
        self._work = 0.0
        while queue and most:
            waiter = queue.popleft()
            if not waiter.done():  # done: cancelled while waiting
                waiter.set_result(None)  # its task runs at the next turn, after the loop has read what came in
                self._inside += 1
                most -= 1
        if not queue:
            self._emptied()


class Start:
    """One request: counted as starting (``active``) until ``end()``, and its producer never held before it
    has ``delivered`` its first delta or handed it on (``Turns.handed_first_delta``): a start that ran out of
    ``START_LIMIT`` before it, behind a queue of requests or a slow engine, must not then wait behind the
    others' starts."""

    __slots__ = ("active", "delivered", "traffic", "_in_lane", "_let_in", "_loop", "_on_end", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.traffic = Traffic.of(loop)
        self.traffic.starting += 1
        _STARTING.inc()
        self.active = True
        self.delivered = False
        self._loop = loop
        self._in_lane = False
        self._let_in = 0.0  # (monotonic) when the lane let it in; 0: not yet
        self._on_end: Callable[[], None] | None = None
        # START_LIMIT from arrival until the request asks for the lane (a body that trickles in must not
        # count as starting for long), none while it waits there, then START_LIMIT from when it is let in.
        self._timer: asyncio.TimerHandle | None = loop.call_later(START_LIMIT, self.end)

    async def enter_lane(self, rank: int = _DEFAULT_RANK) -> None:
        """Wait for the start lane to let this request in (the module docstring), by ``rank`` (``tier_rank``)
        and arrival; at once if it was let in before (early, http/first_tokens.py: its start is the rest of
        what it does there)."""
        if self._let_in:
            return
        if self._timer is not None:
            self._timer.cancel()
        await self.traffic.lane.enter(rank)
        self._let_in = time.monotonic()
        self._in_lane = True
        self._timer = self._loop.call_later(LANE_LIMIT, self._lane_limit)

    def _lane_limit(self) -> None:
        self.leave_lane()
        if self.active:
            self._timer = self._loop.call_later(START_LIMIT - LANE_LIMIT, self.end)

    def leave_lane(self) -> None:
        """The start work is done, or is about to wait: the next requests may start (idempotent)."""
        if self._in_lane:
            self._in_lane = False
            self.traffic.lane.left(time.monotonic() - self._let_in)

    def when_ended(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` once, when the request stops counting as starting (None: no longer)."""
        self._on_end = callback

    def end(self) -> None:
        self.leave_lane()
        if self._timer is not None:
            # Dropped, not only cancelled: a timer set once the request's context holds this Start (the lane's)
            # keeps that context, and a Start holding its timer would be a reference cycle, freed only by the
            # garbage collector, with everything the request's context reaches.
            self._timer.cancel()
            self._timer = None
        if self.active:
            self.active = False
            _STARTING.dec()
            self.traffic._started()
            callback, self._on_end = self._on_end, None
            if callback is not None:
                callback()

    def finish(self) -> None:
        """The first delta is out, or there will be none to hurry: ``end()``, and holdable from now on."""
        self.delivered = True
        self.end()


# The request whose task (or a task it started) runs here: its producers are not held before its first delta.
_current: contextvars.ContextVar[Start | None] = contextvars.ContextVar("harmony_responses_start", default=None)


async def enter_lane(rank: int = _DEFAULT_RANK) -> None:
    """The current request (if counted as starting) waits for the start lane to let it in (``rank``:
    ``tier_rank``)."""
    start = _current.get()
    if start is not None and not start.delivered:
        await start.enter_lane(rank)


def leave_lane() -> None:
    """The current request's start work is done (its engine call is being sent) or is about to wait for
    something (the store, a thread, an MCP server): the next requests may start."""
    start = _current.get()
    if start is not None:
        start.leave_lane()


def current_start() -> Start | None:
    """The request counted as starting in this context, if any."""
    return _current.get()


def end_start() -> None:
    """The current request does not stream (a JSON answer): it stops counting as starting."""
    start = _current.get()
    if start is not None:
        start.finish()


@contextlib.contextmanager
def starting() -> Iterator[Start]:
    """Count the request running in this context as starting, until its ``Start.finish()`` or the end.

    The request awaits ``enter_lane()`` before its start work."""
    start = Start(asyncio.get_running_loop())
    token = _current.set(start)
    try:
        yield start
    finally:
        start.finish()  # what runs on (a background response) is an ordinary producer
        _current.reset(token)


_HOLD, _YIELD = object(), object()


class Turns:
    """Call ``arrived()`` when a batch comes in and ``await done()`` when it has been handed on."""

    def __init__(self) -> None:
        self._start = start = _current.get()
        # The start's traffic where there is a start: asyncio.get_running_loop() is a getpid() on Python 3.11.
        self._traffic = start.traffic if start is not None else Traffic.of(asyncio.get_running_loop())
        self._clock = time.monotonic
        self._since = self._ended = self._clock()
        self._fresh = True  # the batch being handled came after a wait
        self._handed = False  # the request's first delta has been handed on (written or about to be)
        self._reading = reading_here()  # the engine connection its batches come from, paused while held
        self._owed: object = None  # what due() found the producer owes take_turn(): _HOLD, _YIELD or None

    def arrived(self) -> None:
        now = self._clock()
        self._fresh = now - self._ended > WAITED
        if self._fresh:
            self._since = now

    @property
    def fresh(self) -> bool:
        """The batch being handled came after a wait for the engine (none right behind it, most likely)."""
        return self._fresh

    def waited(self) -> None:
        """The producer has just waited for something else (its reader, the store): the loop had its turns."""
        self._since = self._ended = self._clock()

    def handed_first_delta(self) -> None:
        """The batch just handed on holds the first delta: the producer may be held from now on, as after
        it was written (its writer is not held, and sends it at its next turn). Waiting for the write
        let a flat-out stream translate all of its tokens first, a millisecond of the loop per big read."""
        self._handed = True

    def unheld(self) -> bool:
        """Whether a batch that came after a wait for the engine would go on now, not held (``due``'s rule for
        it): a read taken where it is read (engine/_reading.py) must not run ahead of a hold."""
        traffic = self._traffic
        return not (traffic.lane.queued and traffic.holding())

    async def done(self) -> None:
        if self.due():
            await self.take_turn()

    def due(self) -> bool:
        """The batch has been handed on: whether the producer owes a turn, to ``await take_turn()`` at once
        (``done`` in two halves, so that a producer pays for a coroutine only when it has a turn to give: most
        batches have none)."""
        now = self._ended = self._clock()
        start = self._start
        if (
            (start is None or start.delivered or self._handed)
            and (not self._fresh or self._traffic.lane.queued)
            and self._traffic.holding()
        ):
            self._owed = _HOLD
        elif start is not None and start.active and self._handed and not self._fresh:
            # Starting, the first delta handed on, and the next batch may be waiting already: let the writer
            # send it first. Before it, no yield: the batches before the first delta (response.created,
            # the first item's opening) go out in the same write as it, a loop turn sooner. After a fresh
            # batch the producer waits for its engine next, which gives the writer its turn anyway.
            self._owed = _YIELD
        elif now - self._since >= YIELD_INTERVAL:
            self._owed = _YIELD
        else:
            return False
        return True

    async def take_turn(self) -> None:
        """The turn ``due`` found owed: held while another request starts, or one loop turn."""
        owed, self._owed = self._owed, None
        if owed is _HOLD:
            _HELD.inc()
            self._reading.pause()
            try:
                await self._traffic.hold()  # another request is starting: it goes first
            finally:
                self._reading.resume()
                _HELD.dec()
            self.waited()
        elif owed is _YIELD:
            await asyncio.sleep(0)
            self.waited()
