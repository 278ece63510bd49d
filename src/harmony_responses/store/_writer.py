"""Group commit for the event logs: every stream's writes go into one transaction per round.

Streams call ``submit(ops, done)`` and carry on; one task writes whatever has accumulated, in one
transaction, then calls each ``done`` in submission order. While a round is being written, new work
piles up for the next round, so the number of transactions adapts to the load: one per event when the
server is idle (lowest latency), one per few hundred or thousand events under load (never one per token).

``done`` is how a stream learns that its events are durable: the API sends a stored response's events
only once they are (``api/live.py``), so a stream resumed from the log, even after a crash, is exactly
what a connected client saw.

A failing database is retried with backoff for about ``RETRY_DELAYS`` seconds in total; after that the
round is given up (logged with how many events were lost) and its ``done`` callbacks still run, so that
streams continue to their clients instead of hanging.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from ._base import AppendEvents, Op, Store

__all__ = ["Writer", "merge_appends"]

logger = logging.getLogger("harmony_responses.store")

RETRY_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0, 4.0)


def merge_appends(ops: list[Op]) -> list[Op]:
    """One ``AppendEvents`` per response and run of appends: a row per response per round, not per chunk.

    A stream submits one op per engine chunk (often one token), so a round under load holds thousands of
    small appends; written as they come they cost a row each. An append that continues the previous one of
    the same response (``first_seq`` follows on) joins it. Any other kind of op ends the runs, so that no
    event moves past an insert, update or delete.
    """
    merged: list[Op] = []
    runs: dict[str, tuple[int, list[bytes]]] = {}  # response id -> (first_seq, data) of the run being extended
    for op in ops:
        if not isinstance(op, AppendEvents):
            runs.clear()
            merged.append(op)
            continue
        run = runs.get(op.response_id)
        if run is not None and run[0] + len(run[1]) == op.first_seq:
            run[1].extend(op.data)  # the merged op holds this very list
            continue
        data = list(op.data)
        runs[op.response_id] = (op.first_seq, data)
        merged.append(AppendEvents(response_id=op.response_id, first_seq=op.first_seq, data=data))
    return merged


class Writer:
    """Batches ``Op`` lists from many producers into one ``store.write`` per round."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._ops: list[Op] = []
        self._callbacks: list[Callable[[], None]] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0  # transactions written, for the benchmark and tests
        self.ops_written = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="store-writer")

    def submit(self, ops: Sequence[Op], done: Callable[[], None] | None = None) -> None:
        """Queue ``ops`` for the next round; ``done()`` runs once they are committed."""
        self._ops.extend(ops)
        if done is not None:
            self._callbacks.append(done)
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
            ops, callbacks = self._ops, self._callbacks
            self._ops, self._callbacks = [], []
            if ops:
                await self._write(merge_appends(ops))
            for callback in callbacks:
                try:
                    callback()
                except Exception:  # one stream's bug must not stop the writer of all streams
                    logger.exception("store writer callback failed")

    async def _write(self, ops: list[Op]) -> None:
        for attempt, delay in enumerate((*RETRY_DELAYS, None)):
            try:
                await self._store.write(ops)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if delay is None:
                    lost = sum(len(op.data) for op in ops if isinstance(op, AppendEvents))
                    logger.error("store write failed %d times, giving up (%d events lost): %s", attempt + 1, lost, exc)
                    return
                logger.warning("store write failed (retrying in %.2fs): %s", delay, exc)
                await asyncio.sleep(delay)
            else:
                self.rounds += 1
                self.ops_written += len(ops)
                return
