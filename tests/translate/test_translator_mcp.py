"""The translator's MCP items beyond ``mcp_call``: listed tools, approval requests, approved calls.

- ``add_mcp_list_tools``: a whole ``mcp_list_tools`` item (added with ``tools: []`` → ``in_progress`` →
  ``completed``/``failed`` → done with the tools or the error), before the model's first item.
- A call to an MCP tool that needs approval becomes an ``mcp_approval_request``: added and done only, both
  with the whole arguments, at the call; it ends the response (``response.completed``, last item).
- ``start_mcp_call``: an approved call run before generation, with ``approval_request_id`` on the item.
"""

from __future__ import annotations

from typing import Any

import pytest

from harmony_responses.translate import AWAIT_TOOL, ItemKind, LocalProtocolError, RecipientMap, State, Target
from harmony_responses.translate._recipients import ApprovalRule

from .helpers import MCP_TOOL, make_translator, tokens
from .invariants import check_stream
from .test_translator_golden import Expected, assert_stream, usage

APPROVAL_TOOL = {"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.deepwiki.com/mcp"}
LISTED = [
    {
        "name": "ask_question",
        "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
        "description": "Ask about a repository.",
        "annotations": {"readOnlyHint": True},
    },
    {"name": "delete_wiki", "input_schema": {"type": "object"}, "description": None, "annotations": None},
]
ARGS = '{"question":"What is Harmony?"}'
CALL = f"<|channel|>commentary to=deepwiki.ask_question <|constrain|>json<|message|>{ARGS}<|call|>"
ANSWER = "<|channel|>final<|message|>Done.<|return|>"


def run(translator: Any, text: str, finish: str = "stop") -> list[dict[str, Any]]:
    translator.receive_tokens(tokens(text))
    translator.receive_end(finish)
    return translator.events()


# ---------------------------------------------------------------------------------------------- mcp_list_tools


def test_list_tools_item_then_the_answer() -> None:
    translator = make_translator([MCP_TOOL])
    done = translator.add_mcp_list_tools("deepwiki", tools=LISTED)
    events = translator.events() + run(translator, ANSWER)

    e = Expected()
    added = {"id": "mcpl_1", "type": "mcp_list_tools", "server_label": "deepwiki", "tools": []}
    e.added(added)
    e.item_event("response.mcp_list_tools.in_progress", "mcpl_1")
    e.item_event("response.mcp_list_tools.completed", "mcpl_1")
    e.done({**added, "tools": LISTED})
    e.message("msg_2", ["Done", "."])
    assert done == {**added, "tools": LISTED}
    assert_stream(events, e.end("response.completed", usage(output=len(tokens(ANSWER)))))


def test_failed_listing_carries_the_error_and_no_tools() -> None:
    translator = make_translator([MCP_TOOL])
    translator.add_mcp_list_tools("deepwiki", error="Error retrieving tool list from MCP server: 'deepwiki'")
    translator.add_mcp_list_tools("other", tools=[])
    events = translator.events() + run(translator, ANSWER)
    check_stream(events)
    types = [e["type"] for e in events[2:10]]
    assert types == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.failed",
        "response.output_item.done",
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]
    failed = events[5]["item"]
    assert failed["tools"] == [] and failed["error"].startswith("Error retrieving")
    assert "error" not in events[9]["item"]
    assert [item["type"] for item in events[-1]["response"]["output"]] == ["mcp_list_tools"] * 2 + ["message"]


def test_list_tools_only_between_items() -> None:
    translator = make_translator([MCP_TOOL])
    translator.receive_tokens(tokens("<|channel|>final<|message|>Hel"))
    translator.events()
    with pytest.raises(LocalProtocolError, match="only between items"):
        translator.add_mcp_list_tools("deepwiki", tools=[])


# ---------------------------------------------------------------------------------------------- approval requests


