"""Tool search calls in the translator: ``functions.tool_search`` becomes a ``tool_search_call``, however chunked.

- Client-run (``execution: "client"``): added and done at once when the call is complete; it ends the response.
- Server-run: added with its whole arguments when complete, the translator waits for the search
  (``AWAIT_TOOL``), then the call is done and a ``tool_search_output`` item lists the loaded tools.
- Cut short: a call never announced is dropped (its arguments are unfinished); one announced ends incomplete.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harmony_responses.translate import AWAIT_TOOL, ItemKind

from .helpers import FUNCTION_TOOL, make_translator, tokens
from .invariants import check_stream

CALL = (
    "<|channel|>analysis<|message|>Look for a weather tool.<|end|><|start|>assistant"
    '<|channel|>commentary to=functions.tool_search <|constrain|>json<|message|>{"query": "weather", "limit": 2}'
)
ANSWER = "<|channel|>final<|message|>Sunny.<|return|>"
CLIENT = [{"type": "tool_search", "execution": "client"}]
SERVER = [{"type": "tool_search"}, dict(FUNCTION_TOOL, defer_loading=True)]


def _feed(translator: Any, ids: list[int], cuts: list[int]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    at = 0
    for cut in [*cuts, len(ids)]:
        translator.receive_tokens(ids[at : at + cut])
        events.extend(translator.events())
        at += cut
        if at >= len(ids):
            break
    return events


def _server_run(cuts: list[int]) -> list[dict[str, Any]]:
    translator = make_translator(SERVER)
    events = _feed(translator, tokens(CALL + "<|call|>"), cuts)
    assert translator.next_event() is AWAIT_TOOL
    call = translator.pending_tool_call
    assert call is not None and call.kind is ItemKind.TOOL_SEARCH_CALL and call.namespace == "functions"
    translator.send_tool_result(tools=[dict(FUNCTION_TOOL, defer_loading=True)])
    events += translator.events()
    translator.start_engine_call()
    events += _feed(translator, tokens(ANSWER), cuts)
    translator.receive_end("stop")
    return events + translator.events()


def _client_run(cuts: list[int]) -> list[dict[str, Any]]:
    translator = make_translator(CLIENT)
    events = _feed(translator, tokens(CALL + "<|call|>"), cuts)
    translator.receive_end("stop")
    return events + translator.events()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 9), max_size=40))
def test_the_same_events_in_any_chunking(cuts: list[int]) -> None:
    for run in (_server_run, _client_run):
        whole, chunked = run([]), run(cuts)
        check_stream(chunked)
        assert chunked == whole


def test_a_server_search_call_then_its_output() -> None:
    events = _server_run([])
    output = events[-1]["response"]["output"]
    assert [i["type"] for i in output] == ["reasoning", "tool_search_call", "tool_search_output", "message"]
    call, loaded = output[1], output[2]
    assert call == {
        "id": call["id"],
        "type": "tool_search_call",
        "status": "completed",
        "call_id": call["call_id"],
        "execution": "server",
        "arguments": {"query": "weather", "limit": 2},
    }
    assert loaded["call_id"] == call["call_id"] and loaded["tools"][0]["name"] == "get_weather"
    added = next(
        e["item"]
        for e in events
        if e["type"] == "response.output_item.added" and e["item"] == dict(call, status="in_progress")
    )
    assert added["arguments"] == call["arguments"]  # announced whole: the API has no argument deltas for it


def test_a_client_search_call_ends_the_response() -> None:
    events = _client_run([])
    assert events[-1]["type"] == "response.completed"
    call = events[-1]["response"]["output"][-1]
    assert (call["type"], call["execution"], call["status"]) == ("tool_search_call", "client", "completed")


@pytest.mark.parametrize("tools", [CLIENT, SERVER])
def test_a_call_cut_short_is_never_shown(tools: list[dict[str, Any]]) -> None:
    translator = make_translator(tools)
    translator.receive_tokens(tokens(CALL[: -len('"limit": 2}')]))
    translator.receive_end("length")
    events = translator.events()
    check_stream(events)
    assert [i["type"] for i in events[-1]["response"]["output"]] == ["reasoning"]
    assert events[-1]["response"]["status"] == "incomplete"


def test_a_server_call_cancelled_during_the_search_ends_incomplete() -> None:
    translator = make_translator(SERVER)
    translator.receive_tokens(tokens(CALL + "<|call|>"))
    events = translator.events()
    translator.cancel()
    events += translator.events()
    check_stream(events)
    call = events[-1]["response"]["output"][-1]
    assert (call["type"], call["status"]) == ("tool_search_call", "incomplete")
