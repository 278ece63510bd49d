"""Pausing the connection an engine stream is read from while its consumer is held; chunks taken where they are read.

A producer that the server holds for a moment (run/turns.py: another request is starting) stops pulling
from its engine stream, but a connection left readable is still read by the event loop at every turn,
into the HTTP client's buffer, a chunk of a few tokens at a time. With a few hundred streams flowing flat
out those reads were most of each loop turn between two starts (a burst of 256 took about 2.5 ms a start
instead of 1). Paused, the engine's bytes wait in the kernel's socket buffer and come in one read when the
hold ends; nothing is lost, and an engine writing faster than that is slowed by TCP as by a slow reader.

The consumer (``run.turns.Turns``, and the run that opens the engine call) makes a ``Reading`` current in
its task; an engine that reads a socket names, at every chunk it yields (``attach``, in the task reading it),
how to find the transport its stream is read from *now*: none once the stream is over and its connection
back in the pool, where another request's stream may be reading it. The stream's first chunk is read in the
task that starts the run (an engine that refuses the call must be known before anything is sent), the rest
in a producer task it starts then: the producer inherits the same ``Reading``. With one made in the producer
alone, a stream whose first read already held its first delta was held before the producer had read from
it, with nothing to pause: during a burst the first streams let in were read at every loop turn while held.

Chunks taken where they are read (``Reading.direct``). A consumer whose stream is in its steady state (the
first delta out, plain text flowing, no request starting, its client's socket writable) may take a chunk
straight from the engine's read: the stream loop, waiting for its next read, lets the connection's data callback
parse the read and hand each chunk to ``direct``, which translates, frames and writes it there and says True, or
says False and leaves it (and every chunk after it) to the stream loop, woken as for any read. A read taken so
costs no task switch and no trip up and down the chain of async generators between the engine's socket and the
client's: 8-13 % less CPU per token on paced streams, a token a read (bench/ab_bench.py). The consumer offers
it only while it waits for that stream's next chunk (run/loop.py), and an engine only when nothing between it and
the consumer must see every chunk (``Engine.direct_reads``).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable

from ..tokens import TokenChunk

__all__ = ["DirectSink", "Reading", "attach", "current_reading", "reading_here"]

TransportOf = Callable[[], asyncio.Transport | None]
# Takes one chunk of the stream where it was read: True if it did (translated, framed and written or queued for
# the writer), False if it left it, unchanged, to the stream loop.
DirectSink = Callable[[TokenChunk], bool]


class Reading:
    """The transport a consumer's engine stream is read from, paused and resumed around a hold."""

    __slots__ = ("_paused", "direct", "transport_of")

    def __init__(self) -> None:
        self.transport_of: TransportOf | None = None  # the stream's transport now, None once it is over
        self._paused: asyncio.Transport | None = None
        self.direct: DirectSink | None = None  # the consumer takes chunks where they are read (module docstring)

    def pause(self) -> None:
        """Stop reading the transport, unless something else (the client's own flow control) already has."""
        transport = self.transport_of() if self.transport_of is not None else None
        if transport is not None and not transport.is_closing() and transport.is_reading():
            transport.pause_reading()
            self._paused = transport

    def resume(self) -> None:
        """Read again what ``pause`` stopped."""
        transport, self._paused = self._paused, None
        if transport is not None and not transport.is_closing():
            transport.resume_reading()


_current: contextvars.ContextVar[Reading | None] = contextvars.ContextVar("harmony_responses_reading", default=None)


def reading_here() -> Reading:
    """The ``Reading`` current in this task: the one it inherited from the task that created it (a consumer's
    producer task), or a new one, current from now on. Each request runs in a task of its own, so two
    consumers never share one."""
    reading = _current.get()
    if reading is None:
        reading = Reading()
        _current.set(reading)
    return reading


def current_reading() -> Reading | None:
    """The ``Reading`` current in this task, if its consumer made one."""
    return _current.get()


def attach(transport_of: TransportOf) -> None:
    """The engine stream being read in this task reads what ``transport_of()`` returns (None once the stream
    is over): its consumer's holds pause it."""
    reading = _current.get()
    if reading is not None:
        reading.transport_of = transport_of
