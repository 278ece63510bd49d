"""Golden tests: whole event streams for every item type and every ending, written from the protocol reference.

Each test feeds the token ids of a Harmony completion (openai-harmony's encoder, special tokens written
literally) and compares the complete list of event dicts — types, sequence numbers, ids, indices and
payloads — with the sequence responses-protocol.md §4-§5 prescribes. Deltas are one per token, as the token
ids split the text (checked against the o200k vocabulary when the tests were written).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from harmony_responses.tokens import TokenLogprob
from harmony_responses.translate import (
    AWAIT_TOOL,
    DONE,
    NEED_TOKENS,
    ItemKind,
    LocalProtocolError,
    State,
    ToolCall,
    Translator,
)

from .helpers import (
    ALL_TOOLS,
    CODE_INTERPRETER_TOOL,
    COMPLETED_AT,
    CREATED_AT,
    FUNCTION_TOOL,
    MCP_TOOL,
    NAMESPACE_TOOL,
    VOCAB,
    WEB_SEARCH_TOOL,
    id_factory,
    make_translator,
    tokens,
    translate,
)
from .invariants import check_stream

# responses-protocol.md §6, with the ids and clock of the helpers (the translator's own default echo).
BASE_RESPONSE: dict[str, Any] = {
    "id": "resp_0",
    "object": "response",
    "created_at": CREATED_AT,
    "completed_at": None,
    "status": "in_progress",
    "background": False,
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "model": "gpt-oss",
    "output": [],
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "conversation": None,
    "prompt_cache_key": None,
    "reasoning": {"effort": "medium", "summary": None},
    "safety_identifier": None,
    "service_tier": "default",
    "store": True,
    "temperature": 1.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "top_logprobs": 0,
    "text": {"format": {"type": "text"}, "verbosity": "medium"},
    "tool_choice": "auto",
    "tools": [],
    "truncation": "disabled",
    "usage": None,
    "user": None,
    "metadata": {},
}


def usage(output: int, reasoning: int = 0, input: int = 0, cached: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output,
    }


class Expected:
    """Builds an expected stream from the protocol's per-item sequences, numbering events as it goes."""

    def __init__(self, response: dict[str, Any] | None = None) -> None:
        self.response = response or BASE_RESPONSE
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []
        self.add("response.created", response=self.response)
        self.add("response.in_progress", response=self.response)

    def add(self, type_: str, **fields: Any) -> None:
        self.events.append({"type": type_, "sequence_number": len(self.events), **fields})

    @property
    def index(self) -> int:
        """The output_index of the item being built (the next one, before ``added``)."""
        return len(self.output)

    def added(self, item: dict[str, Any]) -> None:
        self.add("response.output_item.added", output_index=self.index, item=item)

    def item_event(self, type_: str, item_id: str, **fields: Any) -> None:
        self.add(type_, item_id=item_id, output_index=self.index, **fields)

    def done(self, item: dict[str, Any]) -> None:
        self.add("response.output_item.done", output_index=self.index, item=item)
        self.output.append(item)

    def reasoning(self, item_id: str, deltas: list[str], status: str = "completed") -> None:
        text = "".join(deltas)
        self.added({"id": item_id, "type": "reasoning", "summary": [], "content": [], "status": "in_progress"})
        self.item_event("response.content_part.added", item_id, content_index=0, part=reasoning_part(""))
        for delta in deltas:
            self.item_event("response.reasoning_text.delta", item_id, content_index=0, delta=delta)
        self.item_event("response.reasoning_text.done", item_id, content_index=0, text=text)
        self.item_event("response.content_part.done", item_id, content_index=0, part=reasoning_part(text))
        self.done(
            {"id": item_id, "type": "reasoning", "summary": [], "content": [reasoning_part(text)], "status": status}
        )

    def message(
        self,
        item_id: str,
        deltas: list[str],
        *,
        phase: str = "final_answer",
        status: str = "completed",
        logprobs: list[list[dict[str, Any]]] | None = None,
    ) -> None:
        text = "".join(deltas)
        per_delta = logprobs if logprobs is not None else [[] for _ in deltas]
        all_logprobs = [lp for group in per_delta for lp in group]
        base = {"id": item_id, "type": "message", "role": "assistant"}
        self.added({**base, "status": "in_progress", "content": [], "phase": phase})
        self.item_event("response.content_part.added", item_id, content_index=0, part=text_part("", []))
        for delta, lps in zip(deltas, per_delta, strict=True):
            self.item_event("response.output_text.delta", item_id, content_index=0, delta=delta, logprobs=lps)
        self.item_event("response.output_text.done", item_id, content_index=0, text=text, logprobs=all_logprobs)
        part = text_part(text, all_logprobs)
        self.item_event("response.content_part.done", item_id, content_index=0, part=part)
        self.done({**base, "status": status, "content": [part], "phase": phase})

    def function_call(
        self,
        item_id: str,
        call_id: str,
        name: str,
        deltas: list[str],
        *,
        status: str = "completed",
        namespace: str | None = None,
    ) -> None:
        arguments = "".join(deltas)
        base: dict[str, Any] = {"id": item_id, "type": "function_call", "name": name, "call_id": call_id}
        if namespace is not None:
            base["namespace"] = namespace
        self.added({**base, "status": "in_progress", "arguments": ""})
        for delta in deltas:
            self.item_event("response.function_call_arguments.delta", item_id, delta=delta)
        self.item_event("response.function_call_arguments.done", item_id, arguments=arguments, name=name)
        self.done({**base, "status": status, "arguments": arguments})

    def end(self, type_: str, usage: dict[str, Any], **fields: Any) -> list[dict[str, Any]]:
        status = type_.removeprefix("response.")
        response = {**self.response, "status": status, "output": self.output, "usage": usage, **fields}
        if status == "completed":
            response["completed_at"] = COMPLETED_AT
        self.add(type_, response=response)
        return self.events


