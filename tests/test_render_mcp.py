"""Rendering MCP approvals: requests, answers, and the approved call the server runs before generating."""

from __future__ import annotations

from typing import Any

import pytest

from harmony_responses.render import PendingMcpCall, RenderError, render_request
from harmony_responses.vocab import load_encoding

DATE = "2025-08-05"
TOOL = {"type": "mcp", "server_label": "wiki", "server_url": "https://wiki.example/mcp"}
REQUEST = {
    "type": "mcp_approval_request",
    "id": "mcpr_1",
    "server_label": "wiki",
    "name": "ask",
    "arguments": '{"q":"a"}',
}
CALL = '<|start|>assistant to=wiki.ask<|channel|>analysis code<|message|>{"q":"a"}<|call|>'


def result(text: str) -> str:
    return f"<|start|>wiki.ask to=assistant<|channel|>analysis<|message|>{text}<|end|>"


def approval(approve: bool, **fields: Any) -> dict[str, Any]:
    return {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": approve, **fields}


def conversation(items: list[Any]) -> tuple[str, PendingMcpCall | None]:
    """The prompt after the system message, and the pending call."""
    rendered = render_request({"input": items, "tools": [TOOL]}, current_date=DATE)
    text = load_encoding().decode_utf8(rendered.token_ids)
    return text[text.index("<|start|>user") :], rendered.pending_mcp_call


USER = "<|start|>user<|message|>ask the wiki<|end|>"
THOUGHT = {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Ask."}]}


def test_approved_call_ends_the_prompt_and_is_pending() -> None:
    text, pending = conversation([{"role": "user", "content": "ask the wiki"}, THOUGHT, REQUEST, approval(True)])
    # The reasoning of the unfinished turn stays; no <|start|>assistant: the call's result comes first.
    assert text == USER + "<|start|>assistant<|channel|>analysis<|message|>Ask.<|end|>" + CALL
    assert pending == PendingMcpCall("wiki", "ask", '{"q":"a"}', "mcpr_1")


def test_approved_call_with_a_forced_tool_choice_has_no_prefill() -> None:
    request = {
        "input": [{"role": "user", "content": "ask the wiki"}, REQUEST, approval(True)],
        "tools": [TOOL, {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}],
        "tool_choice": {"type": "function", "name": "f"},
    }
    rendered = render_request(request, current_date=DATE)
    assert rendered.prefill_ids == [] and load_encoding().decode_utf8(rendered.token_ids).endswith(CALL)


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        (None, "The user declined this call, so it was not run."),
        ("  ", "The user declined this call, so it was not run."),
        ("Too risky.", "The user declined this call, so it was not run. Reason: Too risky."),
    ],
)
def test_declined_call_tells_the_model(reason: str | None, said: str) -> None:
    text, pending = conversation([{"role": "user", "content": "ask the wiki"}, REQUEST, approval(False, reason=reason)])
    assert text == USER + CALL + result(said) + "<|start|>assistant"
    assert pending is None


def test_unanswered_request_is_followed_by_a_note_that_it_did_not_run() -> None:
    text, _ = conversation(
        [{"role": "user", "content": "ask the wiki"}, REQUEST, {"role": "user", "content": "never mind"}]
    )
    note = "This call needed the user's approval, which was not given, so it was not run."
    assert text == USER + CALL + result(note) + "<|start|>user<|message|>never mind<|end|><|start|>assistant"


def test_request_that_ran_renders_as_its_mcp_call_only() -> None:
    ran = {
        "type": "mcp_call",
        "id": "mcp_2",
        "server_label": "wiki",
        "name": "ask",
        "arguments": '{"q":"a"}',
        "output": "42",
        "approval_request_id": "mcpr_1",
        "status": "completed",
    }
    final = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 42."}]}
    items = [{"role": "user", "content": "ask the wiki"}, REQUEST, approval(True, id="mcpra_1"), ran, final]
    text, pending = conversation([*items, {"role": "user", "content": "thanks"}])
    assert pending is None
    assert text == (
        USER
        + CALL
        + result("42")
        + "<|start|>assistant<|channel|>final<|message|>It is 42.<|end|>"
        + "<|start|>user<|message|>thanks<|end|><|start|>assistant"
    )


def test_request_is_rendered_where_it_is_answered() -> None:
    # A request answered later is placed with its answer, so nothing separates a call from its result.
    text, pending = conversation(
        [{"role": "user", "content": "ask the wiki"}, REQUEST, {"role": "user", "content": "no"}, approval(False)]
    )
    assert text.startswith(USER + "<|start|>user<|message|>no<|end|>" + CALL)
    assert pending is None


@pytest.mark.parametrize(
    ("items", "param", "fragment"),
    [
        ([approval(True)], "input[0].approval_request_id", "No mcp_approval_request with id 'mcpr_1'"),
        ([REQUEST, approval(False), approval(True)], "input[2].approval_request_id", "answered already"),
        ([REQUEST, approval(True), {"role": "user", "content": "and?"}], "input[1]", "must be the last input item"),
        ([REQUEST, {"type": "mcp_approval_response", "approve": True}], "input[1].approval_request_id", "Missing"),
        ([REQUEST, approval("yes")], "input[1].approve", "expected a boolean"),  # type: ignore[arg-type]
        ([{**REQUEST, "name": ""}], "input[0].name", "Missing required parameter"),
        ([{**REQUEST, "id": None}], "input[0].id", "Missing required parameter"),
    ],
)
def test_approval_errors(items: list[Any], param: str, fragment: str) -> None:
    with pytest.raises(RenderError) as info:
        render_request({"input": items, "tools": [TOOL]}, current_date=DATE)
    assert info.value.param == param and fragment in info.value.message


def test_stored_items_name_previous_response_id() -> None:
    with pytest.raises(RenderError) as info:
        render_request(
            {"input": [approval(True)], "tools": [TOOL]},
            current_date=DATE,
            prior_items=[{**REQUEST, "server_label": None}],
        )
    assert info.value.param == "previous_response_id"
