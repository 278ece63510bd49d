"""A wall clock that tests can step, for every Python process started with this folder on ``PYTHONPATH``.

Python imports ``sitecustomize`` at start-up in every interpreter, so a server and each of its worker
processes (``--workers``: spawned, not forked) read ``time.time()`` through this shift. The file named by
``HARMONY_TEST_WALL_CLOCK`` holds a JSON object: a pid (as a string) or ``"*"`` → seconds added to that
process's wall clock. ``time.monotonic()`` is untouched, as it is when a real clock is stepped.
"""

from __future__ import annotations

import json
import os
import time

_PATH = os.environ.get("HARMONY_TEST_WALL_CLOCK")


def _install(path: str) -> None:
    real = time.time

    def shifted() -> float:
        try:
            with open(path) as f:
                steps = json.load(f)
        except (OSError, ValueError):
            return real()
        return real() + float(steps.get(str(os.getpid()), steps.get("*", 0)))

    time.time = shifted


if _PATH:
    _install(_PATH)
