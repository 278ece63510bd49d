"""One bad operation fails only the response that owns it, never the writer's round (issue 16 #1).

The writer commits every stream's writes in one transaction per round. A value the store cannot hold
(here a duplicate primary key, which both stores refuse; in the field, NUL in PostgreSQL text) used to fail
the whole round: every stored stream stalled for the retry budget and the round was dropped, damaging
other responses' logs. Now the others commit at once and only the owner is told.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import pytest

from harmony_responses.store import AppendEvents, InsertResponse, Op, Writer, store_from_spec
from state.test_store_writes import record


class Source:
    """A writer source with a fixed list of ops per round, remembering whether it was told it failed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pending: list[Op] = []
        self.committed = 0
        self.failed: Exception | None = None

    def take(self) -> tuple[Sequence[Op], Callable[[], None]]:
        ops, self.pending = self.pending, []

        def done() -> None:
            self.committed += 1

        return ops, done

    def write_failed(self, error: Exception) -> None:
        self.failed = error


def test_a_bad_write_fails_only_its_owner(store_spec: str, caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        store = store_from_spec(store_spec)
        await store.open()
        writer = Writer(store)
        writer.start()
        try:
            await store.write([InsertResponse(record=record(rid), updated_at=1.0) for rid in ("resp_a", "resp_b")])
            good, bad = Source("good"), Source("bad")
            good.pending = [AppendEvents(response_id="resp_a", first_seq=0, data=[b'{"n":0}', b'{"n":1}'])]
            bad.pending = [InsertResponse(record=record("resp_b"), updated_at=2.0)]  # exists already: refused
            anonymous_done = asyncio.get_running_loop().create_future()
            # One round: the two sources and a plain submit, all queued before the writer runs.
            writer.mark(good)
            writer.mark(bad)
            writer.submit(
                [AppendEvents(response_id="resp_b", first_seq=0, data=[b'{"m":0}'])],
                lambda: anonymous_done.set_result(None),
            )
            with caplog.at_level(logging.WARNING, logger="harmony_responses.store"):
                await writer.flush()

            assert await store.read_events("resp_a", after=-1, limit=10) == [(0, b'{"n":0}'), (1, b'{"n":1}')]
            assert await store.read_events("resp_b", after=-1, limit=10) == [(0, b'{"m":0}')]
            assert anonymous_done.done() and good.committed == 1 and bad.committed == 1  # nobody hangs
            assert bad.failed is not None and good.failed is None
            # The good writes did not wait out the bad one's retries (RETRY_DELAYS: ~8 s): none was retried.
            assert not [r for r in caplog.records if "retrying" in r.getMessage()], caplog.text

            # The failed owner's later writes are dropped; the others go on.
            bad.pending = [AppendEvents(response_id="resp_b", first_seq=1, data=[b'{"m":1}'])]
            good.pending = [AppendEvents(response_id="resp_a", first_seq=2, data=[b'{"n":2}'])]
            writer.mark(bad)
            writer.mark(good)
            await writer.flush()
            assert [seq for seq, _ in await store.read_events("resp_a", after=-1, limit=10)] == [0, 1, 2]
            assert [seq for seq, _ in await store.read_events("resp_b", after=-1, limit=10)] == [0]
        finally:
            await writer.aclose()
            await store.aclose()

    asyncio.run(run())
