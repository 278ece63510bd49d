"""The compiled run of plain text tokens (translate/_text_run.c) against the translator's Python path.

The property tests (test_translator_properties.py) hold the two to the same events for random streams and
chunkings; here, what they may miss: the run is really taken in C where it is built, across characters split
over tokens, logprobs and prefill. (What start-up says of it: tests/test_compiled.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harmony_responses.tokens import TokenLogprob
from harmony_responses.translate import _translator

from .helpers import ALL_TOOLS, make_translator, tokens

# Reasoning and an answer whose text has characters split over several tokens (the parrot: three; 龘: two),
# which the decoder holds until whole: the run stops at them and goes on after.
COMPLETION = (
    "<|channel|>analysis<|message|>Thinking: 🦜 then 龘龘, then words and more words."
    "<|end|><|start|>assistant<|channel|>final<|message|>Hello 🦜🦜 there, 龘 how are you doing today?<|return|>"
)


@pytest.fixture
def runs() -> Iterator[list[int]]:
    """The compiled run, counting the tokens each call took (skipped where it is not built)."""
    compiled = _translator.TEXT_RUN
    if compiled is None:
        pytest.skip("the compiled text run is not built here")
    taken: list[int] = []

    def counted(*args: Any) -> int:
        n = compiled(*args)
        taken.append(n)
        return n

    _translator.TEXT_RUN = counted
    try:
        yield taken
    finally:
        _translator.TEXT_RUN = compiled


def _events(ids: list[int], size: int, *, logprobs: bool = False, prefill: list[int] | None = None) -> list[Any]:
    t = make_translator(ALL_TOOLS, logprobs=logprobs)
    out = t.events()
    if prefill:
        t.receive_prefill(prefill)
    for start in range(0, len(ids), size):
        chunk = ids[start : start + size]
        lps = [TokenLogprob(-0.5, ()) if i % 3 == 0 else None for i in chunk] if logprobs else None
        t.receive_tokens(chunk, lps)  # type: ignore[arg-type]  # None: no logprob for that token
        out += t.events()
    t.receive_end("stop")
    out += t.events()
    assert t.closed
    return out


def _pure(ids: list[int], size: int, **kwargs: Any) -> list[Any]:
    compiled, _translator.TEXT_RUN = _translator.TEXT_RUN, None
    try:
        return _events(ids, size, **kwargs)
    finally:
        _translator.TEXT_RUN = compiled


@pytest.mark.parametrize("size", [2, 5, 64])
def test_a_run_is_taken_in_c_with_the_events_python_makes(runs: list[int], size: int) -> None:
    ids = tokens(COMPLETION)
    events = _events(ids, size)
    assert sum(runs) > 0, runs  # some of the text went through the compiled run (never a run's first token)
    assert events == _pure(ids, size)
    usage = events[-1]["response"]["usage"]
    assert usage["output_tokens"] == len(ids)
    assert usage["output_tokens_details"]["reasoning_tokens"] == len(tokens(COMPLETION.split("<|end|>")[0])) + 1


def test_tokens_with_logprobs_and_prefill_stay_with_python(runs: list[int]) -> None:
    ids = tokens(COMPLETION)
    events = _events(ids, 8, logprobs=True)
    assert events == _pure(ids, 8, logprobs=True)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert all("logprobs" in e for e in deltas)
    # A forced header written by the prompt (prefill) then generated text: the prefill is not counted.
    head = tokens("<|channel|>final<|message|>")
    body = tokens("Hello there, 龘 how are you doing today?<|return|>")
    assert _events(body, 4, prefill=head) == _pure(body, 4, prefill=head)
    assert sum(runs) > 0
