"""The checker itself: each kind of breakage other servers shipped (pitfalls.md B-D) must be caught."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from .helpers import FUNCTION_TOOL, translate
from .invariants import check_stream

Events = list[dict[str, Any]]

GOOD = translate(
    "<|channel|>analysis<|message|>Say hi.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
    '<|constrain|>json<|message|>{"city":"Paris"}<|call|>',
    tools=[FUNCTION_TOOL],
)


def where(events: Events, type_: str, nth: int = 0) -> dict[str, Any]:
    return [event for event in events if event["type"] == type_][nth]


def renumber(events: Events) -> None:
    for number, event in enumerate(events):
        event["sequence_number"] = number


def drop(type_: str) -> Callable[[Events], None]:
    def mutate(events: Events) -> None:
        events.remove(where(events, type_))
        renumber(events)

    return mutate


def set_field(type_: str, path: tuple[str, ...], value: Any, nth: int = 0) -> Callable[[Events], None]:
    def mutate(events: Events) -> None:
        target = where(events, type_, nth)
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def swap_items(events: Events) -> None:
    final = events[-1]["response"]["output"]
    final.reverse()


MUTATIONS = {
    "sequence gap": set_field("response.in_progress", ("sequence_number",), 2),
    "no in_progress": drop("response.in_progress"),
    "no terminal event": lambda events: events.pop(),
    "call_id changed at done (#12)": set_field("response.output_item.done", ("item", "call_id"), "call_x", 1),
    "item id changed at done (#15)": set_field("response.output_item.done", ("item", "id"), "rs_other"),
    "wrong id prefix (#14)": set_field("response.output_item.added", ("item", "id"), "msg_1"),
    "content_index not reset (#8)": set_field("response.reasoning_text.delta", ("content_index",), 1),
    "output_index off by one (#9)": set_field("response.function_call_arguments.delta", ("output_index",), 0),
    "reasoning done skipped (#18)": drop("response.reasoning_text.done"),
    "item never done (#40)": drop("response.output_item.done"),
    "delta lost (#1)": drop("response.function_call_arguments.delta"),
    "final output re-ordered (#13)": swap_items,
    "final output regenerated (#13)": set_field("response.completed", ("response", "output", 1, "call_id"), "call_new"),
    "usage not integers": set_field("response.completed", ("response", "usage", "output_tokens"), 3.0),
    "nested sequence_number (#21)": set_field("response.output_item.added", ("item", "sequence_number"), -1),
    "unknown event type (#22)": set_field("response.content_part.added", ("type",), "response.reasoning_part.added"),
    "function_call status null (#32)": set_field("response.output_item.done", ("item", "status"), None, 1),
    "response id changed": set_field("response.completed", ("response", "id"), "resp_other"),
    "error on a normal event": set_field("response.output_item.added", ("error",), {"message": "x"}),
}


def test_the_unbroken_stream_passes() -> None:
    check_stream(GOOD)


@pytest.mark.parametrize("mutation", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_breakage_is_caught(mutation: Callable[[Events], None]) -> None:
    events = copy.deepcopy(GOOD)
    mutation(events)
    with pytest.raises((AssertionError, ValueError, RuntimeError)):
        check_stream(events)