def reasoning_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def text_part(text: str, logprobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def assert_stream(events: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    check_stream(events)
    assert [e["type"] for e in events] == [e["type"] for e in expected]
    for got, want in zip(events, expected, strict=True):
        assert got == want


# ---------------------------------------------------------------------------------------------- items


def test_reasoning_then_final_answer_is_the_reference_stream() -> None:
    """responses-protocol.md §4.10, written out in full."""
    completion = (
        "<|channel|>analysis<|message|>Say hi.<|end|><|start|>assistant<|channel|>final<|message|>Hi there!<|return|>"
    )
    rs = {"id": "rs_1", "type": "reasoning"}
    msg = {"id": "msg_2", "type": "message", "role": "assistant"}
    reasoning_done = {
        **rs,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Say hi."}],
        "status": "completed",
    }
    answer_part = {"type": "output_text", "text": "Hi there!", "annotations": [], "logprobs": []}
    message_done = {**msg, "status": "completed", "content": [answer_part], "phase": "final_answer"}
    reasoning_tokens = len(tokens("<|channel|>analysis<|message|>Say hi.<|end|>"))
    assert reasoning_tokens == 7

    expected = [
        {"type": "response.created", "sequence_number": 0, "response": BASE_RESPONSE},
        {"type": "response.in_progress", "sequence_number": 1, "response": BASE_RESPONSE},
        {
            "type": "response.output_item.added",
            "sequence_number": 2,
            "output_index": 0,
            "item": {**rs, "summary": [], "content": [], "status": "in_progress"},
        },
        {
            "type": "response.content_part.added",
            "sequence_number": 3,
            "item_id": "rs_1",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "reasoning_text", "text": ""},
        },
        *[
            {
                "type": "response.reasoning_text.delta",
                "sequence_number": 4 + i,
                "item_id": "rs_1",
                "output_index": 0,
                "content_index": 0,
                "delta": delta,
            }
            for i, delta in enumerate(["Say", " hi", "."])
        ],
        {
            "type": "response.reasoning_text.done",
            "sequence_number": 7,
            "item_id": "rs_1",
            "output_index": 0,
            "content_index": 0,
            "text": "Say hi.",
        },
        {
            "type": "response.content_part.done",
            "sequence_number": 8,
            "item_id": "rs_1",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "reasoning_text", "text": "Say hi."},
        },
        {"type": "response.output_item.done", "sequence_number": 9, "output_index": 0, "item": reasoning_done},
        {
            "type": "response.output_item.added",
            "sequence_number": 10,
            "output_index": 1,
            "item": {**msg, "status": "in_progress", "content": [], "phase": "final_answer"},
        },
        {
            "type": "response.content_part.added",
            "sequence_number": 11,
            "item_id": "msg_2",
            "output_index": 1,
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
        },
        *[
            {
                "type": "response.output_text.delta",
                "sequence_number": 12 + i,
                "item_id": "msg_2",
                "output_index": 1,
                "content_index": 0,
                "delta": delta,
                "logprobs": [],
            }
            for i, delta in enumerate(["Hi", " there", "!"])
        ],
        {
            "type": "response.output_text.done",
            "sequence_number": 15,
            "item_id": "msg_2",
            "output_index": 1,
            "content_index": 0,
            "text": "Hi there!",
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "sequence_number": 16,
            "item_id": "msg_2",
            "output_index": 1,
            "content_index": 0,
            "part": answer_part,
        },
        {"type": "response.output_item.done", "sequence_number": 17, "output_index": 1, "item": message_done},
        {
            "type": "response.completed",
            "sequence_number": 18,
            "response": {
                **BASE_RESPONSE,
                "status": "completed",
                "completed_at": COMPLETED_AT,
                "output": [reasoning_done, message_done],
                "usage": usage(output=len(tokens(completion)), reasoning=reasoning_tokens),
            },
        },
    ]
    assert_stream(translate(completion), expected)


