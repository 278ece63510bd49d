"""``check_stream(events)``: every protocol invariant a Responses event stream must satisfy.

The rules are those of responses-protocol.md §3-§6 and pitfalls.md B-D, checked on the wire-shaped dicts
the translator returns, then re-checked by the ``openai`` package itself: every event must validate
against its ``ResponseStreamEvent`` union and feed its stream accumulator (the machinery behind
``client.responses.stream()``) without an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter

__all__ = ["EVENT_ADAPTER", "check_stream"]

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)

LIFECYCLE = {
    "response.created",
    "response.queued",
    "response.in_progress",
    "response.completed",
    "response.incomplete",
    "response.failed",
}
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
ID_PREFIX = {
    "message": "msg_",
    "reasoning": "rs_",
    "function_call": "fc_",
    "custom_tool_call": "ctc_",
    "code_interpreter_call": "ci_",
    "web_search_call": "ws_",
    "file_search_call": "fs_",
    "mcp_call": "mcp_",
    "mcp_list_tools": "mcpl_",
    "mcp_approval_request": "mcpr_",
    "tool_search_call": "tsc_",
    "tool_search_output": "tso_",
    "compaction": "cmp_",
}
# Item types the API defines without a ``status`` (responses-protocol.md §4.4, §4.6).
STATUSLESS = {"mcp_list_tools", "mcp_approval_request", "compaction"}
# Fields openai 3.57 does not model, and why they are sent anyway: the nested half of the dual-form error
# event (responses-protocol.md §5.3), the function name on arguments.done (required by older openai-python),
# Response keys Open Responses requires (§6), and ``bytes`` on delta/done logprobs (§2.3: emit all four keys).
# Anything else would fail strict validators.
ALLOWED_EXTRAS = {
    ("Logprob", "bytes"),
    ("LogprobTopLogprob", "bytes"),
    ("ResponseErrorEvent", "error"),
    ("ResponseFunctionCallArgumentsDoneEvent", "name"),
    # custom_tool_call items carry ``status`` as the API sends them (its custom tools guide); 3.57 omits it.
    ("ResponseCustomToolCall", "status"),
    ("Response", "frequency_penalty"),
    ("Response", "presence_penalty"),
    ("Response", "store"),
    # vLLM's usage detail, reported by responses that run built-in tools (run/loop.py).
    ("OutputTokensDetails", "tool_output_tokens"),
}

# Short codes for the events of one item, so an item's whole event sequence can be matched by a regex.
_CODES = {
    "response.output_item.added": "A",
    "response.output_item.done": "Z",
    "response.content_part.added": "P",
    "response.content_part.done": "p",
    "response.output_text.delta": "t",
    "response.output_text.done": "T",
    "response.output_text.annotation.added": "a",
    "response.reasoning_text.delta": "r",
    "response.reasoning_text.done": "R",
    "response.reasoning_summary_part.added": "Q",
    "response.reasoning_summary_text.delta": "u",
    "response.reasoning_summary_text.done": "U",
    "response.reasoning_summary_part.done": "q",
    "response.function_call_arguments.delta": "f",
    "response.function_call_arguments.done": "F",
    "response.custom_tool_call_input.delta": "g",
    "response.custom_tool_call_input.done": "G",
    "response.code_interpreter_call.in_progress": "I",
    "response.code_interpreter_call_code.delta": "c",
    "response.code_interpreter_call_code.done": "C",
    "response.code_interpreter_call.interpreting": "N",
    "response.code_interpreter_call.completed": "K",
    "response.web_search_call.in_progress": "I",
    "response.web_search_call.searching": "S",
    "response.web_search_call.completed": "K",
    "response.file_search_call.in_progress": "I",
    "response.file_search_call.searching": "S",
    "response.file_search_call.completed": "K",
    "response.mcp_call.in_progress": "I",
    "response.mcp_call_arguments.delta": "m",
    "response.mcp_call_arguments.done": "M",
    "response.mcp_call.completed": "K",
    "response.mcp_call.failed": "X",
    "response.mcp_list_tools.in_progress": "I",
    "response.mcp_list_tools.completed": "K",
    "response.mcp_list_tools.failed": "X",
    "response.compaction.compacting": "W",
}
# (item type, final status) -> the item's event sequence (responses-protocol.md §4). A built-in call cut
# short may or may not have been made (interpreting/searching) before the cut; it never reports a result.
_GRAMMAR = {
    ("message", "completed"): "AP(t|ta+)*TpZ",
    ("message", "incomplete"): "AP(t|ta+)*TpZ",
    # The reasoning_text part streams; with summaries (reasoning.summary) the one summary part opens with the
    # first text, each piece of text is a summary delta then a reasoning_text delta, and the summary part
    # ends before the reasoning_text part.
    ("reasoning", "completed"): "AP(r*|Q(ur)+Uq)RpZ",
    ("reasoning", "incomplete"): "AP(r*|Q(ur)+Uq)RpZ",
    ("function_call", "completed"): "Af*FZ",
    ("function_call", "incomplete"): "Af*FZ",
    ("custom_tool_call", "completed"): "Ag*GZ",
    ("custom_tool_call", "incomplete"): "Ag*GZ",
    ("code_interpreter_call", "completed"): "AIc*CNKZ",
    ("code_interpreter_call", "failed"): "AIc*CNZ",
    ("code_interpreter_call", "incomplete"): "AIc*CN?Z",
    ("web_search_call", "completed"): "AISKZ",
    ("web_search_call", "failed"): "AISZ",
    ("web_search_call", "incomplete"): "AIS?Z",
    ("file_search_call", "completed"): "AISKZ",
    ("file_search_call", "failed"): "AISZ",
    ("file_search_call", "incomplete"): "AIS?Z",
    ("mcp_call", "completed"): "AIm*MKZ",
    ("mcp_call", "failed"): "AIm*MXZ",
    ("mcp_call", "incomplete"): "AIm*MZ",
    ("mcp_list_tools", None): "AI[KX]Z",
    ("mcp_approval_request", None): "AZ",  # added and done only, both with the whole arguments
    # No events of their own in the API: added when the arguments are complete, done with the search (or at once).
    ("tool_search_call", "completed"): "AZ",
    ("tool_search_call", "incomplete"): "AZ",
    ("tool_search_output", "completed"): "AZ",
    ("compaction", None): "AWZ",  # compacting while the summary is written; done carries the sealed summary
}
# Keys of the added item that the done item must repeat unchanged (identity and routing).
_STABLE_KEYS = (
    "id",
    "type",
    "call_id",
    "name",
    "namespace",
    "role",
    "phase",
    "server_label",
    "container_id",
    "approval_request_id",
    "execution",
)


def check_stream(events: Sequence[dict[str, Any]]) -> None:
    """Assert every invariant of one response's complete event stream (``response.created`` → terminal)."""
    assert events, "no events"
    _check_sequence_and_lifecycle(events)
    items = _check_items(events)
    _check_final_response(events, items)
    for event in events:
        _check_types(event)
    _check_openai_accumulator(events)


