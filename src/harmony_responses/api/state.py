"""The server's state: the store, this process's live responses, background work, leases and recovery.

``State`` is built in the app's lifespan (``app.state.stateful``) and owns:

- the store (``--store``) and its group-commit ``Writer``;
- this process's row in ``processes`` with a heartbeat every ``HEARTBEAT_INTERVAL`` seconds — its lease;
- ``live``: the stored responses this process is producing (``live.LiveResponse``), so that retrieving,
  streaming and cancelling one of them here needs no database round trip;
- a maintenance task that heartbeats, polls the cancel flags of its background responses (a cancel may
  arrive through another process), ends the responses of processes that died (``recovery.py``), and
  purges data older than ``--retention``.

Requests use it twice: ``prepare`` (before rendering) resolves ``previous_response_id``, ``conversation`` and
``item_reference`` into items and normalises the input; ``respond`` (after) decides how the response runs:
not stored (the plain ``RunResponse``), stored in the foreground (``StoredRun``), or in the background
(detached task; the POST answers at once).

A process is dead when its lease expired (no heartbeat for ``LEASE`` seconds, by the database's clock), or
at once when it ran on this same host (and pid namespace) and its pid is gone — so a server restarted
after a crash ends the crashed one's responses immediately, while with PostgreSQL a response another live
process is producing is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ..ids import random_id
from ..store import (
    ACTIVE_STATUSES,
    ActiveResponse,
    AppendEvents,
    AppendItems,
    InsertResponse,
    Op,
    ProcessInfo,
    Store,
    StoredResponse,
    UpdateResponse,
    Writer,
    store_from_spec,
)
from .config import Config
from .errors import APIError, json_response
from .items import is_item_reference, normalize_items
from .live import TERMINAL_EVENTS, LiveResponse, StoredRun, produce, sse_frames
from .recovery import CRASH_MESSAGE, closing_events
from .run import ResponseRun
from .streaming import SSE_HEADERS, RunResponse

__all__ = ["Prepared", "State", "not_found"]

logger = logging.getLogger("harmony_responses.api")

HEARTBEAT_INTERVAL = 2.0
# A process whose heartbeat is older than this is dead: several missed heartbeats, so that a process
# busy for a moment (or a database briefly slow) does not have its responses ended under it.
LEASE = 15.0
CANCEL_POLL_INTERVAL = 0.1
FOLLOW_POLL_INTERVAL = 0.02
CANCEL_WAIT = 10.0
FORGET_PROCESSES_AFTER = 7 * 24 * 3600.0
READ_BATCH = 1000


def not_found(kind: str, id: str) -> APIError:
    # The API's wording ("Response with id 'resp_x' not found."), param and code null, status 404.
    return APIError(f"{kind} with id '{id}' not found.", status=404)


def host_key() -> str:
    """This machine and pid namespace: pids are comparable only between processes with the same key."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        boot, namespace = "", 0
    return f"{socket.gethostname()}/{boot}/{namespace}"


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


@dataclass(slots=True, kw_only=True)
class Prepared:
    """A request's state, resolved before rendering (see ``State.prepare``)."""

    owner: str
    store: bool
    background: bool
    previous_response_id: str | None
    conversation_id: str | None
    input_items: list[dict[str, Any]]
    render_body: dict[str, Any]

    @property
    def echo(self) -> dict[str, Any]:
        """Response fields the request's state decides (responses-protocol.md §6)."""
        return {
            "previous_response_id": self.previous_response_id,
            "conversation": {"id": self.conversation_id} if self.conversation_id else None,
            "background": self.background,
            "store": self.store,
        }