def test_preamble_is_a_commentary_message_then_the_function_call_ends_the_response() -> None:
    completion = (
        "<|channel|>commentary<|message|>Checking the weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Paris"}<|call|>'
    )
    e = Expected()
    e.message("msg_1", ["Checking", " the", " weather", "."], phase="commentary")
    e.function_call("fc_2", "call_2", "get_weather", ['{"', "city", '":"', "Paris", '"}'])
    expected = e.end("response.completed", usage(output=len(tokens(completion))))
    assert_stream(translate(completion, tools=[FUNCTION_TOOL]), expected)


def test_function_call_on_the_analysis_channel() -> None:
    """pitfalls.md #19: classified by recipient on any channel; the analysis header is not reasoning."""
    completion = (
        "<|channel|>analysis<|message|>Need weather.<|end|>"
        '<|start|>assistant<|channel|>analysis to=functions.get_weather code<|message|>{"city":"Paris"}<|call|>'
    )
    e = Expected()
    e.reasoning("rs_1", ["Need", " weather", "."])
    e.function_call("fc_2", "call_2", "get_weather", ['{"', "city", '":"', "Paris", '"}'])
    reasoning = len(tokens("<|channel|>analysis<|message|>Need weather.<|end|>"))
    expected = e.end("response.completed", usage(output=len(tokens(completion)), reasoning=reasoning))
    assert_stream(translate(completion, tools=[FUNCTION_TOOL]), expected)


@pytest.mark.parametrize(
    ("recipient", "name"),
    [
        ("functions.lookup_stock", "lookup_stock"),  # under functions. but not declared
        ("send_email", "send_email"),  # no namespace at all
        ("python", "python"),  # a built-in name whose tool the request did not declare
        ("browser.search", "browser.search"),
    ],
)
def test_recipient_naming_no_declared_tool_is_a_function_call_named_as_written(recipient: str, name: str) -> None:
    completion = f'<|channel|>commentary to={recipient} <|constrain|>json<|message|>{{"id":7}}<|call|>'
    e = Expected()
    e.function_call("fc_1", "call_1", name, ['{"', "id", '":', "7", "}"])
    expected = e.end("response.completed", usage(output=len(tokens(completion))))
    assert_stream(translate(completion, tools=[FUNCTION_TOOL]), expected)


@pytest.mark.parametrize("recipient", ["crm.lookup", "functions.crm.lookup"])
def test_namespace_function_call_carries_its_namespace(recipient: str) -> None:
    completion = f'<|channel|>commentary to={recipient} <|constrain|>json<|message|>{{"id":7}}<|call|>'
    e = Expected()
    e.function_call("fc_1", "call_1", "lookup", ['{"', "id", '":', "7", "}"], namespace="crm")
    expected = e.end("response.completed", usage(output=len(tokens(completion))))
    assert_stream(translate(completion, tools=[NAMESPACE_TOOL]), expected)


# ---------------------------------------------------------------------------------------------- built-in tools


def code_interpreter_events(e: Expected, *, container: str = "cntr_fixed") -> dict[str, Any]:
    """The events up to ``interpreting`` for ``print(6*7)`` (§4.8); returns the added item."""
    added = {
        "id": "ci_1",
        "type": "code_interpreter_call",
        "status": "in_progress",
        "code": "",
        "container_id": container,
        "outputs": None,
    }
    e.added(added)
    e.item_event("response.code_interpreter_call.in_progress", "ci_1")
    for delta in ["print", "(", "6", "*", "7", ")"]:
        e.item_event("response.code_interpreter_call_code.delta", "ci_1", delta=delta)
    e.item_event("response.code_interpreter_call_code.done", "ci_1", code="print(6*7)")
    e.item_event("response.code_interpreter_call.interpreting", "ci_1")
    return added


PYTHON_CALL = "<|channel|>analysis to=python code<|message|>print(6*7)<|call|>"