# ---------------------------------------------------------------------------------------------- lifecycle


def _check_sequence_and_lifecycle(events: Sequence[dict[str, Any]]) -> None:
    numbers = [event.get("sequence_number") for event in events]
    assert numbers == list(range(len(events))), f"sequence numbers are not 0,1,2…: {numbers}"
    for event in events:
        assert list(event)[:2] == ["type", "sequence_number"], f"event keys out of order: {list(event)}"
        for value in list(event.values())[2:]:
            assert not _has_key(value, "sequence_number"), f"nested sequence_number in {event['type']}"
    assert events[0]["type"] == "response.created", events[0]["type"]
    # Background mode (§5.1): created(queued), queued, then in_progress once work starts, unless the
    # response was cancelled while still queued.
    queued = events[0]["response"]["status"] == "queued"
    if queued:
        assert events[1]["type"] == "response.queued", [e["type"] for e in events[:3]]
        cancelled_early = events[2]["type"] == "response.incomplete"
        assert cancelled_early or events[2]["type"] == "response.in_progress", [e["type"] for e in events[:3]]
    else:
        assert len(events) >= 3 and events[1]["type"] == "response.in_progress", [e["type"] for e in events[:3]]
    terminals = [i for i, event in enumerate(events) if event["type"] in TERMINAL]
    assert terminals == [len(events) - 1], f"terminal events at {terminals} of {len(events)}"

    for i, event in enumerate(events):
        if event["type"] == "error":
            assert i == len(events) - 2 and events[-1]["type"] == "response.failed", "error not right before failed"
            # The dual form (responses-protocol.md §5.3): flat fields for openai-python, nested for the rest.
            nested = event["error"]
            assert isinstance(event["message"], str) and event["message"]
            assert nested == {
                "type": event["code"],
                "code": event["code"],
                "message": event["message"],
                "param": event["param"],
            }
        else:
            assert not event.get("error"), f"{event['type']} carries an error: {event['error']!r}"
    if events[-1]["type"] == "response.failed":
        assert events[-2]["type"] == "error", "response.failed without the error event before it"
        assert events[-1]["response"]["error"]["message"] == events[-2]["message"]

    lifecycle = [event for event in events if event["type"] in LIFECYCLE]
    first = lifecycle[0]["response"]
    changing = {"status", "output", "usage", "error", "incomplete_details", "completed_at"}
    for event in lifecycle:
        response = event["response"]
        assert response["id"] == first["id"], "lifecycle response identity changed"
        assert response["object"] == "response"
        echo = {k: v for k, v in response.items() if k not in changing}
        assert echo == {k: v for k, v in first.items() if k not in changing}, "the request echo changed mid-stream"
        assert "sequence_number" not in response
    starting = [event for event in lifecycle if event["type"] not in TERMINAL]
    for event in starting:
        response = event["response"]
        expected = "in_progress" if event["type"] == "response.in_progress" else ("queued" if queued else "in_progress")
        assert response["status"] == expected, (event["type"], response["status"])
        assert response["output"] == [] and response["usage"] is None and response["error"] is None
        assert response["completed_at"] is None
        assert isinstance(response["created_at"], int)


