"""``run.recovery.closing_events``: a log cut anywhere (its process died) is closed into a valid stream.

The logs are the translator's own events for real completions, cut after every event; the closed stream must
pass every invariant a live one does (translate/invariants.py), with the open item's text as streamed.
"""

from __future__ import annotations

from typing import Any

import pytest

from harmony_responses.run.recovery import closing_events
from translate.helpers import make_translator, tokens
from translate.invariants import check_stream

REASONING_THEN_ANSWER = (
    "<|channel|>analysis<|message|>Add them up.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>"
)


def _batches(completion: str, *, summaries: bool) -> list[list[dict[str, Any]]]:
    """The translator's events for ``completion`` fed a token at a time, as the batches a run publishes (a
    batch is logged whole: the store's writer takes every event published, so a log ends between batches)."""
    translator = make_translator(summaries=summaries)
    batches = [translator.events()]
    for token in tokens(completion):
        translator.receive_tokens([token])
        batches.append(translator.events())
    translator.receive_end("stop")
    batches.append(translator.events())
    return [batch for batch in batches if batch]


@pytest.mark.parametrize("summaries", [False, True], ids=["plain", "summaries"])
def test_a_log_cut_after_any_batch_closes_into_a_valid_stream(summaries: bool) -> None:
    batches = _batches(REASONING_THEN_ANSWER, summaries=summaries)
    for cut in range(1, len(batches) - 1):
        kept = [event for batch in batches[:cut] for event in batch]
        closing, final = closing_events(kept, kept[0]["response"], status="failed")
        check_stream(kept + closing)
        if not final["output"]:
            continue
        reasoning = final["output"][0]
        streamed = "".join(e["delta"] for e in kept if e["type"] == "response.reasoning_text.delta")
        assert reasoning["content"] == [{"type": "reasoning_text", "text": streamed}]
        if summaries and streamed:
            assert reasoning["summary"] == [{"type": "summary_text", "text": streamed}]
