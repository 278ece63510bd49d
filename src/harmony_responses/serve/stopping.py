"""How a serving process ends: at once on a second Ctrl-C, and never kept alive once its server is done.

uvicorn's second SIGINT (``force_exit``) only skips the waits of its shutdown: it then leaves the
responses' tasks to ``asyncio.run``'s clean-up, which cancels every task, the store's writer among them,
and waits for them all. A response finishing waits for its end to be written by that writer (``run/live.py``
``_finish``), so the clean-up never ended, and the process stayed up after "Finished server process". A
further Ctrl-C could not end it when SIGINT had been ignored at start (a background job of a
non-interactive shell): uvicorn restores the disposition it found, and SIG_IGN ignores the rest. So:

- a second SIGINT ends the process then and there, by that signal, as a crash would: the streams are cut,
  and the responses still running are ended failed by the next start (``run/recovery.py``);
- after a shutdown on SIGINT, uvicorn raises the signal again under the handler it found, Python's, and
  the ``KeyboardInterrupt`` printed a traceback: the process ends by the signal instead, quietly;
- once the server is done, whatever still runs (a task that does not end when cancelled, a worker thread)
  gets ``EXIT_BACKSTOP`` seconds, then the process exits regardless.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

__all__ = ["EXIT_BACKSTOP", "end_by", "exit_now", "exit_soon"]

logger = logging.getLogger("harmony_responses.serve")

# Seconds a process whose server is done may take to exit before it is made to.
EXIT_BACKSTOP = 10.0


def exit_now(sig: int) -> None:
    """End this process by ``sig`` now, whatever its disposition was at start (a signal handler's last word)."""
    logger.warning(
        "%s again: exiting now; the responses still running are cut and end failed at the next start",
        signal.Signals(sig).name,
    )
    end_by(sig)


def end_by(sig: int) -> None:
    """End this process as one that ``sig`` interrupted (its parent sees that signal, a shell stops a script)."""
    _flush()
    signal.signal(sig, signal.SIG_DFL)
    signal.raise_signal(sig)
    os._exit(128 + sig)  # not reached: the default action of SIGINT and SIGTERM ends the process


def exit_soon(status: int = 1) -> None:
    """Exit with ``status`` in ``EXIT_BACKSTOP`` seconds unless the process has ended by then (the server is
    done: nothing it runs should keep the process). Only for the process's main thread: a server run in
    another thread (a test's) is not the process."""
    if threading.current_thread() is not threading.main_thread():
        return
    timer = threading.Timer(EXIT_BACKSTOP, _exit_stuck, (status,))
    timer.daemon = True  # it must not keep the process alive itself
    timer.start()


def _exit_stuck(status: int) -> None:
    left = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    logger.error(
        "the server is done, but the process had not exited %g s later (threads left: %s): exiting",
        EXIT_BACKSTOP,
        ", ".join(left) or "none; a task that does not end when cancelled",
    )
    _flush()
    os._exit(status)


def _flush() -> None:
    for name in ("", "uvicorn", "uvicorn.access"):  # where logs.logging_config puts handlers
        for handler in logging.getLogger(name).handlers:
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing more can be said there
            pass