@pytest.mark.parametrize("ending", ["<|call|>", "<|end|>", ""])
def test_call_needing_approval_is_a_request_that_ends_the_response(ending: str) -> None:
    translator = make_translator([APPROVAL_TOOL])
    thought = "<|channel|>analysis<|message|>Ask it.<|end|><|start|>assistant"
    header = "<|channel|>commentary to=deepwiki.ask_question <|constrain|>json<|message|>"
    # Whatever follows the request in the same engine call is not the assistant's to show.
    tail = "<|start|>assistant<|channel|>final<|message|>Ignored<|return|>" if ending == "<|end|>" else ""
    completion = thought + header + ARGS + ending + tail
    events = run(translator, completion)
    assert translator.pending_tool_call is None

    e = Expected()
    e.reasoning("rs_1", ["Ask", " it", "."])
    request = {
        "id": "mcpr_2",
        "type": "mcp_approval_request",
        "server_label": "deepwiki",
        "name": "ask_question",
        "arguments": ARGS,
    }
    e.added(request)
    e.done(request)
    # reasoning tokens: the analysis header and content, its <|end|>
    reasoning = len(tokens("<|channel|>analysis<|message|>Ask it.<|end|>"))
    assert_stream(events, e.end("response.completed", usage(output=len(tokens(completion)), reasoning=reasoning)))


def test_request_cut_short_is_dropped_and_the_response_is_incomplete() -> None:
    translator = make_translator([APPROVAL_TOOL])
    events = run(translator, '<|channel|>commentary to=deepwiki.ask_question code<|message|>{"quest', "length")
    check_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["output"] == []


def test_engine_error_inside_a_request_fails_without_showing_it() -> None:
    translator = make_translator([APPROVAL_TOOL])
    translator.receive_tokens(tokens("<|channel|>commentary to=deepwiki.ask_question code<|message|>{"))
    translator.receive_end("error", "boom")
    events = translator.events()
    check_stream(events)
    assert [e["type"] for e in events[2:]] == ["error", "response.failed"]


@pytest.mark.parametrize(
    ("require_approval", "tool", "kind"),
    [
        (None, "ask_question", ItemKind.MCP_APPROVAL_REQUEST),
        ("always", "ask_question", ItemKind.MCP_APPROVAL_REQUEST),
        ("never", "ask_question", ItemKind.MCP_CALL),
        ({"never": {"tool_names": ["ask_question"]}}, "ask_question", ItemKind.MCP_CALL),
        ({"never": {"tool_names": ["ask_question"]}}, "delete_wiki", ItemKind.MCP_APPROVAL_REQUEST),
        ({"never": {"read_only": True}}, "ask_question", ItemKind.MCP_CALL),
        ({"never": {"read_only": True}}, "delete_wiki", ItemKind.MCP_APPROVAL_REQUEST),
        ({"never": {"read_only": True, "tool_names": ["delete_wiki"]}}, "ask_question", ItemKind.MCP_APPROVAL_REQUEST),
        ({"always": {"read_only": False}, "never": {"read_only": True}}, "delete_wiki", ItemKind.MCP_APPROVAL_REQUEST),
        # A tool matched by both filters keeps the safe answer; unmatched tools keep the default (approval).
        (
            {"always": {"tool_names": ["ask_question"]}, "never": {"tool_names": ["ask_question"]}},
            "ask_question",
            ItemKind.MCP_APPROVAL_REQUEST,
        ),
        ({"always": {"tool_names": ["delete_wiki"]}}, "ask_question", ItemKind.MCP_APPROVAL_REQUEST),
        ({}, "ask_question", ItemKind.MCP_APPROVAL_REQUEST),
        # An undeclared tool of the server follows the same rule.
        ("never", "not_listed", ItemKind.MCP_CALL),
        (None, "not_listed", ItemKind.MCP_APPROVAL_REQUEST),
    ],
)
def test_require_approval_decides_the_item(require_approval: Any, tool: str, kind: ItemKind) -> None:
    declared = {**APPROVAL_TOOL, "require_approval": require_approval, "_mcp_tools": LISTED}
    recipients = RecipientMap.from_tools([declared])
    assert recipients.resolve(f"deepwiki.{tool}") == Target(kind, tool, "deepwiki")
    assert recipients.resolve(f"functions.deepwiki.{tool}") == Target(kind, tool, "deepwiki")


