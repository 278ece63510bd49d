"""When a stream's producer gives the event loop a turn.

A producer whose engine never waits (replay at zero delay, a fast engine whose chunks are already
buffered) would keep the loop to itself: the writer, the disconnect watcher and every other stream would
starve. Yielding after every batch costs a whole loop turn per engine chunk, so a producer yields once
every ``YIELD_INTERVAL`` seconds of *uninterrupted* work. Work is interrupted whenever the producer
waits for its engine: a batch that arrives more than ``WAITED`` after the previous one ended means the
loop had its turns meanwhile, and the count starts again. (Counting from the last yield alone made every
chunk of a paced engine, one per 10 ms, look overdue: one needless loop turn per token per stream.)
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["YIELD_INTERVAL", "Turns"]

# The longest a producer keeps the event loop to itself.
YIELD_INTERVAL = 0.002
# A gap between batches longer than this means the producer waited (back-to-back batches are µs apart).
WAITED = 0.0005


class Turns:
    """Call ``arrived()`` when a batch comes in and ``await done()`` when it has been handed on."""

    def __init__(self) -> None:
        self._clock = time.monotonic
        self._since = self._ended = self._clock()

    def arrived(self) -> None:
        now = self._clock()
        if now - self._ended > WAITED:
            self._since = now

    def waited(self) -> None:
        """The producer has just waited for something else (its reader, the store): the loop had its turns."""
        self._since = self._ended = self._clock()

    async def done(self) -> None:
        now = self._ended = self._clock()
        if now - self._since >= YIELD_INTERVAL:
            await asyncio.sleep(0)
            self.waited()
