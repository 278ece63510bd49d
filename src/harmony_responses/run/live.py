"""A stored response being produced in this process: its events, their durability, and who sends them.

``LiveResponse`` holds a stored response's events in memory while it runs and knows how many of them
are committed to its log (``durable``). Everyone who sends them — the client that created it, a client
streaming a background response, a client resuming with ``GET …?stream=true`` — sends only durable events,
so that what any client saw is in the log, and a stream resumed from the log (in this process or another,
before or after a crash) is identical to what a connected client saw. The writes are batched across all
streams by ``store.Writer``, which pulls each response's new events once per round (``take``); a stream
waits for its own events only, while the engine keeps generating, up to ``MAX_LEAD`` events ahead.

``produce()`` is the pump: it runs a ``ResponseRun`` in a task of its own, detached from any HTTP request,
and publishes each batch of events. A stop (``LiveResponse.stop``) cancels that task and ends the
response in-band: ``cancel`` (background cancel, or a foreground client gone) ends it ``cancelled``
(``Translator.cancel``), ``shutdown`` ends it ``failed`` with a reason.

``StoredRun`` wraps a foreground ``ResponseRun`` so that the HTTP layer's ``RunResponse`` serves a stored response
unchanged: same ``start``/``batches``/``aclose``/``final``, but the batches are the durable events.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import orjson

from ..metrics import QUEUE_DEPTH
from ..sse import frame
from ..store import AppendEvents, AppendItems, InsertResponse, Op, UpdateResponse, Writer
from ..tokentrace import Recorder
from .loop import SHUTDOWN_MESSAGE, TERMINAL_EVENTS, ResponseRun
from .recovery import closing_events
from .turns import Turns

__all__ = ["TERMINAL_EVENTS", "LiveResponse", "StoredRun", "produce", "sse_frames"]

logger = logging.getLogger("harmony_responses.run")

Event = dict[str, Any]
LIFECYCLE_EVENTS = frozenset({"response.created", "response.queued", "response.in_progress", *TERMINAL_EVENTS})
# How many events a producer may publish beyond what is durable before it waits for the writer. Events
# are sent only once durable, so a producer running far ahead gains nothing, and with many streams
# producing flat out it would keep the event loop from the writer's round (and from sending) until it
# has produced everything: the rounds would become produce-all, commit, send-all instead of overlapping.
# Too small a lead idles the loop while a round commits: at 64 streams 1,024 delivered ~10 % more than 256
# (bench/store_bench.py's setup, the two servers measured alternately), and 4,096 no more than 1,024.
MAX_LEAD = 1024
# Background responses accepted whose engine has not yet taken them (metrics.QUEUE_DEPTH).
_BACKGROUND_QUEUE = QUEUE_DEPTH.labels("background")
STORE_FAILED_MESSAGE = "The response could not be stored ({error}), so it was stopped."


class _Changes:
    """Who waits for a response's next change: ``wait()`` returns at the ``notify()`` after it began.

    What an ``asyncio.Event`` renewed at every change did, without asking for the running loop at every wait: on
    Python 3.11 that is a ``getpid()`` system call, and a stored stream waits once per commit round, a token at a
    time on a paced engine (6,270 asks for 6,400 tokens of 64 paced streams).
    """

    __slots__ = ("_loop", "_waiters")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None  # the first waiter's: a response lives in one loop
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():  # done: its task was cancelled while it waited
                waiter.set_result(None)

    async def wait(self) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        await waiter


class LiveResponse:
    """One stored response's events while it is produced (see the module docstring).

    Args:
        response_id, owner, created_at: the response's identity.
        writer: the store's group-commit writer.
        persist: write the response row and its log (False for ``store: false`` with a conversation,
            where only the conversation's new items are written).
        background: a background response (cancellable; runs detached from its request).
        conversation_id, conversation_items: the conversation the turn is appended to, and the turn's
            input items; appended with the output when the response ends ``completed`` or ``incomplete``.
        request_id: the ``x-request-id`` of the request that created it (stored with the row, for support).
    """

    def __init__(
        self,
        *,
        response_id: str,
        owner: str,
        created_at: int,
        writer: Writer,
        persist: bool = True,
        background: bool = False,
        conversation_id: str | None = None,
        conversation_items: Sequence[tuple[str, bytes]] = (),
        request_id: str | None = None,
    ) -> None:
        self.id = response_id
        self.owner = owner
        self.created_at = created_at
        self.background = background
        self.persist = persist
        self.request_id = request_id  # the x-request-id of the request that created it
        self._writer = writer
        self._conversation_id = conversation_id
        self._conversation_items = list(conversation_items)
        # The log as types and encoded JSON, not event dicts: thousands of dicts per stream held until the
        # response ends would be scanned by every garbage collection (bytes and str are not).
        self.types: list[str] = []
        self.encoded: list[bytes] = []
        self.durable = 0
        self.response: dict[str, Any] | None = None  # the Response as it stands: lifecycle + finished items
        self.final: dict[str, Any] | None = None  # the terminal Response, once durable
        self.closed = False  # nothing more will be published or become durable
        self.task: asyncio.Task[None] | None = None
        self.stop_reason: str | None = None
        self.write_error: Exception | None = None  # its writes failed while the store worked: none are kept
        self._changed = _Changes()
        self._terminal_published = False
        self._taken = 0  # events the writer has pulled (take)
        self._response_changed = False  # self.response changed since the writer last pulled
        self._terminal_taken = False
        self.on_closed: Callable[[LiveResponse], None] | None = None
        # A traced response's recorder (tokentrace): told of every event published, in order, whatever path
        # published it (the run's batches, a background start, a stop), as these are what clients are sent.
        self.trace: Recorder | None = None
        self.span: Any = None  # --otel: the run's span, which the store writer's spans link to (tracing.py)

    # ------------------------------------------------------------------ publishing (the producer)

    def insert(self, op: InsertResponse) -> None:
        """Write the response row (before any of its events)."""
        if self.persist:
            self._writer.submit([op], owner=self)

    def publish(self, events: list[Event]) -> None:
        """Append events; they become visible to senders once committed (the writer pulls them: ``take``)."""
        if not events or self._terminal_published:
            return
        if self.trace is not None:
            self.trace.sent(events)  # before they are taken: a trace completed here commits in their round
        assert events[0]["sequence_number"] == len(self.types), "events must continue the log without gaps"
        types, encoded = self.types, self.encoded
        for event in events:
            kind = event["type"]
            types.append(kind)
            encoded.append(orjson.dumps(event))
            if kind in LIFECYCLE_EVENTS:
                # A copy with its own output list: the event itself may still be sent, unchanged.
                self.response = dict(event["response"], output=list(event["response"]["output"]))
                self._response_changed = True
            elif kind == "response.output_item.done" and self.response is not None:
                self.response["output"].append(event["item"])
                self._response_changed = True
        self._terminal_published = events[-1]["type"] in TERMINAL_EVENTS
        self._writer.mark(self)

    def take(self) -> tuple[list[Op], Callable[[], None]]:
        """What was published since the writer's last round: one row of events, the response as it stands."""
        start, count, terminal = self._taken, len(self.types), self._terminal_published
        self._taken = count
        ops: list[Op] = []
        if self.persist and count > start:
            ops.append(AppendEvents(response_id=self.id, first_seq=start, data=self.encoded[start:count]))
        if self.persist and self._response_changed and self.response is not None:
            ops.append(
                UpdateResponse(
                    id=self.id,
                    status=self.response["status"],
                    response=orjson.dumps(self.response),
                    updated_at=time.time(),
                    finished=terminal,
                )
            )
        self._response_changed = False
        if terminal and not self._terminal_taken:
            self._terminal_taken = True
            ops.extend(self._terminal_ops())
        return ops, functools.partial(self._committed, count, terminal)

    def write_failed(self, error: Exception) -> None:
        """The writer could not store this response's writes (a value the store cannot hold, or a store down
        past the retry budget); its later writes are dropped. The client must not then be told it succeeded:
        a running response is stopped and fails; one whose end is published but not yet sent gets that unsent
        tail replaced by a failure. (A stored row left behind active is ended by maintenance: stored.py.)"""
        self.write_error = error
        task = self.task
        if not self._terminal_published:
            if task is None and self.stop_reason is None:
                self.stop_reason = "store"  # not producing yet: ended as it begins (produce)
            elif task is not None and not task.done() and self.stop_reason is None:
                self.stop_reason = "store"
                task.cancel()
            return
        if self.durable >= len(self.types):
            return  # everything was sent already: the outcome the client saw stands
        sent = [orjson.loads(data) for data in self.encoded[: self.durable]]
        end, _ = closing_events(sent, self.response or {}, status="failed", message=self.store_failed_message())
        del self.types[self.durable :], self.encoded[self.durable :]
        self._taken = min(self._taken, self.durable)
        self._terminal_published = self._terminal_taken = False
        self.response = None
        self.publish(end)

    def store_failed_message(self) -> str:
        return STORE_FAILED_MESSAGE.format(error=type(self.write_error).__name__)

    def _terminal_ops(self) -> list[Op]:
        assert self.response is not None
        output = [(item.get("id") or "", orjson.dumps(item)) for item in self.response["output"]]
        ops: list[Op] = []
        if self.persist and output:
            ops.append(
                AppendItems(parent=self.id, kind="output", owner=self.owner, created_at=self.created_at, items=output)
            )
        if self._conversation_id is not None and self.response["status"] in ("completed", "incomplete"):
            ops.append(
                AppendItems(
                    parent=self._conversation_id,
                    kind="conversation",
                    owner=self.owner,
                    created_at=int(time.time()),
                    items=self._conversation_items + output,
                )
            )
        return ops

    def _committed(self, count: int, terminal: bool) -> None:
        # At most what is published: an unsent tail may have been replaced since the writer took it.
        self.durable = min(max(self.durable, count), len(self.types))
        if terminal:
            self.final = self.response
        self._notify()

    def close(self) -> None:
        """The producer is done: wake every sender for the last time."""
        self.closed = True
        self._notify()
        if self.on_closed is not None:
            self.on_closed(self)

    def _notify(self) -> None:
        self._changed.notify()

    # ------------------------------------------------------------------ following (the senders)

    async def wait_beyond(self, position: int) -> None:
        """Wait until more than ``position`` events are durable, or the response is closed."""
        while self.durable <= position and not self.closed:
            await self._changed.wait()

    async def follow(self, after: int = -1) -> AsyncIterator[tuple[list[str], list[bytes]]]:
        """Durable events (types, JSON) with ``sequence_number > after``, in slices as they commit, to the end."""
        position = after + 1
        while True:
            await self.wait_beyond(position)
            end = self.durable
            if end > position:
                yield self.types[position:end], self.encoded[position:end]
                position = end
                if self.types[end - 1] in TERMINAL_EVENTS:
                    return  # nothing follows the terminal event: the body ends here, whatever close() does
            elif self.closed:
                return

    # ------------------------------------------------------------------ stopping

    async def stop(self, reason: str) -> None:
        """End the response now (``cancel`` or ``shutdown``) and wait until its end is durable."""
        task = self.task
        if task is not None and not task.done() and self.stop_reason is None:
            self.stop_reason = reason
            task.cancel()
        if task is None:
            if not self.closed:
                self.close()  # never started (the engine refused it): nothing was stored
            return
        # Shielded: the caller being cancelled (a client gone) must not leave the end unwritten.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)
        while not self.closed:
            await self._changed.wait()


async def produce(live: LiveResponse, run: ResponseRun, *, queued: bool = False) -> None:
    """Run ``run`` to its end, publishing every batch; see the module docstring for stops.

    ``queued``: a background response whose ``created``/``queued`` events are published already; this
    begins it (``response.in_progress``) and starts the engine, failing the response in-band if the engine
    refuses the request.
    """
    translator = run.translator
    waiting = queued  # counted in the background queue until the engine has taken it
    if waiting:
        _BACKGROUND_QUEUE.inc()
    try:
        if live.stop_reason is not None:
            # Stopped before it began (its row could not be stored): it ends failed rather than run to a
            # success its clients would be told of and nobody could retrieve.
            _end_stopped(live, run)
            return
        if queued:
            translator.begin()
            live.publish(translator.events())
            try:
                await run.start(at_admission=True)
            except Exception as exc:
                # The POST has answered already: an engine refusing the request fails the response in-band.
                translator.receive_end("error", f"the engine could not take the request: {exc}")
                live.publish(translator.events())
                return
            finally:
                waiting = False
                _BACKGROUND_QUEUE.dec()
        live.span = run.span
        turns = Turns()  # an engine that never waits must not keep the loop to itself (run/turns.py)
        handed = False
        async with contextlib.aclosing(run.batches()) as batches:
            async for batch in batches:
                turns.arrived()
                live.publish(batch)
                if not handed and any(event["type"].endswith(".delta") for event in batch):
                    handed = True
                    turns.handed_first_delta()
                if len(live.types) - live.durable > MAX_LEAD:
                    # Too far ahead of the log: let the writer catch up (see MAX_LEAD).
                    await live.wait_beyond(len(live.types) - MAX_LEAD // 2)
                    turns.waited()
                elif turns.due():
                    await turns.take_turn()
    except asyncio.CancelledError:
        if live.stop_reason is None:
            live.stop_reason = "shutdown"
        _end_stopped(live, run)
    except Exception as exc:  # a bug: still end the response, so that its log has a terminal event
        logger.exception("response %s failed in the server", live.id)
        if not translator.closed:
            with contextlib.suppress(Exception):
                translator.receive_end("error", f"internal server error: {type(exc).__name__}")
                live.publish(translator.events())
    finally:
        if waiting:
            _BACKGROUND_QUEUE.dec()  # stopped before its engine call (cancelled, shutdown)
        await _finish(live, run)


async def _finish(live: LiveResponse, run: ResponseRun) -> None:
    """Close the run, wait for the end to be durable, then close ``live``, whatever cancellation arrives meanwhile.

    A cancel, DELETE or client disconnect landing while a response finishes (after its terminal event,
    before ``close``) used to cancel this path half-way: the response never closed, so ``stop()`` (the
    cancel or DELETE request), every stream following it and the server's shutdown waited forever.
    """
    finishing = asyncio.ensure_future(_close(live, run))
    while not finishing.done():
        # The canceller wants the producer over, and this is how it ends: finish, then return.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(finishing)
    finishing.result()


async def _close(live: LiveResponse, run: ResponseRun) -> None:
    try:
        await run.aclose()
    finally:
        try:
            # Wait for the end to be durable before anyone is told the response is over.
            await live._writer.flush()
        finally:
            live.close()


def _end_stopped(live: LiveResponse, run: ResponseRun) -> None:
    translator = run.translator
    if translator.closed:
        live.publish(translator.events())  # the end was produced already, maybe not yet published
        return
    # Tokens the translator holds unread (those behind a starting stream's first delta, ``to_first_delta``)
    # are what the model wrote: translated and logged before the end, as the items' text already holds them
    # once read. Dropping their deltas left a log whose ``.done`` text was never streamed.
    events = translator.events()
    if not translator.closed:  # (the held tokens may have held the end too)
        run.count_unreported_prompt()
        if live.stop_reason == "cancel":
            translator.cancel()
            logger.info("%s cancelled", live.id)
        elif live.stop_reason == "store":
            translator.fail(live.store_failed_message())
        else:
            translator.fail(SHUTDOWN_MESSAGE)
        events += translator.events()
    # Events the producer made but never published (cut off at the stop) leave a gap: renumber what follows.
    for offset, event in enumerate(events):
        event["sequence_number"] = len(live.types) + offset
    live.publish(events)


def sse_frames(types: Sequence[str], encoded: Sequence[bytes]) -> bytes:
    """SSE for events whose JSON is already encoded (``sse.encode_event`` framing)."""
    return b"".join([frame(kind, data) for kind, data in zip(types, encoded, strict=True)])


class StoredRun:
    """A foreground ``ResponseRun`` whose events are logged, served by the HTTP layer's ``RunResponse`` as is.

    ``start`` calls the engine (an engine refusing the request is still an HTTP error, and nothing is
    stored); only then is the response row written. ``batches`` yields durable events; ``aclose``
    (client gone, or the end) stops the producer, which ends the response ``cancelled`` if it is not over.
    """

    def __init__(self, run: ResponseRun, live: LiveResponse, insert: InsertResponse) -> None:
        self._run = run
        self._live = live
        self._insert = insert
        self.final: dict[str, Any] | None = None

    @property
    def request_id(self) -> str | None:
        return self._run.request_id

    @property
    def write_error(self) -> Exception | None:
        """Why its writes failed (None: they did not): then it is not kept, whatever its client is told."""
        return self._live.write_error

    @property
    def translator(self) -> Any:
        return self._run.translator

    async def start(self, *, at_admission: bool = False) -> None:
        await self._run.start(at_admission=at_admission)
        self._live.span = self._run.span
        self._live.insert(self._insert)

    async def batches(self) -> AsyncIterator[bytes]:
        """The durable events, framed as SSE (from the JSON that was logged: no second encoding)."""
        live = self._live
        live.task = asyncio.get_running_loop().create_task(produce(live, self._run), name=f"produce-{live.id}")
        async for types, encoded in live.follow():
            yield sse_frames(types, encoded)
        self.final = live.final

    async def aclose(self) -> None:
        if self._live.task is None:
            await self._run.aclose()
        await self._live.stop("cancel")