def test_code_interpreter_streams_code_then_waits_for_the_result() -> None:
    translator = make_translator([CODE_INTERPRETER_TOOL])
    translator.receive_tokens(tokens(PYTHON_CALL))
    translator.receive_end("stop")
    events = translator.events()
    # interpreting is the last event until the tool's result is in (pitfalls.md #26: nothing claims completion
    # before the code ran).
    assert events[-1]["type"] == "response.code_interpreter_call.interpreting"
    assert translator.next_event() is AWAIT_TOOL
    assert translator.state is State.AWAIT_TOOL
    assert translator.pending_tool_call == ToolCall(
        kind=ItemKind.CODE_INTERPRETER,
        item_id="ci_1",
        name="python",
        namespace=None,
        arguments="print(6*7)",
        channel="analysis",
    )

    outputs = [{"type": "logs", "logs": "42\n"}]
    translator.send_tool_result(outputs=outputs)
    assert translator.pending_tool_call is None and translator.state is State.READY
    translator.receive_end("stop")  # the caller ends the response here instead of continuing
    events += translator.events()

    e = Expected()
    added = code_interpreter_events(e)
    e.item_event("response.code_interpreter_call.completed", "ci_1")
    e.done({**added, "status": "completed", "code": "print(6*7)", "outputs": outputs})
    assert_stream(events, e.end("response.completed", usage(output=len(tokens(PYTHON_CALL)))))


def test_code_interpreter_failure_ends_the_item_failed_without_completed_event() -> None:
    translator = make_translator([{"type": "code_interpreter", "container": {"type": "auto"}}])
    translator.receive_tokens(tokens(PYTHON_CALL))
    events = translator.events()
    translator.send_tool_result(error="Timed out after 120 s")
    translator.receive_end("stop")
    events += translator.events()

    e = Expected()
    # No container id was declared: one is made for the item (cntr_ prefix, after the item's own id).
    added = code_interpreter_events(e, container="cntr_2")
    e.done({**added, "status": "failed", "code": "print(6*7)", "outputs": None})
    assert_stream(events, e.end("response.completed", usage(output=len(tokens(PYTHON_CALL)))))


@pytest.mark.parametrize(
    ("action_name", "arguments", "added_action", "result_action", "done_action"),
    [
        (
            "search",
            '{"query":"gpt-oss"}',
            {"type": "search"},
            None,  # no action from the tool: the query is read from the model's arguments
            {"type": "search", "query": "gpt-oss"},
        ),
        (
            "search",
            '{"query":"gpt-oss"}',
            {"type": "search"},
            {"type": "search", "query": "gpt-oss", "sources": [{"type": "url", "url": "https://openai.com"}]},
            {"type": "search", "query": "gpt-oss", "sources": [{"type": "url", "url": "https://openai.com"}]},
        ),
        (
            "open",
            '{"id":"https://example.com"}',
            {"type": "open_page", "url": None},
            None,
            {"type": "open_page", "url": "https://example.com"},
        ),
        (
            "find",
            '{"pattern":"Harmony"}',
            {"type": "find_in_page", "pattern": "", "url": ""},
            # The page's real URL comes from the tool (the model only has a cursor), pitfalls.md #25.
            {"type": "find_in_page", "pattern": "Harmony", "url": "https://example.com/harmony"},
            {"type": "find_in_page", "pattern": "Harmony", "url": "https://example.com/harmony"},
        ),
    ],
)
def test_web_search_call(
    action_name: str,
    arguments: str,
    added_action: dict[str, Any],
    result_action: dict[str, Any] | None,
    done_action: dict[str, Any],
) -> None:
    completion = f"<|channel|>analysis to=browser.{action_name} code<|message|>{arguments}<|call|>"
    translator = make_translator([WEB_SEARCH_TOOL])
    translator.receive_tokens(tokens(completion))
    translator.receive_end("stop")
    events = translator.events()
    call = translator.pending_tool_call
    assert call is not None
    assert (call.kind, call.name, call.namespace, call.arguments) == (
        ItemKind.WEB_SEARCH,
        action_name,
        "browser",
        arguments,
    )
    # searching is the last event before the tool runs; completed only after its result.
    assert events[-1]["type"] == "response.web_search_call.searching"
    translator.send_tool_result(action=result_action)
    translator.receive_end("stop")
    events += translator.events()

    e = Expected()
    added = {"id": "ws_1", "type": "web_search_call", "status": "in_progress", "action": added_action}
    e.added(added)
    e.item_event("response.web_search_call.in_progress", "ws_1")
    e.item_event("response.web_search_call.searching", "ws_1")
    e.item_event("response.web_search_call.completed", "ws_1")
    e.done({**added, "status": "completed", "action": done_action})  # no argument deltas for web search (§4.7)
    assert_stream(events, e.end("response.completed", usage(output=len(tokens(completion)))))