class State:
    """See the module docstring. ``start()`` in the lifespan, ``aclose()`` at shutdown."""

    def __init__(self, config: Config, store: Store | None = None) -> None:
        self.config = config
        self.store = store if store is not None else store_from_spec(config.store, config.data_dir)
        self.writer = Writer(self.store)
        self.process = ProcessInfo(id=random_id("proc"), host=host_key(), pid=os.getpid())
        self.live: dict[str, LiveResponse] = {}
        self._maintenance: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------ lifetime

    async def start(self) -> None:
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

    def owner_of(self, request: Request) -> str:
        """Who may see what this request stores: a hash of its API key (never the key), ``""`` without auth."""
        if not self.config.api_keys:
            return ""
        token = request.headers.get("authorization", "").partition(" ")[2].strip()
        return hashlib.sha256(token.encode()).hexdigest()

    async def prepare(self, request: Request, body: dict[str, Any]) -> Prepared:
        """Resolve the request's state: its own input (ids assigned, references resolved) and prior items.

        Raises:
            APIError: 400 ``previous_response_not_found``, 404 for an unknown conversation, 400 for an
                ``item_reference`` to no stored item.
        """
        owner = self.owner_of(request)
        items = normalize_items(body.get("input"), random_id)
        for i, item in enumerate(items):
            if is_item_reference(item):
                found = await self.store.find_item(item["id"], owner)
                if found is None:
                    raise APIError(f"Item with id '{item['id']}' not found.", param=f"input[{i}]", code="invalid_value")
                items[i] = found

        previous = body.get("previous_response_id")
        prior: list[dict[str, Any]] | None = None
        if previous is not None:
            prior = await self._previous_items(previous, owner)
        conversation = body.get("conversation")
        conversation_id = conversation if isinstance(conversation, str) or conversation is None else conversation["id"]
        if conversation_id is not None:
            if await self.store.get_conversation(conversation_id, owner) is None:
                raise APIError(f"Conversation with id '{conversation_id}' not found.", status=404, param="conversation")
            prior = await self.store.all_items(conversation_id, "conversation")

        # Prior items go first in ``input`` (rather than render's ``prior_items``) so that ``truncation:
        # "auto"`` can drop them too, oldest turns first (fit.py works on ``input``).
        render_body = dict(body, input=(prior or []) + items)
        return Prepared(
            owner=owner,
            store=body.get("store") is not False,
            background=bool(body.get("background")),
            previous_response_id=previous,
            conversation_id=conversation_id,
            input_items=items,
            render_body=render_body,
        )

    async def _previous_items(self, previous: str, owner: str) -> list[dict[str, Any]]:
        not_found_error = APIError(
            f"Previous response with id '{previous}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
        live = self.live.get(previous)
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
        self, prepared: Prepared, run: ResponseRun, *, response_id: str, created_at: int, stream: bool
    ) -> ASGIApp:
        """How the response runs: not stored, stored in the foreground, or in the background."""
        if not prepared.store and prepared.conversation_id is None:
            return RunResponse(run, stream=stream)
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
            ),
            updated_at=time.time(),
            input_items=encoded_input,
        )
        self._register(live)
        if not prepared.background:
            return RunResponse(StoredRun(run, live, insert), stream=stream)

        # Background: the row and response.created + response.queued are committed before the POST answers,
        # so that the id it returns can be retrieved at once, here or through any other process.
        translator = run.translator
        opening = [translator.next_event(), translator.next_event()]  # not events(): no prefill before begin()
        live.insert(insert)
        live.publish(opening)  # type: ignore[arg-type]
        await live.wait_beyond(len(opening) - 1)
        live.task = asyncio.get_running_loop().create_task(produce(live, run, queued=True), name=f"bg-{response_id}")
        self._wake.set()
        if stream:
            return FollowStream(live.follow())
        return json_response(opening[0]["response"])  # type: ignore[index]

    def _register(self, live: LiveResponse) -> None:
        self.live[live.id] = live
        live.on_closed = lambda done: self.live.pop(done.id, None)

    # ------------------------------------------------------------------ stored responses

    def live_for(self, response_id: str, owner: str) -> LiveResponse | None:
        live = self.live.get(response_id)
        return live if live is not None and live.owner == owner and live.persist else None

    async def retrieve(self, response_id: str, owner: str) -> dict[str, Any]:
        """The Response as it stands (the running state for a response in progress)."""
        live = self.live_for(response_id, owner)
        if live is not None and live.response is not None:
            return live.response
        row = await self.store.get_response(response_id, owner)
        if row is None:
            raise not_found("Response", response_id)
        return orjson.loads(row.response)

    async def stream(self, response_id: str, owner: str, *, after: int) -> ASGIApp:
        """The response's log as SSE from ``sequence_number > after``, then live events until the end."""
        live = self.live_for(response_id, owner)
        if live is not None:
            return FollowStream(live.follow(after))
        if await self.store.get_response(response_id, owner) is None:
            raise not_found("Response", response_id)
        return FollowStream(self._poll_log(response_id, after))

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
        live = self.live_for(response_id, owner)
        if live is not None:
            await live.stop("cancel")  # deleting a running response stops it first
        if not await self.store.delete_response(response_id, owner):
            raise not_found("Response", response_id)

    async def cancel(self, response_id: str, owner: str) -> dict[str, Any]:
        """Cancel a background response (idempotent); returns the Response as it ends up."""
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
        # Another process runs it: raise the flag it polls, and wait for the end to be written.
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
        return orjson.loads(row.response)

    # ------------------------------------------------------------------ maintenance

    async def _maintain(self) -> None:
        next_heartbeat = time.monotonic() + HEARTBEAT_INTERVAL
        next_purge = time.monotonic()
        next_forget = time.monotonic()
        retention = self.config.retention
        purge_every = min(60.0, retention / 2) if retention else None
        while True:
            try:
                background = [live.id for live in self.live.values() if live.background and live.stop_reason is None]
                if background:
                    for response_id in await self.store.cancel_requests(background):
                        live = self.live.get(response_id)
                        if live is not None:
                            asyncio.get_running_loop().create_task(live.stop("cancel"))
                now = time.monotonic()
                if now >= next_heartbeat:
                    next_heartbeat = now + HEARTBEAT_INTERVAL
                    await self.store.heartbeat(self.process.id)
                    await self.recover()
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
            except Exception:
                logger.exception("store maintenance failed (will retry)")
            timeout = CANCEL_POLL_INTERVAL if background else HEARTBEAT_INTERVAL / 4
            if purge_every is not None:
                timeout = min(timeout, purge_every)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _is_dead(self, active: ActiveResponse) -> bool:
        if active.process_id == self.process.id:
            return False
        if active.host is None or active.pid is None or active.heartbeat_age is None:
            return True  # no process row: it unregistered (shut down) or was forgotten
        if active.heartbeat_age > LEASE:
            return True
        return active.host == self.process.host and not pid_alive(active.pid)

    async def recover(self) -> int:
        """End every active response whose process is dead; returns how many."""
        ended = 0
        for active in await self.store.active_responses():
            if self._is_dead(active) and await self._end_orphan(active, status="failed"):
                ended += 1
        return ended

    async def _end_orphan(self, active: ActiveResponse, *, status: str) -> bool:
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
            message=CRASH_MESSAGE,
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
        await self.store.write(ops)
        logger.warning(
            "%s: its process %s stopped while it was %s; ended it %s after %d logged events",
            active.id,
            active.process_id,
            row.status,
            final["status"],
            len(log),
        )
        return True


class FollowStream:
    """SSE of a stored response's events: from a live response here, or polled from the store.

    The client going away only ends this stream; the response itself goes on (background mode is not
    tied to any connection). The body ends right after the terminal event.
    """

    def __init__(self, source: AsyncIterator[Any]) -> None:
        self._source = source

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch_disconnect, receive, group.cancel_scope)
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            try:
                async with contextlib.aclosing(self._source) as source:
                    async for chunk in source:
                        await send({"type": "http.response.body", "body": _body(chunk), "more_body": True})
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


def _body(chunk: Any) -> bytes:
    if isinstance(chunk, bytes):
        return chunk
    return sse_frames(*chunk)  # a LiveResponse.follow() slice
