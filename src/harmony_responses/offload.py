"""Long CPU work off the event loop, one piece at a time.

Rendering a long conversation, validating and normalising thousands of input items, reading a long prompt
in the echo engine: each takes up to a few hundred milliseconds and would stall every stream on the loop.
``offload`` runs it in a worker thread. Only one runs at a time, per event loop: the work holds the GIL, and
the loop gets it back at each switch interval only if it competes with one such thread, not several (four
10,000-item requests rendered side by side kept ``/health`` waiting 350 ms; one at a time, 50 ms).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

__all__ = ["offload"]

T = TypeVar("T")

_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


async def offload(func: Callable[..., T], *args: object) -> T:
    """``func(*args)`` in a worker thread, after any other offloaded work of this event loop."""
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(1)
    outcome = await anyio.to_thread.run_sync(_outcome, func, args, limiter=limiter)
    if not isinstance(outcome, _Raised):
        return outcome
    error = outcome.error
    del outcome
    # Raised from here, not through anyio's future: that future is a local of a frame on the traceback and
    # holds the exception, a reference cycle that kept a refused request's whole prompt (a frame on the
    # traceback holds its rendered tokens) alive until the collector's next full pass. Dropping our own
    # reference as it propagates (as concurrent.futures does) leaves none.
    try:
        raise error
    finally:
        del error


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _outcome(func: Callable[..., T], args: tuple[object, ...]) -> T | _Raised:
    try:
        return func(*args)
    except Exception as exc:  # BaseException (a cancellation) goes through anyio as it is
        return _Raised(exc)