MCP_CALL = (
    '<|channel|>commentary to=deepwiki.ask_question <|constrain|>json<|message|>{"question":"What is Harmony?"}<|call|>'
)


def mcp_events(e: Expected) -> dict[str, Any]:
    added = {
        "id": "mcp_1",
        "type": "mcp_call",
        "status": "in_progress",
        "server_label": "deepwiki",
        "name": "ask_question",
        "arguments": "",
    }
    e.added(added)
    e.item_event("response.mcp_call.in_progress", "mcp_1")
    for delta in ['{"', "question", '":"', "What", " is", " Harmony", '?"', "}"]:
        e.item_event("response.mcp_call_arguments.delta", "mcp_1", delta=delta)
    e.item_event("response.mcp_call_arguments.done", "mcp_1", arguments='{"question":"What is Harmony?"}')
    return added


def test_mcp_call_completed_with_output() -> None:
    translator = make_translator([MCP_TOOL])
    translator.receive_tokens(tokens(MCP_CALL))
    events = translator.events()
    call = translator.pending_tool_call
    assert call is not None and (call.kind, call.namespace, call.name) == (
        ItemKind.MCP_CALL,
        "deepwiki",
        "ask_question",
    )
    translator.send_tool_result(output="Harmony is a format.")
    translator.receive_end("stop")
    events += translator.events()

    e = Expected()
    added = mcp_events(e)
    e.item_event("response.mcp_call.completed", "mcp_1")
    arguments = '{"question":"What is Harmony?"}'
    e.done({**added, "status": "completed", "arguments": arguments, "output": "Harmony is a format."})
    assert_stream(events, e.end("response.completed", usage(output=len(tokens(MCP_CALL)))))


@pytest.mark.parametrize(
    ("error", "item_error"),
    [
        (
            "connection refused",
            {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "connection refused"}]},
        ),
        (
            {"type": "http_error", "code": 502, "message": "Bad Gateway"},
            {"type": "http_error", "code": 502, "message": "Bad Gateway"},
        ),
    ],
)
def test_mcp_call_failed_with_error(error: Any, item_error: dict[str, Any]) -> None:
    translator = make_translator([MCP_TOOL])
    translator.receive_tokens(tokens(MCP_CALL))
    events = translator.events()
    translator.send_tool_result(error=error)
    translator.receive_end("stop")
    events += translator.events()

    e = Expected()
    added = mcp_events(e)
    e.item_event("response.mcp_call.failed", "mcp_1")
    e.done({**added, "status": "failed", "arguments": '{"question":"What is Harmony?"}', "error": item_error})
    assert_stream(events, e.end("response.completed", usage(output=len(tokens(MCP_CALL)))))


# ---------------------------------------------------------------------------------------------- endings


@pytest.mark.parametrize(
    ("completion", "build"),
    [
        pytest.param(
            "<|channel|>analysis<|message|>Long thought",
            lambda e: e.reasoning("rs_1", ["Long", " thought"], status="incomplete"),
            id="inside-reasoning",
        ),
        pytest.param(
            "<|channel|>final<|message|>The answer is",
            lambda e: e.message("msg_1", ["The", " answer", " is"], status="incomplete"),
            id="inside-message",
        ),
        pytest.param(
            '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":',
            lambda e: e.function_call("fc_1", "call_1", "get_weather", ['{"', "city", '":'], status="incomplete"),
            id="inside-function-call",
        ),
    ],
)
def test_length_cut_closes_the_open_item_incomplete(completion: str, build: Any) -> None:
    e = Expected()
    build(e)
    reasoning = len(tokens(completion)) if "analysis" in completion else 0
    expected = e.end(
        "response.incomplete",
        usage(output=len(tokens(completion)), reasoning=reasoning),
        incomplete_details={"reason": "max_output_tokens"},
    )
    assert_stream(translate(completion, "length", tools=[FUNCTION_TOOL]), expected)


def test_length_cut_inside_code_interpreter_call_ends_it_incomplete_without_running_it() -> None:
    completion = "<|channel|>analysis to=python code<|message|>print(6*7"
    e = Expected()
    added = {
        "id": "ci_1",
        "type": "code_interpreter_call",
        "status": "in_progress",
        "code": "",
        "container_id": "cntr_fixed",
        "outputs": None,
    }
    e.added(added)
    e.item_event("response.code_interpreter_call.in_progress", "ci_1")
    for delta in ["print", "(", "6", "*", "7"]:
        e.item_event("response.code_interpreter_call_code.delta", "ci_1", delta=delta)
    e.item_event("response.code_interpreter_call_code.done", "ci_1", code="print(6*7")
    e.done({**added, "status": "incomplete", "code": "print(6*7"})
    expected = e.end(
        "response.incomplete",
        usage(output=len(tokens(completion))),
        incomplete_details={"reason": "max_output_tokens"},
    )
    translator = make_translator([CODE_INTERPRETER_TOOL])
    translator.receive_tokens(tokens(completion))
    translator.receive_end("length")
    assert translator.pending_tool_call is None
    assert_stream(translator.events(), expected)


