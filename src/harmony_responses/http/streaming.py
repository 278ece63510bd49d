"""The ASGI responses that stream: a ``ResponseRun`` as SSE or one JSON body, and a stored response's events.

Pure ASGI, like Starlette's ``StreamingResponse``, with three differences that the protocol needs:

- the engine's first item is awaited *before* ``http.response.start``, so that an engine refusing the
  request is still an HTTP error (``errors.to_api_error``), never a half-started stream;
- the client going away, for the whole run, streamed or not, cancels the generation: the engine stream is
  closed at once (pitfalls.md #49). Our connections say so themselves (``connection.when_gone``); under another
  server ``http.disconnect`` is watched in a sibling task;
- the body ends right after the terminal event (Codex acts on completion only when the stream ends),
  in the same write as it (a socket write is most of what a short stream costs), and each write holds
  whole events only (a chunk's events share one write);
- a response that fails without streaming is an HTTP 500 with the API's error body, as the API answers a
  generation that fails, not a 200 whose ``status`` is ``failed``: many clients read a 200 as success
  (llama-index and haystack showed empty text, Vercel's ``generateText`` "Invalid JSON response", the
  openai SDK returns it without raising). The failed response is still stored; ``x-response-id`` names it.
  One the store could not keep is a 503 ``store_unavailable`` instead.

SSE framing is ``sse.encode_event`` (``encode_events`` for a batch): ``event:`` equal to the type, one
``data:`` line, no ``id:``.

``FollowStream`` sends a stored response's events (background mode, ``GET …?stream=true``): the client
going away ends only its stream, never the response.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

from ..errors import APIError, store_unavailable
from ..metrics import STREAMS_IN_FLIGHT
from ..run import TERMINAL_EVENTS, ResponseRun, StoredRun
from ..run.turns import Start, Turns, current_start, end_start
from ..sse import encode_events, ends_response
from .connection import when_gone
from .errors import error_response, json_response
from .first_tokens import DELTA_FRAME
from .observe import BODY_SEND, BODY_WRITE

__all__ = ["SSE_HEADERS", "FollowStream", "RunResponse"]

logger = logging.getLogger("harmony_responses.http")

# What is buffered between the run and the socket, whichever bound comes first: enough to coalesce writes,
# little enough that a client that stops reading holds back its engine soon. Batches bound the one-token
# batches of a paced engine (and keep a flowing stream's writes frequent); bytes bound the batches of one
# engine read each, which may carry hundreds of tokens (engine/_http.py).
BUFFERED_BATCHES = 64
BUFFERED_BYTES = 16 * 1024
_SSE_STREAMS = STREAMS_IN_FLIGHT.labels("sse")

SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    # Proxies such as nginx buffer responses unless told not to; SSE must flow event by event.
    (b"x-accel-buffering", b"no"),
]


class _Handoff:
    """The producer's bodies on their way to the writer: up to ``bodies`` of them or ``size`` bytes waiting,
    taken all at once.

    Hand-written rather than anyio's memory object stream, which does the same job but whose ``receive``
    takes an extra event-loop turn (a checkpoint) before it waits: once per engine chunk per stream when
    tokens arrive one at a time, which is how a paced engine delivers them. One task puts, one takes.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, bodies: int, size: int) -> None:
        self._loop = loop  # not asked for at each wait: asyncio.get_running_loop() is a getpid() on Python 3.11
        self._bodies: deque[bytes] = deque()
        self._size = 0  # bytes in _bodies
        self._max_bodies = bodies
        self._max_size = size
        self._closed = False
        self._failed: BaseException | None = None  # raised to the taker (a direct write that failed)
        self._readable: asyncio.Future[None] | None = None  # the taker, waiting for a body
        self._writable: asyncio.Future[None] | None = None  # the putter, waiting for room

    def _full(self) -> bool:
        return len(self._bodies) >= self._max_bodies or self._size >= self._max_size

    def put_nowait(self, body: bytes) -> bool:
        """Queue ``body`` if there is room; False if the taker is a bound behind."""
        if self._full():
            return False
        self._bodies.append(body)
        self._size += len(body)
        _wake(self._readable)
        return True

    def put_now(self, body: bytes) -> None:
        """Queue ``body`` whatever the bounds (a few events held back, never a stream's worth)."""
        self._bodies.append(body)
        self._size += len(body)
        _wake(self._readable)

    async def put(self, body: bytes) -> None:
        while self._full():
            self._writable = self._loop.create_future()
            await self._writable
        self._bodies.append(body)
        self._size += len(body)
        _wake(self._readable)

    def close(self) -> None:
        """No more bodies: the taker gets what is left, then None."""
        self._closed = True
        _wake(self._readable)

    @property
    def drained(self) -> bool:
        """Closed, and every body taken: what the taker took last was the last."""
        return self._closed and not self._bodies

    @property
    def taker_waiting(self) -> bool:
        """The taker waits for a body and none is queued: a body sent past it now keeps the order."""
        return not self._bodies and self._readable is not None and not self._readable.done()

    def fail(self, exc: BaseException) -> None:
        """Close, and have the taker raise ``exc`` once it has taken what is queued."""
        self._failed = exc
        self.close()

    async def take(self) -> list[bytes] | None:
        """Every body waiting (at least one), or None once closed and drained."""
        while not self._bodies:
            if self._failed is not None:
                raise self._failed
            if self._closed:
                return None
            self._readable = self._loop.create_future()
            await self._readable
        bodies = list(self._bodies)
        self._bodies.clear()
        self._size = 0
        _wake(self._writable)
        return bodies


