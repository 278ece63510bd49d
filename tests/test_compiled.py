"""The optional compiled modules (harmony_responses/_compiled.py): each is used where it was built, turned off by
HARMONY_RESPONSES_PURE_PYTHON, and start-up says which path runs and why (the scanner's own wording is checked
through the engine's start-up line, tests/engine/test_lines.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from harmony_responses import _compiled, sse
from harmony_responses.translate import _translator

STEPS = pytest.mark.parametrize(
    ("code", "done", "built"),
    [
        (
            "from harmony_responses.translate import describe_text_run as d",
            "text tokens taken",
            lambda: _translator.TEXT_RUN,
        ),
        ("from harmony_responses.sse import describe_frames as d", "events framed", lambda: sse.FRAMES),
    ],
    ids=["text run", "framing"],
)


@STEPS
def test_start_up_says_how_each_step_runs(code: str, done: str, built: Callable[[], object]) -> None:
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_PYTHON}
    argv = [sys.executable, "-c", f"{code}; print(d())"]
    pure = subprocess.run(argv, env={**env, _compiled.PURE_PYTHON: "1"}, capture_output=True, text=True)
    assert pure.stdout.strip() == f"{done} in pure Python: HARMONY_RESPONSES_PURE_PYTHON is set", pure.stderr
    default = subprocess.run(argv, env=env, capture_output=True, text=True)
    expected = f"{done} by the compiled" if built() is not None else f"{done} in pure Python"
    assert default.stdout.startswith(expected), default.stderr


def test_a_module_that_was_not_built_is_named_with_the_reason() -> None:
    function, why = _compiled.load("harmony_responses._not_built_here", "take", "scanner")
    assert function is None and why is not None
    assert why.startswith("the compiled scanner was not built (No module named")
    assert _compiled.describe(function, why, "lines read", "scanner") == f"lines read in pure Python: {why}"