@pytest.mark.parametrize("stop", ["<|return|>", "<|call|>"])
def test_length_cut_exactly_after_the_stop_token_is_completed(stop: str) -> None:
    """The model finished on its last allowed token: nothing was cut (responses-protocol.md §5.2)."""
    completion = f"<|channel|>final<|message|>Done.{stop}"
    e = Expected()
    e.message("msg_1", ["Done", "."])
    assert_stream(translate(completion, "length"), e.end("response.completed", usage(output=len(tokens(completion)))))


def test_engine_error_closes_the_item_then_sends_error_and_failed() -> None:
    completion = "<|channel|>final<|message|>The answer is"
    message = "the engine failed: CUDA error: out of memory"
    e = Expected()
    e.message("msg_1", ["The", " answer", " is"], status="incomplete")
    flat = {"code": "server_error", "message": message, "param": None}
    e.add("error", **flat, error={"type": "server_error", **flat})
    expected = e.end(
        "response.failed",
        usage(output=len(tokens(completion))),
        error={"code": "server_error", "message": message},
    )
    assert_stream(translate(completion, "error", message="CUDA error: out of memory"), expected)


def test_engine_error_without_a_message_still_says_what_happened() -> None:
    events = translate("", "error")
    check_stream(events)
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error", "response.failed"]
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "the engine failed mid-stream"}
    assert events[-1]["response"]["output"] == []


# ---------------------------------------------------------------------------------------------- text details


def logprob_entry(token: int, logprob: float, top: list[tuple[int, float]]) -> dict[str, Any]:
    def one(t: int, p: float) -> dict[str, Any]:
        raw = VOCAB.token_bytes[t]
        return {"token": raw.decode("utf-8", errors="replace"), "bytes": list(raw), "logprob": p}

    return {**one(token, logprob), "top_logprobs": [one(t, p) for t, p in top]}


def test_logprobs_on_output_text_deltas_done_part_and_item() -> None:
    header = tokens("<|channel|>final<|message|>")
    content = tokens("x🦜")  # x, then the parrot in three tokens: its logprobs ride on the delta that shows it
    assert [VOCAB.token_text[t] is None for t in content] == [False, True, True, True]
    ids = [*header, *content, 200002]
    alternative = tokens("y")[0]
    logprobs = [TokenLogprob(-0.25 * i, ((ids[i], -0.25 * i), (alternative, -3.0))) for i in range(len(ids))]
    translator = make_translator(logprobs=True)
    translator.receive_tokens(ids, logprobs=logprobs)
    translator.receive_end("stop")

    lp = [logprob_entry(ids[i], -0.25 * i, [(ids[i], -0.25 * i), (alternative, -3.0)]) for i in range(len(ids))]
    assert lp[4]["token"] == "\ufffd" and lp[4]["bytes"] == list(VOCAB.token_bytes[content[1]])  # raw bytes kept
    e = Expected()
    e.message("msg_1", ["x", "🦜"], logprobs=[[lp[3]], [lp[4], lp[5], lp[6]]])
    assert_stream(translator.events(), e.end("response.completed", usage(output=len(ids))))


def test_logprobs_are_not_put_on_reasoning() -> None:
    ids = tokens("<|channel|>analysis<|message|>Say hi.<|end|>")
    translator = make_translator(logprobs=True)
    translator.receive_tokens(ids, logprobs=[TokenLogprob(-1.0)] * len(ids))
    translator.receive_end("stop")
    events = translator.events()
    check_stream(events)
    assert not any("logprobs" in event for event in events if event["type"].startswith("response.reasoning"))


@pytest.mark.parametrize("chunk", [1, 2, None])
def test_multibyte_characters_split_across_tokens_come_out_whole(chunk: int | None) -> None:
    # 龘 is two tokens, 🦜 three: no delta may carry half a character (or a U+FFFD in its place).
    completion = "<|channel|>final<|message|>龘🦜!<|return|>"
    e = Expected()
    e.message("msg_1", ["龘", "🦜", "!"])
    events = translate(completion, chunk=chunk)
    assert_stream(events, e.end("response.completed", usage(output=len(tokens(completion)))))