class _DirectOut:
    """A producer's events from a chunk taken where the engine read it (engine/_reading.py, run/loop.py):
    written past the writer, which waits with nothing queued, or queued for it when the socket cannot take
    them now (paused by the client's flow control, or the first delta not written yet)."""

    __slots__ = ("_handoff", "_turns", "_wrote")

    def __init__(self, handoff: _Handoff, turns: Turns, wrote: Callable[[bytes], bool]) -> None:
        self._handoff = handoff
        self._turns = turns
        self._wrote = wrote

    def ready(self) -> bool:
        # A backlog at the writer keeps the order through it; a producer that would be held leaves the chunk
        # to its stream loop, where the hold happens.
        return self._handoff.taker_waiting and self._turns.unheld()

    def emit(self, events: list[dict[str, Any]]) -> None:
        body = encode_events(events)
        if not self._wrote(body):
            self._handoff.put_now(body)


async def _shielded(close: Coroutine[Any, Any, None]) -> None:
    """Run ``close`` to its end even if this task is cancelled meanwhile (then still cancelled after).

    It runs here first: a cancellation reaches a task only where it waits, and most closes never wait (the
    engine stream has ended, no tool session is open), so they need no task of their own and no shield (with the
    disconnect watcher's task, ``connection.when_gone``, 4 % of a one-token stream's CPU in an A/B run). A close
    that waits goes on in a task from there.
    """
    try:
        awaited = close.send(None)
    except StopIteration:
        return
    closing = asyncio.ensure_future(_go_on(close, awaited))
    try:
        await asyncio.shield(closing)
    except asyncio.CancelledError:
        while not closing.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(closing)
        raise


async def _go_on(coroutine: Coroutine[Any, Any, None], awaited: Any) -> None:
    """Go on with ``coroutine``, started elsewhere and now waiting on ``awaited``."""
    await _Resumed(coroutine, awaited)


class _Resumed:
    """A started coroutine as an awaitable: its task waits on what it waits on (``yield from`` for a coroutine
    whose first step has run)."""

    __slots__ = ("awaited", "coroutine")

    def __init__(self, coroutine: Coroutine[Any, Any, None], awaited: Any) -> None:
        self.coroutine, self.awaited = coroutine, awaited

    def __await__(self) -> Generator[Any, Any, None]:
        coroutine, awaited = self.coroutine, self.awaited
        while True:
            try:
                sent = yield awaited
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # a cancellation of the task: the coroutine's to handle
                try:
                    awaited = coroutine.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    awaited = coroutine.send(sent)
                except StopIteration:
                    return


