"""Group commit for the event logs: every stream's writes go into one transaction per round.

Two ways in. ``submit(ops, done)`` queues ops for the next round. A *source* (a stored response's event
log, ``run/live.py``) instead says ``mark(source)`` when it has something new, and the writer pulls from
it (``source.take()``) when the round starts: whatever it published since its last round, one row of
events and at most one response update however many chunks that was. Pulling keeps the per-token cost
at appending to a list: no op, merge or callback per chunk. One task writes each round in one transaction
(queued ops first, then the sources', so a response's insert precedes its events), then calls each
``done`` in order. While a round is being written the next one accumulates, so the number of transactions
adapts to the load: one per event when the server is idle (lowest latency), one per few thousand events
under load (never one per token).

``done`` is how a stream learns that its events are durable: the API sends a stored response's events
only once they are (``run/live.py``), so a stream resumed from the log, even after a crash, is exactly
what a connected client saw.

One bad operation fails only its owner, never the round. When a round's transaction fails, each
owner's ops (a source's, or one ``submit``'s) are written in a transaction of their own: if some commit,
the database is up and the others' data is at fault (a value it cannot hold). Such an owner is told
(``write_failed``) and its later writes are dropped, so that it cannot fail every round after; its
``done`` callbacks still run. Only when every owner fails is the database taken to be failing: it is
retried with backoff for about ``RETRY_DELAYS`` seconds in total; after that the round is given up
(logged with how many events were lost), its owners are told as above, and its ``done`` callbacks still
run, so that streams continue to their clients instead of hanging.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import tracing
from ..metrics import STORE_WRITE_DURATION
from ._base import AppendEvents, Op, Store

__all__ = ["Source", "Writer"]

logger = logging.getLogger("harmony_responses.store")

RETRY_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0, 4.0)


class Source(Protocol):
    """Something with writes pending, pulled once per round (see the module docstring)."""

    def take(self) -> tuple[Sequence[Op], Callable[[], None] | None]:
        """The ops written since the last ``take``, and what to call once they are committed."""
        ...

    def write_failed(self, error: Exception) -> None:
        """Its ops could not be written while others' were: they are dropped from now on."""
        ...


@dataclass(slots=True)
class _Group:
    """The ops of one owner in a round (a source, or one ``submit`` with or without an owner)."""

    owner: Any
    ops: list[Op] = field(default_factory=list)


class Writer:
    """Batches ``Op`` lists from many producers into one ``store.write`` per round."""

    def __init__(self, store: Store, *, holder: str | None = None) -> None:
        self._store = store
        self._holder = holder  # this process: what it no longer holds takes no more writes (Store.write)
        self._groups: list[_Group] = []
        self._callbacks: list[Callable[[], None]] = []
        self._failed: weakref.WeakSet[Any] = weakref.WeakSet()  # owners whose writes are dropped
        self._sources: dict[Source, None] = {}  # marked since the last round, in order (a dict: no duplicates)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="store-writer")

    def submit(self, ops: Sequence[Op], done: Callable[[], None] | None = None, *, owner: Source | None = None) -> None:
        """Queue ``ops`` for the next round; ``done()`` runs once they are committed.

        ``owner``: the source these ops belong to (a response's row before its events), told when they fail.
        """
        if ops:
            self._groups.append(_Group(owner, list(ops)))
        if done is not None:
            self._callbacks.append(done)
        self._wakeup.set()

    def mark(self, source: Source) -> None:
        """``source`` has new writes: pull them at the start of the next round."""
        if source not in self._sources:
            self._sources[source] = None
            self._wakeup.set()

    async def flush(self) -> None:
        """Wait until everything submitted so far is committed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.submit((), lambda: future.done() or future.set_result(None))
        await future

    async def aclose(self) -> None:
        if self._task is None:
            return
        await self.flush()
        task, self._task = self._task, None
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            groups, callbacks, sources = self._groups, self._callbacks, self._sources
            self._groups, self._callbacks, self._sources = [], [], {}
            for source in sources:
                try:
                    more, done = source.take()
                except Exception:  # one stream's bug must not stop the writer of all streams
                    logger.exception("store writer source failed")
                    continue
                if more:
                    groups.append(_Group(source, list(more)))
                if done is not None:
                    callbacks.append(done)
            groups = [g for g in groups if g.owner is None or g.owner not in self._failed]
            if groups:
                await self._write(groups)
            for callback in callbacks:
                try:
                    callback()
                except Exception:  # one stream's bug must not stop the writer of all streams
                    logger.exception("store writer callback failed")

    async def _write(self, groups: list[_Group]) -> None:
        if not tracing.enabled():
            await self._write_groups(groups)
            return
        # --otel: one span per batch, linked to the responses it writes for (many: it has no one parent).
        span = tracing.start(
            "store write",
            {"harmony.store.ops": sum(len(g.ops) for g in groups)},
            links=tracing.links({id(g.owner): getattr(g.owner, "span", None) for g in groups}.values()),
        )
        try:
            await self._write_groups(groups)
        finally:
            tracing.end(span)

    async def _write_groups(self, groups: list[_Group]) -> None:
        for attempt, delay in enumerate((*RETRY_DELAYS, None)):
            started = time.monotonic()
            try:
                await self._store.write([op for group in groups for op in group.ops], holder=self._holder)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc
            finally:
                STORE_WRITE_DURATION.observe(time.monotonic() - started)
            groups = await self._write_apart(groups)
            if not groups:
                return
            if delay is None:
                lost = sum(len(op.data) for g in groups for op in g.ops if isinstance(op, AppendEvents))
                logger.error("store write failed %d times, giving up (%d events lost): %s", attempt + 1, lost, error)
                self._give_up(groups, error)
                return
            logger.warning("store write failed (retrying in %.2fs): %s", delay, error)
            await asyncio.sleep(delay)

    async def _write_apart(self, groups: list[_Group]) -> list[_Group]:
        """Write each group in its own transaction; returns the groups left to retry (all of them when none
        committed and an empty transaction fails too: the database is failing, not an owner's data)."""
        failed: list[tuple[_Group, Exception]] = []
        for group in groups:
            try:
                await self._store.write(group.ops, holder=self._holder)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failed.append((group, exc))
        if len(failed) == len(groups):
            try:
                await self._store.write([])  # is the database there at all?
            except asyncio.CancelledError:
                raise
            except Exception:
                return groups
        for group, exc in failed:
            lost = sum(len(op.data) for op in group.ops if isinstance(op, AppendEvents))
            logger.error(
                "store write of %r failed while the store works; its writes are dropped (%d events): %s",
                group.owner,
                lost,
                exc,
            )
            self._give_up([group], exc)
        return []

    def _give_up(self, groups: list[_Group], error: Exception) -> None:
        """These groups' writes are lost: their owners are told, and what they write later is dropped (a log
        with a hole would replay differently from what its clients saw)."""
        for group in groups:
            if group.owner is None or group.owner in self._failed:
                continue
            self._failed.add(group.owner)
            try:
                group.owner.write_failed(error)
            except Exception:  # one stream's bug must not stop the writer of all streams
                logger.exception("store writer source failed")
