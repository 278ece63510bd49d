"""Reasoning summaries (``reasoning.summary``): gpt-oss writes none, so a reasoning item's own text is its summary.

Asked for, the text streams both as the item's one summary part (``summary_index`` 0, the API's summary events
in the API's order) and as its ``reasoning_text`` part, each piece as it is written (a client showing the raw
chain of thought, Codex with ``show_raw_agent_reasoning``, gets it as soon as one showing summaries does); not
asked for, nothing changes (``summary: []``).
"""

from __future__ import annotations

from typing import Any

from .helpers import make_translator, tokens
from .invariants import check_stream

COMPLETION = "<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>"


def run(completion: str, finish: str = "stop", *, summaries: bool = True, chunk: int = 1) -> list[dict[str, Any]]:
    translator = make_translator(summaries=summaries)
    ids = tokens(completion)
    events: list[dict[str, Any]] = []
    for start in range(0, len(ids), chunk):
        translator.receive_tokens(ids[start : start + chunk])
        events += translator.events()
    translator.receive_end(finish)  # type: ignore[arg-type]
    events += translator.events()
    check_stream(events)
    return events


def test_reasoning_streams_its_summary_and_its_text_piece_by_piece() -> None:
    events = run(COMPLETION)
    reasoning = [e for e in events if e.get("item_id") == "rs_1" or e.get("item", {}).get("id") == "rs_1"]
    ref = {"item_id": "rs_1", "output_index": 0}
    assert [{k: v for k, v in e.items() if k != "sequence_number"} for e in reasoning[1:]] == [
        {"type": "response.content_part.added", **ref, "content_index": 0,
         "part": {"type": "reasoning_text", "text": ""}},
        {"type": "response.reasoning_summary_part.added", **ref, "summary_index": 0,
         "part": {"type": "summary_text", "text": ""}},
        {"type": "response.reasoning_summary_text.delta", **ref, "summary_index": 0, "delta": "Add"},
        {"type": "response.reasoning_text.delta", **ref, "content_index": 0, "delta": "Add"},
        {"type": "response.reasoning_summary_text.delta", **ref, "summary_index": 0, "delta": " them"},
        {"type": "response.reasoning_text.delta", **ref, "content_index": 0, "delta": " them"},
        {"type": "response.reasoning_summary_text.delta", **ref, "summary_index": 0, "delta": "."},
        {"type": "response.reasoning_text.delta", **ref, "content_index": 0, "delta": "."},
        {"type": "response.reasoning_summary_text.done", **ref, "summary_index": 0, "text": "Add them."},
        {"type": "response.reasoning_summary_part.done", **ref, "summary_index": 0,
         "part": {"type": "summary_text", "text": "Add them."}},
        {"type": "response.reasoning_text.done", **ref, "content_index": 0, "text": "Add them."},
        {"type": "response.content_part.done", **ref, "content_index": 0,
         "part": {"type": "reasoning_text", "text": "Add them."}},
        {"type": "response.output_item.done", "output_index": 0, "item": {
            "id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Add them."}],
            "content": [{"type": "reasoning_text", "text": "Add them."}], "status": "completed"}},
    ]  # fmt: skip
    final = events[-1]["response"]["output"][0]
    assert final["summary"] == [{"type": "summary_text", "text": "Add them."}]


def test_chunking_does_not_change_summary_events() -> None:
    assert run(COMPLETION, chunk=1) == run(COMPLETION, chunk=5) == run(COMPLETION, chunk=1000)


def test_not_asked_for_summary_stays_empty() -> None:
    events = run(COMPLETION, summaries=False)
    assert not [e for e in events if "summary" in e["type"]]
    assert events[-1]["response"]["output"][0]["summary"] == []


def test_reasoning_cut_short_ends_its_summary_part_incomplete() -> None:
    events = run("<|channel|>analysis<|message|>Thinking ab", "length")
    (part_done,) = [e for e in events if e["type"] == "response.reasoning_summary_part.done"]
    assert part_done["status"] == "incomplete" and part_done["part"]["text"] == "Thinking ab"
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"


def test_empty_reasoning_has_no_summary() -> None:
    events = run("<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>4<|return|>")
    assert not [e for e in events if "summary" in e["type"]]
    assert events[-1]["response"]["output"][0]["summary"] == []