async def _cancelled(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait until it has ended (its cleanup run)."""
    task.cancel()
    await asyncio.wait((task,))


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():  # done: already woken, or its task was cancelled
        waiter.set_result(None)


class RunResponse:
    """Serve ``run`` as SSE (``stream`` true) or as the final Response object in JSON."""

    def __init__(self, run: ResponseRun | StoredRun, *, stream: bool) -> None:
        self.run = run
        self.stream = stream
        self.disconnected = False
        self._watcher_cancelled = False
        self._ended = False  # the body's end is sent: the server reports the request over as a disconnect
        # Observe's send, past the app's wrappers, for body writes once the first delta is out (BODY_SEND).
        self._body_send: Send | None = None
        # Its writes straight to the socket, where they can be (BODY_WRITE): for the same writes, no coroutine.
        self._body_write: Callable[[bytes], bool] | None = None
        self._start: Start | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # __call__'s task's

    # asyncio's own tasks and cancellation here rather than anyio's task group and cancel scopes: this
    # runs once per request, and anyio's bookkeeping (a backend lookup per scope, scope and task handle
    # objects, a cancel message built with repr) was a tenth of what starting a request cost.
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._loop = task.get_loop()
        # Our own connections say when the client is gone; any other server's, through receive().
        unwatch: Callable[[], object] | None = when_gone(receive, functools.partial(self._client_gone, task))
        if unwatch is None:
            unwatch = asyncio.create_task(self._watch_disconnect(receive, task)).cancel
        try:
            try:
                await self._respond(scope, receive, send)
            finally:
                # From here on the watch cannot cancel this task (a watcher task is cancelled at its own await
                # first).
                unwatch()
        except asyncio.CancelledError:
            if not self._watcher_cancelled or task.uncancel() > 0:
                raise  # cancelled from outside (a server shutting down), not (only) by the watcher
        finally:
            # The engine stream is closed whatever happened, in a task of its own so that a cancellation
            # arriving meanwhile cannot cut it short.
            await _shielded(self.run.aclose())

    async def _watch_disconnect(self, receive: Receive, task: asyncio.Task[None]) -> None:
        # The endpoint has read the whole body, so the next message can only be http.disconnect.
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._client_gone(task)
                return

    def _client_gone(self, task: asyncio.Task[None]) -> None:
        if self._ended:
            return  # not the client: the response is complete, its producer finishing up
        self.disconnected = True
        if self.run.final is None:
            logger.info("client disconnected: generation of %s cancelled", self.run.request_id)
        self._watcher_cancelled = True
        task.cancel()

    def _sender(self, send: Send) -> Send:
        """Where a body write goes now: ``send`` (the app's wrappers) until the first delta has gone out
        through it, then Observe's own, which the wrappers pass every later body write on to unchanged
        (observe.BODY_SEND)."""
        body_send, start = self._body_send, self._start
        if body_send is not None and (start is None or start.delivered):
            return body_send
        return send

    async def _respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._body_send = scope.get(BODY_SEND)
        self._body_write = scope.get(BODY_WRITE)
        self._start = current_start()
        try:
            # Streamed: the response starts once the engine has admitted the request, not at its first token.
            await self.run.start(at_admission=self.stream)
        except Exception as exc:
            # Nothing is on the wire yet: an ordinary JSON error (503 for an engine that refuses).
            await error_response(exc, method=scope.get("method", ""), path=scope.get("path", ""))(scope, receive, send)
            return
        if self.stream:
            await self._send_events(send)
        else:
            await self._send_json(scope, receive, send)

    async def _send_events(self, send: Send) -> None:
        with _SSE_STREAMS.track_inprogress():
            await self._stream_events(send)

    async def _stream_events(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        # The run's batches are produced in a task of their own and handed over through a bounded buffer, and
        # the writer sends everything waiting in one write. An engine that waits between chunks (every real
        # one) gets each chunk written as soon as it arrives; when chunks come faster than the socket write
        # path (a fast engine, or many streams sharing the CPU), they share writes instead of paying uvicorn's
        # per-write cost each (responses-protocol.md §1: events may share a write, never be split). The bound
        # keeps a slow reader's backlog small and passes the backpressure on to the engine. A batch that came
        # after a wait for the engine, while the writer has nothing to send, the producer writes itself.
        assert self._loop is not None
        handoff = _Handoff(self._loop, BUFFERED_BATCHES, BUFFERED_BYTES)
        producer = self._loop.create_task(self._produce(handoff, send))
        try:
            await self._write_batches(handoff, send)
        except OSError:  # the client went away mid-write (uvicorn's ClientDisconnected)
            self.disconnected = True
            await _cancelled(producer)
            return
        except BaseException:  # cancelled (the client went away), or a bug: the producer stops too
            await _cancelled(producer)
            raise
        await producer  # the handoff is closed and drained: the producer has ended or is about to
        if not self._ended:
            self._ended = True
            await self._sender(send)({"type": "http.response.body", "body": b"", "more_body": False})

    async def _write_batches(self, handoff: _Handoff, send: Send) -> None:
        """Send what the producer hands over, everything waiting at once, until it is done; the last of it
        (the terminal event) with the end of the body."""
        while (bodies := await handoff.take()) is not None:
            last = handoff.drained
            body = b"".join(bodies)
            if not last and self._wrote(body):
                continue
            if last:
                self._ended = True
            await self._sender(send)({"type": "http.response.body", "body": body, "more_body": not last})

    def _wrote(self, body: bytes) -> bool:
        """Whether ``body`` (more to come) went straight to the socket, as ``_sender``'s writes may."""
        write, start = self._body_write, self._start
        return write is not None and (start is None or start.delivered) and write(body)

    async def _produce(self, handoff: _Handoff, send: Send) -> None:
        """Hand the run's batches on to the writer (or write them itself, below).

        While the request is starting (run/turns.py), what comes before its first delta (``response.created``,
        the first item's opening, the events of a header read token by token) is held here and handed on
        with that delta: up to three writes become one, each a socket send and a loop turn of the writer, on
        the path a burst's first tokens wait for. Nothing is held longer than the start lasts
        (``START_LIMIT`` at most): what is held goes to the writer when it ends, while a built-in tool runs
        before any delta, say.
        """
        turns = Turns()  # an engine that never waits must not keep the loop from the writer (run/turns.py)
        start = current_start()
        held: list[bytes] = []
        direct = self._direct_out(handoff, turns)

        def release() -> None:  # the start ended with no delta yet
            if held:
                handoff.put_now(b"".join(held))
                held.clear()

        try:
            async with contextlib.aclosing(self.run.batches()) as batches:
                handed = False
                first = True
                async for batch in batches:
                    turns.arrived()
                    # A stored run (live.StoredRun) hands over its events already framed, as they were logged.
                    # Whether the body ends the response (sent with the end of the body, by whichever writes it)
                    # is read off its last event, or its last frame.
                    if isinstance(batch, bytes):
                        body = batch
                        last = ends_response(body)
                    else:
                        body = encode_events(batch)
                        last = bool(batch) and batch[-1]["type"] in TERMINAL_EVENTS
                    if not handed and start is not None:
                        if not last and start.active and DELTA_FRAME not in body:
                            if not held:
                                start.when_ended(release)
                            held.append(body)
                            await turns.done()
                            continue
                        if held:
                            start.when_ended(None)
                            held.append(body)
                            body = b"".join(held)
                            held.clear()
                    opening = not handed and DELTA_FRAME in body
                    if (opening or turns.fresh and not first) and handoff.taker_waiting:
                        # It came after a wait for the engine (a paced engine's every token) and the writer
                        # has nothing to send: written here, a task switch and a loop turn sooner than through
                        # the writer, which is most of what a one-token batch costs. Batches right behind
                        # one another go through the writer, which sends them together. So does the first
                        # delta, with all that came before it: nothing is left to gather for its write.
                        # Straight to the socket where it can go (no coroutine: this is once per engine read).
                        if (last or not self._wrote(body)) and not await self._write_directly(
                            handoff, send, body, last
                        ):
                            return
                    elif not handoff.put_nowait(body):  # no event-loop turn while there is room
                        await handoff.put(body)  # the reader is behind: wait for it
                        turns.waited()
                    first = False
                    if last:
                        # Nothing is left to hand on, so no hold either: what runs on is the run finishing up.
                        handoff.close()
                        continue
                    if opening:  # the first delta handed on: holdable (run/turns.py)
                        handed = True
                        turns.handed_first_delta()
                        if direct is not None:
                            self.run.direct_out = direct  # type: ignore[union-attr]  # (a ResponseRun's)
                    if turns.due():
                        await turns.take_turn()
        except Exception:
            # A bug after the stream started: the status is sent, so all we can do is end the body.
            logger.exception("response stream failed after it started")
        finally:
            if direct is not None:
                self.run.direct_out = None  # type: ignore[union-attr]
            if start is not None and held:
                start.when_ended(None)
                release()
            handoff.close()

    def _direct_out(self, handoff: _Handoff, turns: Turns) -> _DirectOut | None:
        """Where the events of a chunk taken where the engine read it go (``ResponseRun.direct_out``), given
        to the run once its first delta is handed on; None where the batches are not the run's own events (a
        stored response's come from its log) or the writes go through another server than ours."""
        if not isinstance(self.run, ResponseRun) or self._body_write is None:
            return None
        return _DirectOut(handoff, turns, self._wrote)

    async def _write_directly(self, handoff: _Handoff, send: Send, body: bytes, last: bool) -> bool:
        """Send ``body`` from the producer, with the end of the body if it is the ``last``; False if the client
        is gone (the writer is told, and ends the response as for its own failed write)."""
        if last:
            self._ended = True
        try:
            await self._sender(send)({"type": "http.response.body", "body": body, "more_body": not last})
        except OSError as exc:
            handoff.fail(exc)
            return False
        return True

    async def _send_json(self, scope: Scope, receive: Receive, send: Send) -> None:
        end_start()  # nothing is sent before the end: no first token to hurry
        try:
            async with contextlib.aclosing(self.run.batches()) as batches:
                turns = Turns()
                async for _ in batches:
                    turns.arrived()
                    await turns.done()
        except Exception as exc:
            response = error_response(exc)
        else:
            final = self.run.final
            if final is None:
                response = error_response(RuntimeError("no final"))
            elif isinstance(self.run, StoredRun) and self.run.write_error is not None:
                # Not kept, so not a 500 naming a response that is a 404: nothing was stored, a retry is safe.
                response = error_response(store_unavailable(self.run.write_error))
            elif final.get("status") == "failed":
                error = final.get("error") or {}
                failed = APIError(
                    error.get("message") or "The response failed.",
                    status=500,
                    type="server_error",
                    code=error.get("code") or "server_error",
                    # The response ran and is stored, failed: the SDKs' automatic retry of a 500 would run it
                    # again (twice, in openai-python) without the caller asking.
                    headers={"x-response-id": final["id"], "x-should-retry": "false"},
                )
                response = json_response(failed.body(), failed.status, failed.headers)
            else:
                response = json_response(final)
        await response(scope, receive, send)


class FollowStream:
    """SSE of a stored response's events: from a live response here, or polled from the store.

    The client going away only ends this stream; the response itself goes on (background mode is not
    tied to any connection). The body ends right after the terminal event.
    """

    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self._source = source

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with _SSE_STREAMS.track_inprogress():
            await self._follow(receive, send)

    async def _follow(self, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch_disconnect, receive, group.cancel_scope)
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            try:
                async with contextlib.aclosing(self._source) as source:
                    async for chunk in source:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:  # the client went away mid-write
                pass
            group.cancel_scope.cancel()

    @staticmethod
    async def _watch_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return
