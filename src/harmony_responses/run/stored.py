"""Stored responses: the store, this process's live responses, background work, leases and recovery.

``StoredResponses`` is built by ``server.Server`` and started in the app's lifespan. It owns:

- the store (``--store``) and its group-commit ``Writer``;
- this process's row in ``processes`` with a heartbeat every ``HEARTBEAT_INTERVAL`` seconds — its lease;
- ``live``: the stored responses this process is producing (``live.LiveResponse``), so that retrieving,
  streaming and cancelling one of them here needs no database round trip;
- a maintenance task that heartbeats, polls the cancel flags of its stored responses (a cancel or a delete
  may arrive through another process), ends the responses of processes that died (``recovery.py``), and
  purges data older than ``--retention``.

Requests use it twice: as the request's ``History`` (request/resolve.py: the stored items that
``previous_response_id``, ``conversation`` and ``item_reference`` name), and ``respond`` (once the run is
built) decides how the response runs: not stored (the ``ResponseRun`` as it is), stored in the foreground
(``StoredRun``), or in the background (a detached task; the POST answers at once with ``Background``).

Whether a process is dead. On this same host (and pid namespace) the process itself is checked and
nothing else: dead at once when its pid is gone or names a later process (``pid_start``), alive while it
runs, whatever its heartbeat says — so a server restarted after a crash ends the crashed one's responses
immediately, and no clock step or busy moment ends a live sibling's (``--workers``). Elsewhere its lease
decides: dead when it has not heartbeaten for ``LEASE`` seconds, measured by the database's clock
(PostgreSQL), or, where the store has no clock every process shares (SQLite), by how long this process has
seen its heartbeat unchanged on its own monotonic clock; a wall clock that steps, here or there, moves no
lease. A response ended here is claimed first, and its former producer's later writes are refused
(``Store.write``'s holder), so the log closed here keeps its terminal event last.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from ..errors import APIError, not_found, store_unavailable
from ..ids import id_problem, random_id
from ..logs import current_request_id
from ..request import ResponseRequest
from ..store import (
    ACTIVE_STATUSES,
    ActiveResponse,
    AppendEvents,
    AppendItems,
    InsertResponse,
    ItemKind,
    Op,
    ProcessInfo,
    PutTrace,
    Store,
    StoredResponse,
    UpdateResponse,
    Writer,
    store_from_spec,
)
from .live import TERMINAL_EVENTS, LiveResponse, StoredRun, produce, sse_frames
from .loop import ResponseRun
from .recovery import CRASH_MESSAGE, closing_events
from .turns import leave_lane

__all__ = ["Background", "StoredResponses", "known_id", "page"]

logger = logging.getLogger("harmony_responses.run")

HEARTBEAT_INTERVAL = 2.0
# A process whose heartbeat is older than this is dead: several missed heartbeats, so that a process
# busy for a moment (or a database briefly slow) does not have its responses ended under it.
LEASE = 15.0
CANCEL_POLL_INTERVAL = 0.1
FOLLOW_POLL_INTERVAL = 0.02
CANCEL_WAIT = 10.0
FORGET_PROCESSES_AFTER = 7 * 24 * 3600.0
READ_BATCH = 1000
OUTAGE_MESSAGE = "The store was unavailable while the response ran; its output was not kept in full."


def _why_no_trace(status: str, response: bytes) -> str:
    """Why a stored response has no trace: its trace is written in its terminal event's round."""
    if status in ("queued", "in_progress"):
        return "it has not ended yet (its trace is kept when it ends)."
    error = (orjson.loads(response).get("error") or {}).get("message")
    if error in (CRASH_MESSAGE, OUTAGE_MESSAGE):
        # Another process ended it: the trace was being recorded in the memory of the one that stopped.
        return "it was ended by another process after the one generating it stopped, and its trace was lost with it."
    return "it was not traced (serve --trace, or the x-harmony-trace header with --trace-header)."


