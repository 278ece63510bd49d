"""The Open Responses compliance suite as packaged on PyPI (``llm-comply`` 0.5.0) against the real server.

The server runs the ``echo`` engine: a deterministic stand-in that writes valid Harmony for any prompt
(analysis, then a final answer) and calls a function when ``tool_choice`` forces one, which is what the
suite's tests ask for, in whatever order it runs them. Every test must pass, except for the deliberate
differences listed below, each with its reason; a listed difference that no longer shows up fails too,
so that the list (and the guide's "Compliance" section, docs/clients/frameworks.md) stays true.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import MODEL

LLM_COMPLY = Path(sys.executable).parent / "llm-comply"
TIMEOUT = 120  # the whole suite takes a few seconds against the echo engine

# Errors accepted in any test, by prefix. gpt-oss always reasons, and the server streams its raw chain
# of thought with OpenAI's event names, `response.reasoning_text.delta` / `.done` (what openai-python,
# the Agents SDK and Codex understand). The Open Responses spec bundled with llm-comply 0.5.0 names
# them `response.reasoning.delta` / `.done`, and llm-comply reports any event type outside its list as
# unknown, so every streaming test sees these two.
ALLOWED_ANYWHERE: dict[str, str] = {
    "unknown SSE event type: response.reasoning_text.delta": "OpenAI's name for raw reasoning deltas",
    "unknown SSE event type: response.reasoning_text.done": "OpenAI's name for the finished raw reasoning",
}

# Whole tests that fail on purpose, with the exact errors llm-comply reports for them.
ALLOWED_FAILURES: dict[str, dict[str, str]] = {
    # gpt-oss is a text-only model: an `input_image` part gets a 400 naming the parameter instead of
    # being silently dropped (which would make the model answer about an image it never saw).
    "image-input": {
        "HTTP 400 (expected [200])": "input_image is rejected for a text-only model",
        "response.id is missing or empty": "the 400 error body has no response",
        "response.output is missing or empty": "the 400 error body has no response",
        "expected status='completed', got 'None'": "the 400 error body has no response",
    },
}

# llm-comply skips `reasoning-summary` unless the model's name contains o1/o3/o4/gpt-5/deepseek-r, so it
# is run a second time on its own under an extra model name that the server also answers to.
GATED = "reasoning-summary"
REASONING_ALIAS = "gpt-oss-20b-as-o3"


def _allowed(test_id: str, error: str) -> bool:
    return any(error.startswith(prefix) for prefix in ALLOWED_ANYWHERE) or error in ALLOWED_FAILURES.get(test_id, {})


def _llm_comply(base_url: str, model: str, *args: str) -> tuple[dict[str, dict[str, Any]], str]:
    """Run the suite; its results by test id, and everything it printed (for assertion messages)."""
    proc = subprocess.run(
        [str(LLM_COMPLY), "-u", f"{base_url}/v1", "-k", "x", "-m", model, "--json", "--timeout", "30", *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=TIMEOUT,
    )
    report = f"exit {proc.returncode}\n{proc.stdout.decode(errors='replace')}\n{proc.stderr.decode(errors='replace')}"
    try:
        return {r["id"]: r for r in json.loads(proc.stdout)["results"]}, report
    except (ValueError, KeyError):
        pytest.fail(f"llm-comply printed no JSON report:\n{report}")


def test_llm_comply(serve) -> None:
    assert LLM_COMPLY.exists(), f"{LLM_COMPLY} not found: llm-comply==0.5.0 belongs to the test extra"
    base_url = serve("echo", "--model", REASONING_ALIAS)

    results, report = _llm_comply(base_url, MODEL)
    assert len(results) == 13, report  # the suite's size in 0.5.0: a new version needs a new look
    assert {k for k, r in results.items() if r["status"] == "skipped"} == {GATED}, report
    gated, gated_report = _llm_comply(base_url, REASONING_ALIAS, "-f", GATED)
    assert gated[GATED]["status"] == "passed", gated_report
    results[GATED] = gated[GATED]

    unexpected = {
        test_id: [e for e in r.get("errors", []) if not _allowed(test_id, e)]
        for test_id, r in results.items()
        if r["status"] == "failed"
    }
    unexpected = {k: v for k, v in unexpected.items() if v}
    assert not unexpected, f"failures outside the allow-list: {json.dumps(unexpected, indent=2)}\n{report}"

    # Every deliberate difference still shows: a stale entry means the guide's list is wrong.
    for test_id, errors in ALLOWED_FAILURES.items():
        assert results[test_id]["status"] == "failed", report
        assert set(results[test_id]["errors"]) == set(errors), report
    # The compaction checks run against POST /v1/responses/compact: they pass, with nothing to warn about.
    for test_id in ("compact-response", "compact-missing-model"):
        assert results[test_id]["status"] == "passed" and not results[test_id].get("errors"), report
        assert not results[test_id].get("warnings"), report
    seen = {e for r in results.values() for e in r.get("errors", [])}
    for prefix in ALLOWED_ANYWHERE:
        assert any(e.startswith(prefix) for e in seen), f"{prefix!r} no longer reported: update the allow-list"
