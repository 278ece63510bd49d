"""The group-commit writer merges a round's small appends into one row per response, keeping every order."""

from __future__ import annotations

from harmony_responses.store import AppendEvents, UpdateResponse
from harmony_responses.store._writer import merge_appends


def append(response: str, first: int, *events: str) -> AppendEvents:
    return AppendEvents(response_id=response, first_seq=first, data=[e.encode() for e in events])


def test_contiguous_appends_of_a_response_become_one_even_when_streams_interleave() -> None:
    ops = [append("a", 0, "a0"), append("b", 5, "b5"), append("a", 1, "a1", "a2"), append("b", 6, "b6")]
    assert merge_appends(ops) == [append("a", 0, "a0", "a1", "a2"), append("b", 5, "b5", "b6")]


def test_a_gap_or_another_kind_of_op_starts_a_new_row() -> None:
    update = UpdateResponse(id="a", status="in_progress", response=b"{}", updated_at=0.0)
    ops = [append("a", 0, "a0"), append("a", 2, "a2"), update, append("a", 3, "a3")]
    merged = merge_appends(ops)
    assert merged == [append("a", 0, "a0"), append("a", 2, "a2"), update, append("a", 3, "a3")]