def _has_key(value: Any, key: str) -> bool:
    if isinstance(value, dict):
        return key in value or any(_has_key(v, key) for v in value.values())
    if isinstance(value, list):
        return any(_has_key(v, key) for v in value)
    return False


# ---------------------------------------------------------------------------------------------- items


def _check_items(events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nesting, indices, ids, per-item event grammar and delta/done agreement. Returns the done items."""
    added: list[dict[str, Any]] = []
    done: dict[int, dict[str, Any]] = {}
    trace: dict[int, list[dict[str, Any]]] = {}
    open_index: int | None = None
    open_part: int | None = None
    parts_seen: dict[int, int] = {}

    for event in events:
        kind = event["type"]
        if kind in LIFECYCLE or kind == "error":
            assert open_index is None, f"{kind} while item {open_index} is open"
            continue
        assert kind in _CODES, f"unexpected event type {kind}"
        index = event["output_index"]
        if kind == "response.output_item.added":
            assert open_index is None, f"item {len(added)} added while item {open_index} is still open"
            assert index == len(added), f"output_index {index} assigned out of order (expected {len(added)})"
            item = event["item"]
            assert item["type"] in ID_PREFIX, f"unexpected item type {item['type']}"
            assert item["id"].startswith(ID_PREFIX[item["type"]]), f"{item['type']} id {item['id']}"
            assert item["id"] not in {a["id"] for a in added}, f"item id {item['id']} reused"
            if item["type"] in STATUSLESS:
                assert "status" not in item, f"{item['type']} has no status in the API"
            else:
                assert item["status"] == "in_progress"
            _check_added_zero_values(item)
            added.append(item)
            trace[index] = [event]
            parts_seen[index] = 0
            open_index = index
            continue
        assert open_index is not None and index == open_index, f"{kind} for item {index}, open item is {open_index}"
        item = added[index]
        trace[index].append(event)
        if kind == "response.output_item.done":
            assert open_part is None, f"item {index} done with content part {open_part} open"
            done[index] = event["item"]
            open_index = None
            continue
        assert event["item_id"] == item["id"], f"{kind} item_id {event['item_id']} != {item['id']}"
        if kind == "response.content_part.added":
            assert open_part is None
            assert event["content_index"] == parts_seen[index], "content_index is not per item from 0"
            open_part = event["content_index"]
            parts_seen[index] += 1
        elif kind == "response.content_part.done":
            assert open_part == event["content_index"]
            open_part = None
        elif "content_index" in event:
            assert open_part is not None and event["content_index"] == open_part, f"{kind} outside its part"
    assert open_index is None, f"item {open_index} never done"
    assert sorted(done) == list(range(len(added))), "an added item has no done"

    calls = [
        item["call_id"] for item in added if item["type"] in ("function_call", "custom_tool_call", "tool_search_call")
    ]
    assert len(calls) == len(set(calls)), f"call_id reused: {calls}"
    items = [done[index] for index in range(len(added))]
    for index, item in enumerate(items):
        _check_item(added[index], item, trace[index])
    statuses = [item.get("status") for item in items]
    assert "incomplete" not in statuses[:-1], f"an incomplete item is not the last one: {statuses}"
    kinds = [item["type"] for item in items]
    if "mcp_approval_request" in kinds:
        assert kinds.index("mcp_approval_request") == len(kinds) - 1, f"an approval request is not last: {kinds}"
    for i, item in enumerate(items):
        if item["type"] == "tool_search_output":  # the server's own search answers the call right before it
            call = items[i - 1] if i else {}
            assert call.get("type") == "tool_search_call" and call.get("execution") == "server", kinds
            assert call["call_id"] == item["call_id"] and call["status"] == "completed", (call, item)
        elif item["type"] == "tool_search_call" and item["execution"] == "client":
            assert i == len(items) - 1, f"a client's tool search call is not the last item: {kinds}"
    compactions = [i for i, kind in enumerate(kinds) if kind == "compaction"]
    assert compactions in ([], [0]), f"a response compacts once, before anything else: {kinds}"
    listed = [i for i, kind in enumerate(kinds) if kind == "mcp_list_tools"]
    assert listed == list(range(len(listed))), f"mcp_list_tools items come before the model's items: {kinds}"
    return items


def _check_added_zero_values(item: dict[str, Any]) -> None:
    kind = item["type"]
    if kind == "message":
        assert item["content"] == [] and item["role"] == "assistant"
        assert item["phase"] in ("commentary", "final_answer")
    elif kind == "reasoning":
        assert item["content"] == [] and item["summary"] == []
    elif kind == "function_call":
        assert item["arguments"] == "" and item["call_id"].startswith("call_") and item["name"]
    elif kind == "custom_tool_call":
        assert item["input"] == "" and item["call_id"].startswith("call_") and item["name"]
    elif kind == "code_interpreter_call":
        assert item["code"] == "" and item["outputs"] is None and isinstance(item["container_id"], str)
    elif kind == "mcp_call":
        assert item["arguments"] == "" and item["server_label"] and item["name"]
    elif kind == "mcp_list_tools":
        assert item["tools"] == [] and item["server_label"] and "error" not in item
    elif kind == "mcp_approval_request":
        assert item["server_label"] and item["name"] and isinstance(item["arguments"], str)
    elif kind == "tool_search_call":
        assert item["call_id"].startswith("call_") and item["execution"] in ("server", "client")
        assert "arguments" in item
    elif kind == "tool_search_output":
        assert item["tools"] == [] and item["execution"] == "server" and item["call_id"].startswith("call_")
    elif kind == "compaction":
        assert item["encrypted_content"] == ""


def _check_item(added: dict[str, Any], item: dict[str, Any], trace: list[dict[str, Any]]) -> None:
    kind, status = item["type"], item.get("status")
    for key in _STABLE_KEYS:
        assert added.get(key) == item.get(key), f"{key} changed between added and done: {added} → {item}"
    grammar = _GRAMMAR.get((kind, status))
    assert grammar is not None, f"{kind} ended with status {status!r}"
    codes = "".join(_CODES[event["type"]] for event in trace)
    assert re.fullmatch(grammar, codes), f"{kind} ({status}) event sequence {codes!r} does not match {grammar!r}"

    summary = [event for event in trace if event["type"].startswith("response.reasoning_summary")]
    trace = [event for event in trace if not event["type"].startswith("response.reasoning_summary")]
    if summary:
        # Both streamed as the text came: each summary delta is the piece its reasoning_text delta carries.
        pieces = [e["delta"] for e in summary if e["type"] == "response.reasoning_summary_text.delta"]
        assert pieces == [e["delta"] for e in trace if e["type"] == "response.reasoning_text.delta"], (
            "the summary and the reasoning_text were not streamed piece by piece"
        )
    deltas = "".join(event["delta"] for event in trace if event["type"].endswith(".delta"))
    dones = [
        event
        for event in trace
        if event["type"].endswith(("_text.done", "_arguments.done", "_code.done", "_input.done"))
    ]
    if kind in ("message", "reasoning"):
        (text_done,) = dones
        (part_done,) = [event for event in trace if event["type"] == "response.content_part.done"]
        (part_added,) = [event for event in trace if event["type"] == "response.content_part.added"]
        assert text_done["text"] == deltas, "deltas do not add up to the done text"
        assert part_done["part"]["text"] == deltas and part_added["part"]["text"] == ""
        assert item["content"] == [part_done["part"]], "done item content differs from content_part.done"
        if kind == "message":
            assert part_done["part"]["type"] == "output_text"
            _check_annotations(trace, part_done["part"])
            delta_lps = [lp for event in trace if event["type"].endswith(".delta") for lp in event["logprobs"]]
            assert text_done["logprobs"] == delta_lps == part_done["part"]["logprobs"], "logprobs disagree"
            assert part_added["part"]["logprobs"] == []
            for lp in delta_lps:
                assert set(lp) == {"token", "bytes", "logprob", "top_logprobs"}, lp
        else:
            assert part_done["part"]["type"] == "reasoning_text"
            _check_summary(summary, item, deltas)
    elif kind == "function_call":
        (args_done,) = dones
        assert args_done["arguments"] == deltas == item["arguments"], "function arguments disagree"
        assert args_done.get("name", item["name"]) == item["name"]
    elif kind == "custom_tool_call":
        (input_done,) = dones
        assert input_done["input"] == deltas == item["input"], "custom tool input disagrees"
    elif kind == "code_interpreter_call":
        (code_done,) = dones
        assert code_done["code"] == deltas == item["code"], "code disagrees"
    elif kind == "mcp_call":
        (args_done,) = dones
        assert args_done["arguments"] == deltas == item["arguments"], "mcp arguments disagree"
        if status == "completed":
            assert isinstance(item.get("output"), str) and item.get("error") is None
        elif status == "failed":
            assert item.get("error") and item.get("output") is None
    elif kind == "web_search_call":
        assert item["action"]["type"] in ("search", "open_page", "find_in_page")
    elif kind == "file_search_call":
        assert all(isinstance(q, str) for q in item["queries"]) and added["results"] is None
        assert item["results"] is None or status == "completed", "results on a search that did not complete"
    elif kind == "mcp_list_tools":
        failed = codes[2] == "X"
        assert failed == isinstance(item.get("error"), str), "failed event and error field disagree"
        if failed:
            assert item["tools"] == [] and item["error"]
        for tool in item["tools"]:
            assert isinstance(tool["name"], str) and isinstance(tool["input_schema"], dict), tool
    elif kind == "mcp_approval_request":
        assert item == added, "an approval request's done item differs from its added item"
    elif kind == "tool_search_call":
        assert item["arguments"] == added["arguments"], "a tool search call's arguments changed after added"
    elif kind == "tool_search_output":
        assert isinstance(item["tools"], list) and all(isinstance(t, dict) and t.get("type") for t in item["tools"])
    elif kind == "compaction":
        assert set(item) == {"id", "type", "encrypted_content"} and isinstance(item["encrypted_content"], str)
        assert trace[1]["item_id"] == item["id"], "compacting names another item"


def _check_summary(events: list[dict[str, Any]], item: dict[str, Any], text: str) -> None:
    """A summarised reasoning item: one summary part (index 0) whose deltas add up to it, the reasoning's text."""
    if not events:
        assert item["summary"] == [], "a summary without summary events"
        return
    added, *deltas, text_done, part_done = events
    assert {e["summary_index"] for e in events} == {0}, "summary_index is not 0 for the one summary part"
    assert added["part"] == {"type": "summary_text", "text": ""}
    summary = "".join(e["delta"] for e in deltas)
    assert summary and text_done["text"] == summary == part_done["part"]["text"], "summary deltas do not add up"
    assert item["summary"] == [{"type": "summary_text", "text": summary}], "done item summary differs"
    assert summary == text, "the summary is not the reasoning's own text"
    assert part_done.get("status") == (None if item["status"] == "completed" else "incomplete")
    assert all(e["item_id"] == item["id"] for e in events)


def _check_annotations(trace: list[dict[str, Any]], part: dict[str, Any]) -> None:
    """Each annotation is announced once, in order, after the delta holding the text it covers (§2.3)."""
    announced = []
    text = ""
    for event in trace:
        if event["type"] == "response.output_text.delta":
            text += event["delta"]
        elif event["type"] == "response.output_text.annotation.added":
            assert event["annotation_index"] == len(announced), "annotation_index is not per part from 0"
            annotation = event["annotation"]
            if annotation.get("type") == "url_citation":
                start, end = annotation["start_index"], annotation["end_index"]
                assert 0 <= start <= end <= len(text), f"annotation {annotation} announced before its text"
                assert annotation["url"] and isinstance(annotation["title"], str)
            elif annotation.get("type") == "file_citation":
                # Where the removed marker stood: the text announced so far ends there.
                assert annotation["index"] == len(text), f"annotation {annotation} not where its marker was"
                assert annotation["file_id"] and isinstance(annotation["filename"], str)
            announced.append(annotation)
    assert part["annotations"] == announced, "the part's annotations are not the announced ones"


# ---------------------------------------------------------------------------------------------- response


def _check_final_response(events: Sequence[dict[str, Any]], items: list[dict[str, Any]]) -> None:
    last = events[-1]
    response = last["response"]
    status = last["type"].removeprefix("response.")
    if response["status"] == "cancelled":
        # A cancelled response ends with response.incomplete carrying status cancelled (Translator.cancel).
        assert status == "incomplete", last["type"]
        status = "cancelled"
    assert response["status"] == status
    assert response["output"] == items, "the final output is not the streamed items in output_index order"
    usage = response["usage"]
    numbers = [
        usage["input_tokens"],
        usage["input_tokens_details"]["cached_tokens"],
        usage["output_tokens"],
        usage["output_tokens_details"]["reasoning_tokens"],
        usage["total_tokens"],
    ]
    assert all(type(n) is int and n >= 0 for n in numbers), f"usage is not non-negative integers: {usage}"
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] <= usage["input_tokens"]
    assert usage["output_tokens_details"]["reasoning_tokens"] <= usage["output_tokens"], usage
    if status == "completed":
        assert isinstance(response["completed_at"], int)
        assert response["error"] is None and response["incomplete_details"] is None
        # A built-in call whose tool failed is a finished item; only a cut-short one is unfinished.
        assert all(item.get("status") in ("completed", "failed") or item["type"] in STATUSLESS for item in items), (
            "completed with unfinished items"
        )
    elif status == "incomplete":
        assert response["completed_at"] is None and response["error"] is None
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    elif status == "cancelled":
        assert response["completed_at"] is None and response["error"] is None
        assert response["incomplete_details"] is None
    else:
        assert response["completed_at"] is None and response["incomplete_details"] is None
        assert set(response["error"]) == {"code", "message"} and response["error"]["message"]