def test_cjk_and_emoji_split_in_reasoning_and_arguments() -> None:
    completion = (
        "<|channel|>analysis<|message|>猫が好き🐈<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"日本語"}<|call|>'
    )
    events = translate(completion, tools=[FUNCTION_TOOL], chunk=3)
    check_stream(events)
    reasoning = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    arguments = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert reasoning == ["猫", "が", "好き", "🐈"]
    assert "".join(arguments) == '{"city":"日本語"}'
    assert "\ufffd" not in "".join(arguments)


@pytest.mark.parametrize(("finish", "status"), [("stop", "completed"), ("length", "incomplete")])
def test_character_cut_off_by_the_end_becomes_one_replacement_character(finish: str, status: str) -> None:
    ids = tokens("<|channel|>final<|message|>x") + tokens("🦜")[:2]  # the parrot's last byte never comes
    events = translate(ids, finish)
    check_stream(events)
    item = events[-2]["item"]
    assert (item["status"], item["content"][0]["text"]) == (status, "x\ufffd")


# ---------------------------------------------------------------------------------------------- usage, prefill


def test_prefilled_header_shapes_the_item_but_is_not_output() -> None:
    """tool_choice forcing a function (harmony.md §7.3): the header is prompt, only the arguments are output."""
    prefill = tokens("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>")
    generated = tokens('{"city":"Paris"}<|call|>')
    translator = make_translator([FUNCTION_TOOL])
    translator.receive_usage(prompt_tokens=100 + len(prefill))
    translator.receive_prefill(prefill)
    translator.receive_tokens(generated)
    translator.receive_end("stop")

    e = Expected()
    e.function_call("fc_1", "call_1", "get_weather", ['{"', "city", '":"', "Paris", '"}'])
    expected = e.end("response.completed", usage(output=len(generated), input=100 + len(prefill)))
    assert len(generated) == 6
    assert_stream(translator.events(), expected)


def test_usage_sums_engine_calls_and_counts_reasoning_tokens() -> None:
    analysis = "<|channel|>analysis<|message|>Compute.<|end|>"
    call = "<|start|>assistant<|channel|>analysis to=python code<|message|>print(6*7)<|call|>"
    answer = "<|channel|>final<|message|>42<|return|>"
    translator = make_translator([CODE_INTERPRETER_TOOL])
    translator.receive_usage(prompt_tokens=1200, cached_tokens=1024)
    translator.receive_tokens(tokens(analysis + call))
    translator.receive_end("stop")
    translator.send_tool_result(outputs=None)
    translator.start_engine_call()
    translator.receive_usage(prompt_tokens=1250, cached_tokens=1200)
    translator.receive_tokens(tokens(answer))
    translator.receive_end("stop")
    events = translator.events()
    check_stream(events)
    assert events[-1]["response"]["usage"] == usage(
        output=len(tokens(analysis + call)) + len(tokens(answer)),
        reasoning=len(tokens(analysis)),  # the analysis message only: the python call is a tool call
        input=2450,
        cached=2224,
    )
    assert (translator.input_tokens, translator.cached_tokens) == (2450, 2224)


def test_request_echo_is_kept_and_not_mutated() -> None:
    echo = copy.deepcopy(BASE_RESPONSE) | {
        "id": "resp_given",
        "model": "gpt-oss-120b",
        "instructions": "Be brief.",
        "tools": [FUNCTION_TOOL],
        "max_output_tokens": 64,
        "metadata": {"k": "v"},
    }
    original = copy.deepcopy(echo)
    translator = Translator(vocab=VOCAB, new_id=id_factory(), clock=lambda: COMPLETED_AT, response=echo)
    completion = "<|channel|>final<|message|>Done.<|return|>"
    translator.receive_tokens(tokens(completion))
    translator.receive_end("stop")
    events = translator.events()
    assert echo == original
    e = Expected(echo)
    e.message("msg_0", ["Done", "."])  # the response id was given, so the first made id is the message's
    assert_stream(events, e.end("response.completed", usage(output=len(tokens(completion)))))
    assert translator.response == events[-1]["response"]


# ---------------------------------------------------------------------------------------------- tool loop