def test_approval_rule_ignores_malformed_filters() -> None:
    assert ApprovalRule.from_tool({"always": "x", "never": {"tool_names": "y"}}) == ApprovalRule()
    assert ApprovalRule.from_tool({"never": {"tool_names": ["a", 3]}}).requires("a") is False
    assert ApprovalRule.from_tool("bogus") == ApprovalRule()
    # read_only without listed tools selects nothing: the rule cannot know the hints.
    assert ApprovalRule.from_tool({"never": {"read_only": True}}).requires("ask_question") is True


# ---------------------------------------------------------------------------------------------- approved calls


def test_approved_call_runs_before_generation_then_the_model_answers() -> None:
    translator = make_translator([APPROVAL_TOOL])
    translator.add_mcp_list_tools("deepwiki", tools=LISTED)
    call = translator.start_mcp_call("deepwiki", "ask_question", ARGS, approval_request_id="mcpr_prev")
    assert translator.pending_tool_call == call
    assert (call.kind, call.namespace, call.name, call.arguments, call.channel) == (
        ItemKind.MCP_CALL,
        "deepwiki",
        "ask_question",
        ARGS,
        "analysis",
    )
    events = translator.events()
    assert translator.next_event() is AWAIT_TOOL
    translator.send_tool_result(output="A format.")
    assert translator.state is State.READY
    translator.start_engine_call()
    events += run(translator, ANSWER)

    e = Expected()
    listed = {"id": "mcpl_1", "type": "mcp_list_tools", "server_label": "deepwiki", "tools": []}
    e.added(listed)
    e.item_event("response.mcp_list_tools.in_progress", "mcpl_1")
    e.item_event("response.mcp_list_tools.completed", "mcpl_1")
    e.done({**listed, "tools": LISTED})
    added = {
        "id": "mcp_2",
        "type": "mcp_call",
        "status": "in_progress",
        "server_label": "deepwiki",
        "name": "ask_question",
        "arguments": "",
        "approval_request_id": "mcpr_prev",
    }
    e.added(added)
    e.item_event("response.mcp_call.in_progress", "mcp_2")
    e.item_event("response.mcp_call_arguments.delta", "mcp_2", delta=ARGS)
    e.item_event("response.mcp_call_arguments.done", "mcp_2", arguments=ARGS)
    e.item_event("response.mcp_call.completed", "mcp_2")
    e.done({**added, "status": "completed", "arguments": ARGS, "output": "A format."})
    e.message("msg_3", ["Done", "."])
    # The approved call's arguments were written by the model in an earlier response: not output here.
    assert_stream(events, e.end("response.completed", usage(output=len(tokens(ANSWER)))))


def test_approved_call_that_fails_then_the_model_answers() -> None:
    translator = make_translator([APPROVAL_TOOL])
    translator.start_mcp_call("deepwiki", "delete_wiki", "{}", approval_request_id="mcpr_prev")
    translator.send_tool_result(error={"type": "mcp_protocol_error", "code": -32602, "message": "Unknown tool"})
    translator.start_engine_call()
    events = translator.events() + run(translator, ANSWER)
    check_stream(events)
    call = events[-1]["response"]["output"][0]
    assert call["status"] == "failed" and call["error"]["type"] == "mcp_protocol_error"
    assert call["approval_request_id"] == "mcpr_prev" and "output" not in call


def test_start_mcp_call_refused_while_a_call_waits() -> None:
    translator = make_translator([MCP_TOOL])
    translator.receive_tokens(tokens(CALL))
    translator.events()
    assert translator.pending_tool_call is not None
    with pytest.raises(LocalProtocolError):
        translator.start_mcp_call("deepwiki", "ask_question", ARGS)