# ---------------------------------------------------------------------------------------------- openai


def _check_types(event: dict[str, Any]) -> None:
    model = EVENT_ADAPTER.validate_python(event)
    assert model.type == event["type"]
    extras = sorted(_extras(model))
    assert set(extras) <= ALLOWED_EXTRAS, f"{event['type']} has fields openai does not model: {extras}"


def _extras(model: BaseModel) -> set[tuple[str, str]]:
    found = {(type(model).__name__, key) for key in (model.__pydantic_extra__ or {})}
    for value in model.__dict__.values():
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, BaseModel):
                found |= _extras(child)
    return found


def _check_openai_accumulator(events: Sequence[dict[str, Any]]) -> None:
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(EVENT_ADAPTER.validate_python(event))
    if events[-1]["type"] != "response.completed":
        return
    final = events[-1]["response"]["output"]
    completed = state._completed_response
    assert completed is not None
    got = [_strip_parsed(item.to_dict()) for item in completed.output]
    assert got == final, "openai's accumulated final response differs from response.completed"
    # The accumulator's own snapshot is built from added items and deltas alone: it must agree too.
    snapshot = state._ResponseStreamState__current_snapshot  # type: ignore[attr-defined]
    for built, item in zip(snapshot.output, final, strict=True):
        assert built.id == item["id"]
        if item["type"] == "message":
            assert [c.text for c in built.content] == [c["text"] for c in item["content"]]
        elif item["type"] == "function_call":
            assert built.arguments == item["arguments"] and built.call_id == item["call_id"]


def _strip_parsed(value: Any) -> Any:
    """openai's parsed types add ``parsed``/``parsed_arguments``; the wire items don't have them."""
    if isinstance(value, dict):
        return {k: _strip_parsed(v) for k, v in value.items() if k not in ("parsed", "parsed_arguments")}
    if isinstance(value, list):
        return [_strip_parsed(v) for v in value]
    return value