def test_tool_loop_is_one_response_with_contiguous_indices() -> None:
    first_call = tokens("<|channel|>analysis<|message|>Compute.<|end|><|start|>assistant" + PYTHON_CALL)
    second_call = tokens(
        "<|channel|>analysis<|message|>Say hi.<|end|><|start|>assistant<|channel|>final<|message|>42<|return|>"
    )
    translator = make_translator(ALL_TOOLS)
    translator.receive_tokens(first_call)
    translator.receive_end("stop")
    events = []
    while (event := translator.next_event()) is not AWAIT_TOOL:
        events.append(event)
    translator.send_tool_result(outputs=[{"type": "logs", "logs": "42\n"}])
    while isinstance(event := translator.next_event(), dict):
        events.append(event)
    assert event is NEED_TOKENS  # READY: the caller decides whether the model continues
    translator.start_engine_call()
    translator.receive_tokens(second_call)
    translator.receive_end("stop")
    while (event := translator.next_event()) is not DONE:
        events.append(event)

    e = Expected()
    e.reasoning("rs_1", ["Compute", "."])
    added = {
        "id": "ci_2",
        "type": "code_interpreter_call",
        "status": "in_progress",
        "code": "",
        "container_id": "cntr_fixed",
        "outputs": None,
    }
    e.added(added)
    e.item_event("response.code_interpreter_call.in_progress", "ci_2")
    for delta in ["print", "(", "6", "*", "7", ")"]:
        e.item_event("response.code_interpreter_call_code.delta", "ci_2", delta=delta)
    e.item_event("response.code_interpreter_call_code.done", "ci_2", code="print(6*7)")
    e.item_event("response.code_interpreter_call.interpreting", "ci_2")
    e.item_event("response.code_interpreter_call.completed", "ci_2")
    e.done({**added, "status": "completed", "code": "print(6*7)", "outputs": [{"type": "logs", "logs": "42\n"}]})
    e.reasoning("rs_3", ["Say", " hi", "."])
    e.message("msg_4", ["42"])
    output_tokens = len(first_call) + len(second_call)
    reasoning = len(tokens("<|channel|>analysis<|message|>Compute.<|end|>")) + len(
        tokens("<|channel|>analysis<|message|>Say hi.<|end|>")
    )
    expected = e.end("response.completed", usage(output=output_tokens, reasoning=reasoning))
    assert_stream(events, expected)
    assert [item["id"] for item in events[-1]["response"]["output"]] == ["rs_1", "ci_2", "rs_3", "msg_4"]
    assert translator.next_event() is DONE


# ---------------------------------------------------------------------------------------------- the API


def test_next_event_sentinels() -> None:
    translator = make_translator()
    assert translator.next_event()["type"] == "response.created"  # type: ignore[index]
    assert translator.next_event()["type"] == "response.in_progress"  # type: ignore[index]
    assert translator.next_event() is NEED_TOKENS
    translator.receive_tokens(tokens("<|channel|>final<|message|>"))
    assert translator.next_event()["type"] == "response.output_item.added"  # type: ignore[index]
    translator.events()
    assert translator.next_event() is NEED_TOKENS
    translator.receive_end("stop")
    assert translator.events()[-1]["type"] == "response.completed"
    assert translator.next_event() is DONE and translator.closed
    assert [repr(s) for s in (NEED_TOKENS, AWAIT_TOOL, DONE)] == ["NEED_TOKENS", "AWAIT_TOOL", "DONE"]


def test_caller_misuse_raises_local_protocol_error() -> None:
    translator = make_translator()
    with pytest.raises(LocalProtocolError, match="logprobs"):
        translator.receive_tokens([1, 2], logprobs=[TokenLogprob(-1.0)])
    with pytest.raises(LocalProtocolError, match="unknown finish reason"):
        translator.receive_end("cancelled")  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="no tool call is waiting"):
        translator.send_tool_result(output="x")
    with pytest.raises(LocalProtocolError, match="can't start an engine call"):
        translator.start_engine_call()
    translator.receive_end("stop")
    with pytest.raises(LocalProtocolError, match="already received"):
        translator.receive_end("stop")
    with pytest.raises(LocalProtocolError, match="after the end"):
        translator.receive_tokens([1])
    translator.events()
    with pytest.raises(LocalProtocolError, match="after the end"):
        translator.receive_tokens([1])

    waiting = make_translator([CODE_INTERPRETER_TOOL])
    waiting.receive_tokens(tokens(PYTHON_CALL))
    waiting.send_tool_result(outputs=None)
    with pytest.raises(LocalProtocolError, match="start_engine_call"):
        waiting.receive_tokens([1])


def test_tokens_after_a_model_failure_are_accepted_and_ignored() -> None:
    """The engine keeps streaming after the translator failed the response: the caller must not crash."""
    translator = make_translator()
    translator.receive_tokens(tokens("<|channel|>final Hello there<|return|>"))
    events = translator.events()
    assert translator.closed and translator.error is not None
    assert "inside its header: '<|channel|>final Hello there'" in translator.error.message
    translator.receive_tokens(tokens("<|channel|>final<|message|>more<|return|>"))
    translator.receive_end("stop")
    assert translator.events() == []
    check_stream(events)