def host_key() -> str:
    """This machine and pid namespace: pids are comparable only between processes with the same key."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        boot, namespace = "", 0
    return f"{socket.gethostname()}/{boot}/{namespace}"


def pid_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, the 22nd field of ``/proc/PID/stat``): with the
    boot (``host_key``) it names one process, where a pid may be reused. None: no such process, or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, alive
    return True


def frame(kind: str, data: bytes) -> bytes:
    """An SSE event from its type and JSON (``sse.encode_event`` framing, without re-encoding)."""
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def event_type(data: bytes) -> str:
    # Every event this server writes starts with its type (``{"type":"…",``): no need to parse it all.
    if data.startswith(b'{"type":"'):
        end = data.index(b'"', 9)
        return data[9:end].decode()
    return str(orjson.loads(data)["type"])


@dataclass(frozen=True, slots=True)
class Background:
    """A background response, queued: what the POST answers (the Response, or a stream of its events)."""

    response: dict[str, Any]
    live: LiveResponse

    def events(self) -> AsyncIterator[bytes]:
        """Its events as SSE, from the first, until the terminal one."""
        return framed(self.live.follow())


async def framed(follow: AsyncIterator[tuple[list[str], list[bytes]]]) -> AsyncIterator[bytes]:
    """A ``LiveResponse.follow()`` as SSE bytes (from the JSON that was logged: no second encoding)."""
    async for types, encoded in follow:
        yield sse_frames(types, encoded)


class StoredResponses:
    """See the module docstring. ``start()`` in the lifespan, ``aclose()`` at shutdown.

    Args:
        store: a store spec (``harmony_responses.store``) and the SQLite store's folder, or a ``Store``.
        retention: seconds after which finished responses and idle conversations are deleted (None: kept).
    """

    def __init__(self, store: str | Store, *, data_dir: str | None = None, retention: float | None = None) -> None:
        self._spec = store
        self._data_dir = data_dir
        self._store: Store | None = None
        self.retention = retention
        self.live: dict[str, LiveResponse] = {}
        # More upkeep run at every heartbeat (run/vector_stores.py: resuming ingestions, files' retention).
        self.periodic: list[Callable[[], Awaitable[None]]] = []
        self._maintenance: asyncio.Task[None] | None = None
        # Why the store fails its writes, from the last heartbeat's (or maintenance read's) failure until a
        # heartbeat commits again: GET /ready says it, and stored requests are refused meanwhile.
        self.problem: str | None = None

    @property
    def store(self) -> Store:
        assert self._store is not None, "StoredResponses.start() has not run"
        return self._store

    async def start(self, *, vectors: bool = False) -> None:
        """Raises ``StoreError`` when the store cannot be opened (or its spec names no store). ``vectors``: the
        store is made ready to keep vectors (``Store.use_vectors``: file_search's hybrid ranking)."""
        spec = self._spec
        self._store = store_from_spec(spec, self._data_dir) if isinstance(spec, str) else spec
        if vectors:
            self._store.use_vectors()
        pid = os.getpid()
        self.process = ProcessInfo(id=random_id("proc"), host=host_key(), pid=pid, pid_start=pid_start(pid))
        self.writer = Writer(self.store, holder=self.process.id)
        self.live = {}
        self._beats: dict[str, tuple[float | None, float]] = {}  # process id → (heartbeat, monotonic when seen)
        self._wake = asyncio.Event()
        await self.store.open()
        self.writer.start()
        await self.store.register_process(self.process)
        await self.recover()
        self._maintenance = asyncio.get_running_loop().create_task(self._maintain(), name="store-maintenance")

    async def aclose(self) -> None:
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
        # Whatever still runs here ends now, failed with a reason, so that nothing stays in_progress.
        await asyncio.gather(*[live.stop("shutdown") for live in list(self.live.values())])
        await self.writer.aclose()
        with contextlib.suppress(Exception):
            await self.store.unregister_process(self.process.id)
        await self.store.aclose()

    # ------------------------------------------------------------------ requests

    # Each read below waits for the store: the request leaves the start lane first (run/turns.py), so that
    # the next requests start meanwhile.

    async def find_item(self, item_id: str, owner: str) -> dict[str, Any] | None:
        leave_lane()
        return await self.store.find_item(item_id, owner)

    async def conversation_items(self, conversation_id: str, owner: str) -> list[dict[str, Any]] | None:
        leave_lane()
        if await self.store.get_conversation(conversation_id, owner) is None:
            return None
        return await self.store.all_items(conversation_id, "conversation")

    async def previous_items(self, previous: str, owner: str) -> list[dict[str, Any]]:
        not_found_error = APIError(
            f"Previous response with id '{previous}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
        live = self.live.get(previous)
        leave_lane()
        row = await self.store.get_response(previous, owner)
        if row is None:
            raise not_found_error
        if row.status in ACTIVE_STATUSES or (live is not None and not live.closed):
            raise APIError(
                f"Previous response with id '{previous}' is still {row.status}: wait until it has finished "
                "(poll it, or stream it) before continuing from it.",
                param="previous_response_id",
                code="previous_response_in_progress",
            )
        chain = await self.store.chain_items(previous, owner)
        if chain is None:
            raise not_found_error
        return chain

    async def respond(
        self, prepared: ResponseRequest, run: ResponseRun, *, response_id: str, created_at: int
    ) -> ResponseRun | StoredRun | Background:
        """How the response runs: not stored, stored in the foreground, or in the background."""
        if not prepared.store and prepared.conversation_id is None:
            return run
        if self.problem is not None:
            # Its writes would fail too: refused now, not answered with an id (or a stream) that is not kept.
            await run.aclose()
            raise store_unavailable(self.problem)
        encoded_input = [(item["id"], orjson.dumps(item)) for item in prepared.input_items]
        live = LiveResponse(
            response_id=response_id,
            owner=prepared.owner,
            created_at=created_at,
            writer=self.writer,
            persist=prepared.store,
            background=prepared.background,
            conversation_id=prepared.conversation_id,
            conversation_items=encoded_input if prepared.conversation_id else (),
            request_id=current_request_id(),
        )
        snapshot = run.translator.response
        insert = InsertResponse(
            record=StoredResponse(
                id=response_id,
                owner=prepared.owner,
                created_at=created_at,
                status=snapshot["status"],
                background=prepared.background,
                previous_response_id=prepared.previous_response_id,
                conversation_id=prepared.conversation_id,
                process_id=self.process.id,
                cancel_requested=False,
                response=orjson.dumps(snapshot),
                request_id=live.request_id,
            ),
            updated_at=time.time(),
            input_items=encoded_input,
        )
        self._register(live)
        if run.trace is not None and prepared.store:
            live.trace = run.trace
            run.trace.on_complete = functools.partial(self._put_trace, live)
        if not prepared.background:
            return StoredRun(run, live, insert)

        # Background: the row and response.created + response.queued are committed before the POST answers,
        # so that the id it returns can be retrieved at once, here or through any other process.
        translator = run.translator
        opening = [translator.next_event(), translator.next_event()]  # not events(): no prefill before begin()
        live.insert(insert)
        live.publish(opening)  # type: ignore[arg-type]
        leave_lane()  # the commit is a wait for the store: the next requests start meanwhile (run/turns.py)
        await live.wait_beyond(len(opening) - 1)
        if live.write_error is not None:
            # Its row was not stored (a full disk, a refused row, a store down past the retries): the id would
            # be a 404 for good, a response that never ran nor failed anywhere.
            live.close()
            await run.aclose()
            raise store_unavailable(live.write_error)
        live.task = asyncio.get_running_loop().create_task(produce(live, run, queued=True), name=f"bg-{response_id}")
        self._wake.set()
        return Background(opening[0]["response"], live)  # type: ignore[index]

    async def store_prepared(self, prepared: ResponseRequest, events: list[dict[str, Any]]) -> None:
        """Keep a response made without model output (``Server.prepared_response``), complete already: its row,
        input items and log, and its input in the ``conversation``, as a generated response would be kept."""
        if not prepared.store and prepared.conversation_id is None:
            return
        final = events[-1]["response"]
        encoded_input = [(item["id"], orjson.dumps(item)) for item in prepared.input_items]
        ops: list[Op] = []
        if prepared.store:
            record = StoredResponse(
                id=final["id"],
                owner=prepared.owner,
                created_at=final["created_at"],
                status=final["status"],
                background=False,
                previous_response_id=prepared.previous_response_id,
                conversation_id=prepared.conversation_id,
                process_id=None,  # finished: no process holds it
                cancel_requested=False,
                response=orjson.dumps(final),
                request_id=current_request_id(),
            )
            ops.append(InsertResponse(record=record, updated_at=time.time(), input_items=encoded_input))
            ops.append(AppendEvents(response_id=record.id, first_seq=0, data=[orjson.dumps(e) for e in events]))
        if prepared.conversation_id is not None:
            ops.append(
                AppendItems(
                    parent=prepared.conversation_id,
                    kind="conversation",
                    owner=prepared.owner,
                    created_at=int(time.time()),
                    items=encoded_input,
                )
            )
        leave_lane()  # the commit is a wait for the store: the next requests start meanwhile (run/turns.py)
        await self.store.write(ops)

    def _put_trace(self, live: LiveResponse, document: dict[str, Any]) -> None:
        """Keep a traced response's trace: submitted before its terminal event is published, so it commits in
        that event's round or before it, and a client that saw the end can read the trace at once."""
        self.writer.submit([PutTrace(response_id=live.id, data=orjson.dumps(document))], owner=live)

    async def trace(self, response_id: str, owner: str) -> dict[str, Any]:
        """A stored response's trace; 404 when it has none, saying why (not traced, still running, ended by
        another process after the one running it stopped), or when the response is another's or not stored."""
        data = await self.store.get_trace(response_id, owner)
        if data is None:
            row = await self.store.get_response(response_id, owner)
            if row is None:
                raise not_found("Response", response_id)  # (store: false too: such a response is not kept)
            raise APIError(
                f"The response '{response_id}' has no trace: {_why_no_trace(row.status, row.response)}",
                status=404,
                param="response_id",
                code="trace_not_found",
            )
        return orjson.loads(data)

    def _register(self, live: LiveResponse) -> None:
        self.live[live.id] = live
        live.on_closed = lambda done: self.live.pop(done.id, None)

    # ------------------------------------------------------------------ stored responses

    def live_for(self, response_id: str, owner: str) -> LiveResponse | None:
        live = self.live.get(response_id)
        return live if live is not None and live.owner == owner and live.persist else None

    async def retrieve(self, response_id: str, owner: str) -> tuple[dict[str, Any], str | None]:
        """The Response as it stands (the running state for a response in progress), and the id of the request
        that created it (None for one stored before request ids were kept)."""
        known_id("Response", response_id)
        live = self.live_for(response_id, owner)
        if live is not None and live.response is not None:
            return live.response, live.request_id
        row = await self.store.get_response(response_id, owner)
        if row is None:
            raise not_found("Response", response_id)
        return orjson.loads(row.response), row.request_id

    async def stream(self, response_id: str, owner: str, *, after: int) -> AsyncIterator[bytes]:
        """The response's log as SSE from ``sequence_number > after``, then live events until the end.

        Raises:
            APIError: 404 for a response that does not exist (or is not the caller's).
        """
        known_id("Response", response_id)
        live = self.live_for(response_id, owner)
        if live is not None:
            return framed(live.follow(after))
        if await self.store.get_response(response_id, owner) is None:
            raise not_found("Response", response_id)
        return self._poll_log(response_id, after)

    async def input_items(
        self, response_id: str, owner: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> tuple[list[dict[str, Any]], bool]:
        """A page of the response's input items and whether more follow.

        Raises:
            APIError: 404 for an unknown response, 400 for an ``after`` that is not in the list.
        """
        known_id("Response", response_id)
        if self.live_for(response_id, owner) is None and await self.store.get_response(response_id, owner) is None:
            raise not_found("Response", response_id)
        return await page(self.store, response_id, "input", after=after, limit=limit, order=order)

    async def _poll_log(self, response_id: str, after: int) -> AsyncIterator[bytes]:
        """Events from the store, polling for more until the terminal one (the producer is elsewhere)."""
        last = after
        idle = 0
        while True:
            rows = await self.store.read_events(response_id, after=last, limit=READ_BATCH)
            if rows:
                idle = 0
                frames: list[bytes] = []
                terminal = False
                for seq, data in rows:
                    kind = event_type(data)
                    frames.append(frame(kind, data))
                    last = seq
                    if kind in TERMINAL_EVENTS:
                        terminal = True
                        break
                yield b"".join(frames)
                if terminal:
                    return
                continue
            idle += 1
            if idle == 1 or idle % 50 == 0:
                # Nothing new: stop if the response is over (its terminal event was before ``after``) or gone.
                row = await self.store.get_response(response_id, None)
                if row is None:
                    return
                if row.status not in ACTIVE_STATUSES and not await self.store.read_events(
                    response_id, after=last, limit=1
                ):
                    return
            await asyncio.sleep(FOLLOW_POLL_INTERVAL)

    async def delete(self, response_id: str, owner: str) -> None:
        known_id("Response", response_id)
        live = self.live_for(response_id, owner)
        if live is not None:
            await live.stop("cancel")  # deleting a running response stops it first
        else:
            row = await self.store.get_response(response_id, owner)
            if row is None:
                raise not_found("Response", response_id)
            if row.status in ACTIVE_STATUSES:
                # Another process runs it: stopped there first, or it would go on generating, and write its
                # events and output items after the row is gone (still found by item_reference).
                await self._stop_elsewhere(response_id, owner)
        if not await self.store.delete_response(response_id, owner):
            raise not_found("Response", response_id)

    async def cancel(self, response_id: str, owner: str) -> dict[str, Any]:
        """Cancel a background response (idempotent); returns the Response as it ends up."""
        known_id("Response", response_id)
        live = self.live_for(response_id, owner)
        if live is not None:
            if not live.background:
                raise APIError("Cannot cancel a synchronous response.")
            await self.store.request_cancel(response_id)
            await live.stop("cancel")
            return live.final or live.response or {}
        row = await self.store.get_response(response_id, owner)
        if row is None:
            raise not_found("Response", response_id)
        if not row.background:
            raise APIError("Cannot cancel a synchronous response.")
        if row.status not in ACTIVE_STATUSES:
            return orjson.loads(row.response)
        row = await self._stop_elsewhere(response_id, owner)
        return orjson.loads(row.response)

    async def _stop_elsewhere(self, response_id: str, owner: str) -> StoredResponse:
        """Stop a response another process runs: raise the flag it polls, and wait (up to ``CANCEL_WAIT``) for
        its end to be written; a producer found dead meanwhile has the response ended here. Returns the row."""
        await self.store.request_cancel(response_id)
        deadline = time.monotonic() + CANCEL_WAIT
        checked = time.monotonic()
        while time.monotonic() < deadline:
            row = await self.store.get_response(response_id, owner)
            if row is None:
                raise not_found("Response", response_id)
            if row.status not in ACTIVE_STATUSES:
                break
            if time.monotonic() - checked > 0.5:
                checked = time.monotonic()
                for active in await self.store.active_responses():
                    if active.id == response_id and self._is_dead(active):
                        await self._end_orphan(active, status="cancelled")
            await asyncio.sleep(FOLLOW_POLL_INTERVAL)
        return row

    # ------------------------------------------------------------------ maintenance

    async def _maintain(self) -> None:
        next_heartbeat = time.monotonic() + HEARTBEAT_INTERVAL
        next_purge = time.monotonic()
        next_forget = time.monotonic()
        retention = self.retention
        purge_every = min(60.0, retention / 2) if retention else None
        while True:
            try:
                # Every stored response running here: a cancel (background) or a delete (any) may come
                # through another process, which raises the response's flag and waits for its end.
                watched = [live.id for live in self.live.values() if live.persist and live.stop_reason is None]
                if watched:
                    for response_id in await self.store.cancel_requests(watched):
                        live = self.live.get(response_id)
                        if live is not None:
                            asyncio.get_running_loop().create_task(live.stop("cancel"))
                now = time.monotonic()
                if now >= next_heartbeat:
                    next_heartbeat = now + HEARTBEAT_INTERVAL
                    await self.store.heartbeat(self.process.id)
                    if self.problem is not None:
                        logger.warning("store maintenance works again")
                        self.problem = None
                    await self.recover()
                    for upkeep in self.periodic:
                        await upkeep()
                if purge_every is not None and retention and now >= next_purge:
                    next_purge = now + purge_every
                    purged = await self.store.purge(time.time() - retention)
                    if purged:
                        logger.info("retention: deleted %d responses and conversations", purged)
                if now >= next_forget:
                    next_forget = now + 3600
                    await self.store.forget_processes(FORGET_PROCESSES_AFTER)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Once per outage, not every poll: a store that is down fails this ten times a second.
                if self.problem is None:
                    logger.exception("store maintenance failed (will retry)")
                self.problem = str(exc) or type(exc).__name__
            timeout = CANCEL_POLL_INTERVAL if watched else HEARTBEAT_INTERVAL / 4
            if purge_every is not None:
                timeout = min(timeout, purge_every)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _is_dead(self, active: ActiveResponse) -> bool:
        if active.process_id == self.process.id:
            return False
        if active.host is None or active.pid is None:
            return True  # no process row: it unregistered (shut down) or was forgotten
        if active.host == self.process.host:
            if not pid_alive(active.pid):
                return True
            if active.pid_start is not None:
                return pid_start(active.pid) != active.pid_start
            # A row from before start identities were kept: the pid may name another process now.
        return self._lease_expired(active)

    def _lease_expired(self, active: ActiveResponse) -> bool:
        if active.heartbeat_age is not None:
            return active.heartbeat_age > LEASE  # by the database's clock, which every process reads alike
        assert active.process_id is not None
        now = time.monotonic()
        seen = self._beats.get(active.process_id)
        if seen is None or seen[0] != active.heartbeat:
            self._beats[active.process_id] = (active.heartbeat, now)
            return False
        return now - seen[1] > LEASE

    async def recover(self) -> int:
        """End every active response whose process is dead, or that this process no longer produces (its end
        was lost in a store outage: the row would stay in progress for good); returns how many."""
        ended = 0
        actives = await self.store.active_responses()
        holders = {active.process_id for active in actives}
        for process_id in [p for p in self._beats if p not in holders]:
            del self._beats[process_id]
        for active in actives:
            if self._is_dead(active):
                ended += await self._end_orphan(active, status="failed")
            elif active.process_id == self.process.id and active.id not in self.live:
                ended += await self._end_orphan(active, status="failed", message=OUTAGE_MESSAGE)
        return ended

    async def _end_orphan(self, active: ActiveResponse, *, status: str, message: str = CRASH_MESSAGE) -> bool:
        if not await self.store.claim(active.id, holder=active.process_id, new_holder=self.process.id):
            return False  # another process got there first
        row = await self.store.get_response(active.id, None)
        if row is None:
            return False
        log: list[dict[str, Any]] = []
        after = -1
        while rows := await self.store.read_events(active.id, after=after, limit=READ_BATCH * 10):
            log.extend(orjson.loads(data) for _, data in rows)
            after = rows[-1][0]
        events, final = closing_events(
            log,
            orjson.loads(row.response),
            status="cancelled" if status == "cancelled" else "failed",
            message=message,
        )
        ops: list[Op] = []
        if events:
            ops.append(
                AppendEvents(
                    response_id=active.id,
                    first_seq=events[0]["sequence_number"],
                    data=[orjson.dumps(event) for event in events],
                )
            )
        ops.append(
            UpdateResponse(
                id=active.id,
                status=final["status"],
                response=orjson.dumps(final),
                updated_at=time.time(),
                finished=True,
            )
        )
        output = [(item.get("id") or "", orjson.dumps(item)) for item in final.get("output") or ()]
        if output:
            ops.append(
                AppendItems(parent=active.id, kind="output", owner=row.owner, created_at=row.created_at, items=output)
            )
        await self.store.write(ops, holder=self.process.id)
        logger.warning(
            "%s: its process %s stopped while it was %s; ended it %s after %d logged events",
            active.id,
            active.process_id,
            row.status,
            final["status"],
            len(log),
        )
        return True


def known_id(kind: str, object_id: str) -> None:
    """An id no stored object can have (NUL, too long: ``ids.id_problem``) is not found, before the store is asked
    (PostgreSQL would raise on NUL)."""
    if id_problem(object_id) is not None:
        raise not_found(kind, object_id)


async def page(
    store: Store, parent: str, kind: ItemKind, *, after: str | None, limit: int, order: Literal["asc", "desc"]
) -> tuple[list[dict[str, Any]], bool]:
    """A page of a response's input items or a conversation's items, and whether more follow.

    Raises:
        APIError: 400 for an ``after`` that is not in the list.
    """
    found = None
    if after is None or id_problem(after) is None:
        found = await store.list_items(parent, kind, after=after, limit=limit, order=order)
    if found is None:
        raise APIError(f"Invalid 'after': no item with id '{after}' in this list.", param="after", code="invalid_value")
    return found.items, found.has_more
