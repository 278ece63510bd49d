"""``tool_search`` and ``defer_loading`` tools through the openai SDK against the real server, a scripted model.

- Server-run search (``execution: "server"``, the default): deferred tools are not in the prompt; the model calls
  ``functions.tool_search``, the server searches the deferred tools and answers with a ``tool_search_call`` and a
  ``tool_search_output`` item; the loaded tools are declared to the model in the tool message, and it calls one.
  Streamed, not, stored (retrieve, replayed stream) and in the background, with the stream invariants.
- Client-run search (``execution: "client"``, what Codex sends): the ``tool_search_call`` ends the response; the
  client answers with a ``tool_search_output`` input item, and the model calls what it loaded.
- History: the conversation renders to the same prompt, byte for byte, resent as items or through
  ``previous_response_id``, and the same tool message the server's search produced mid-response.
- Bad items and declarations are 400s with the API's error shape.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from translate.invariants import check_stream

from .conftest import Serve
from .helpers import MODEL, WEATHER_TOOL, openai_client, post, sse_events
from .test_custom_tools import Scripted

SEARCH = '<|channel|>commentary to=functions.tool_search <|constrain|>json<|message|>{"query": "weather"}<|call|>'
THINK_THEN_SEARCH = "<|channel|>analysis<|message|>I need a weather tool.<|end|><|start|>assistant" + SEARCH
CALL_WEATHER = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>'
ANSWER = "<|channel|>final<|message|>It is sunny in Oslo.<|return|>"
DEFERRED_WEATHER = dict(WEATHER_TOOL, defer_loading=True)
CRM: dict[str, Any] = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [
        {
            "type": "function",
            "name": "lookup_customer",
            "description": "Find a customer by email address.",
            "parameters": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
            "defer_loading": True,
        }
    ],
}
SERVER_TOOLS: list[Any] = [{"type": "tool_search"}, DEFERRED_WEATHER, CRM]
RESULT_HEADER = "<|start|>functions.tool_search to=assistant<|channel|>commentary<|message|>"


def _types(output: list[Any]) -> list[str]:
    return [item.type for item in output]


def _tool_message(prompt: str) -> str:
    """The tool message answering the search, as the model reads it."""
    start = prompt.index(RESULT_HEADER)
    return prompt[start : prompt.index("<|end|>", start) + len("<|end|>")]


def test_the_server_searches_and_the_model_calls_what_it_loaded(serve: Serve) -> None:
    scripted = Scripted(THINK_THEN_SEARCH, CALL_WEATHER)
    client = openai_client(serve(scripted.engine))
    response = client.responses.create(model=MODEL, input="Weather in Oslo?", tools=SERVER_TOOLS)

    first, second = scripted.prompts
    # Up front the model has the search, told what it can load, and not the deferred tools themselves.
    assert "type tool_search = (_: {" in first and "// - namespace crm: Customer records." in first
    assert "get_weather" not in first and "lookup_customer" not in first
    # After the search, the loaded tool is declared in the tool message; nothing before it changed.
    assert second.startswith(first)
    message = _tool_message(second)
    assert "## functions\n\nnamespace functions {\n\n// Weather for a city.\ntype get_weather = (_: {" in message
    assert "lookup_customer" not in message

    assert _types(response.output) == ["reasoning", "tool_search_call", "tool_search_output", "function_call"]
    call, loaded, function_call = response.output[1:]
    assert (call.execution, call.status, call.arguments) == ("server", "completed", {"query": "weather"})
    assert (loaded.execution, loaded.status, loaded.call_id) == ("server", "completed", call.call_id)
    assert [t.model_dump(exclude_none=True) for t in loaded.tools] == [DEFERRED_WEATHER]
    assert (function_call.name, function_call.arguments) == ("get_weather", '{"city": "Oslo"}')
    assert response.status == "completed"


def test_the_search_streams_stores_and_replays_alike(serve: Serve) -> None:
    live = serve(Scripted(SEARCH, CALL_WEATHER, SEARCH, CALL_WEATHER).engine)
    client = openai_client(live)
    raw = post(live, {"model": MODEL, "input": "Weather?", "tools": SERVER_TOOLS, "stream": True})
    events = sse_events(raw.content)
    check_stream(events)
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["tool_search_call", "tool_search_output", "function_call"]
    added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
    assert added == ["tool_search_call", "tool_search_output", "function_call"]
    # The call is added with its whole arguments (the API has no argument deltas for it), done after the search.
    call_events = [e for e in events if e.get("item", {}).get("type") == "tool_search_call"]
    assert [(e["type"], e["item"]["status"]) for e in call_events] == [
        ("response.output_item.added", "in_progress"),
        ("response.output_item.done", "completed"),
    ]
    assert call_events[0]["item"]["arguments"] == {"query": "weather"}

    # Stored as streamed: retrieved, and replayed as a stream, alike.
    stored = client.responses.retrieve(final["id"])
    assert [item.to_dict() for item in stored.output] == final["output"]
    replay = httpx.get(f"{client.base_url}responses/{final['id']}", params={"stream": "true"}, timeout=10)
    replayed = sse_events(replay.content)
    check_stream(replayed)
    assert replayed[-1]["response"]["output"] == final["output"]

    # In the background: the same items, polled and streamed.
    queued = client.responses.create(model=MODEL, input="Weather?", tools=SERVER_TOOLS, background=True)
    with client.responses.stream(response_id=queued.id) as stream:
        for _ in stream:
            pass
        background = stream.get_final_response()
    assert _types(background.output) == ["tool_search_call", "tool_search_output", "function_call"]
    replay = httpx.get(f"{client.base_url}responses/{queued.id}", params={"stream": "true"}, timeout=10)
    check_stream(sse_events(replay.content))


def test_a_conversation_renders_the_same_resent_as_items_or_by_previous_response_id(serve: Serve) -> None:
    scripted = Scripted(SEARCH, CALL_WEATHER, ANSWER)
    client = openai_client(serve(scripted.engine))
    first = client.responses.create(model=MODEL, input="Weather in Oslo?", tools=SERVER_TOOLS)
    in_response = scripted.prompts[1]  # the engine call after the server's own search
    function_call = first.output[-1]
    output = {"type": "function_call_output", "call_id": function_call.call_id, "output": "Sunny, 21 C"}

    by_id = client.responses.create(model=MODEL, previous_response_id=first.id, input=[output], tools=SERVER_TOOLS)
    prompt_by_id = scripted.prompts[-1]
    resent = [{"role": "user", "content": "Weather in Oslo?"}, *[i.model_dump(exclude_none=True) for i in first.output]]
    by_items = client.responses.create(model=MODEL, input=[*resent, output], tools=SERVER_TOOLS)
    prompt_by_items = scripted.prompts[-1]

    assert by_id.output_text == by_items.output_text == "It is sunny in Oslo."
    assert prompt_by_items == prompt_by_id
    # The model reads the same loaded tools as when the server ran the search inside the first response.
    assert _tool_message(prompt_by_id) == _tool_message(in_response)
    call = "to=functions.tool_search<|channel|>commentary <|constrain|>json<|message|>"
    assert f'<|start|>assistant {call}{{"query":"weather"}}<|call|>' in prompt_by_id
    result = "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>Sunny, 21 C<|end|>"
    assert result in prompt_by_id


CLIENT_SEARCH_TOOL: dict[str, Any] = {
    "type": "tool_search",
    "execution": "client",
    "description": "Search the tools of the connected MCP servers.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
        "required": ["query"],
        "additionalProperties": False,
    },
}
LOADED_NAMESPACE: dict[str, Any] = {
    "type": "namespace",
    "name": "mcp__files__",
    "description": "Files on disk.",
    "tools": [
        {
            "type": "function",
            "name": "read_file",
            "description": "Read a file.",
            "defer_loading": True,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        }
    ],
}
CALL_READ = '<|channel|>commentary to=mcp__files__.read_file <|constrain|>json<|message|>{"path": "a.txt"}<|call|>'


def test_a_client_answers_the_search_and_the_model_calls_what_it_loaded(serve: Serve) -> None:
    scripted = Scripted(SEARCH, CALL_READ, CALL_READ)
    client = openai_client(serve(scripted.engine))
    with client.responses.stream(model=MODEL, input="Read a.txt", tools=[CLIENT_SEARCH_TOOL]) as stream:
        events = [event.model_dump() for event in stream]
        first = stream.get_final_response()
    assert "// Search the tools of the connected MCP servers.\ntype tool_search = (_: {" in scripted.prompts[0]
    # The call ends the response, as a function call does: the client runs the search.
    assert _types(first.output) == ["tool_search_call"]
    call = first.output[0]
    assert (call.execution, call.status, call.arguments) == ("client", "completed", {"query": "weather"})
    assert [e["type"] for e in events if e["type"].startswith("response.output_item")] == [
        "response.output_item.added",
        "response.output_item.done",
    ]

    answer = {"type": "tool_search_output", "call_id": call.call_id, "execution": "client", "status": "completed"}
    answer["tools"] = [LOADED_NAMESPACE]
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input=[answer], tools=[CLIENT_SEARCH_TOOL]
    )
    by_id = scripted.prompts[-1]
    # Resent as items (a stateless client, Codex's custom provider): the same prompt, byte for byte.
    resent = [{"role": "user", "content": "Read a.txt"}, call.model_dump(exclude_none=True), answer]
    client.responses.create(model=MODEL, input=resent, tools=[CLIENT_SEARCH_TOOL])
    assert scripted.prompts[-1] == by_id
    message = _tool_message(by_id)
    declared = "## mcp__files__\n\n// Files on disk.\nnamespace mcp__files__ {\n\n// Read a file.\ntype read_file"
    assert declared in message
    # Stored with an id of its kind, as the input items list it.
    [listed] = client.responses.input_items.list(second.id).data
    assert listed.type == "tool_search_output" and listed.id.startswith("tso_")
    # The loaded namespace's function is called as the namespace's, like a declared one.
    [read] = second.output
    assert (read.type, read.name, read.namespace, read.arguments) == (
        "function_call",
        "read_file",
        "mcp__files__",
        '{"path": "a.txt"}',
    )


def test_codex_style_items_with_an_empty_search_result_are_accepted(serve: Serve) -> None:
    # Codex answers an aborted search with no tools (status incomplete); the model is told nothing loaded.
    scripted = Scripted(ANSWER)
    client = openai_client(serve(scripted.engine))
    items: list[Any] = [
        {"role": "user", "content": "Read a.txt"},
        {"type": "tool_search_call", "call_id": "call_s", "execution": "client", "arguments": {"query": "read"}},
        {"type": "tool_search_output", "call_id": "call_s", "execution": "client", "status": "incomplete", "tools": []},
    ]
    response = client.responses.create(model=MODEL, input=items, tools=[CLIENT_SEARCH_TOOL])
    assert response.output_text == "It is sunny in Oslo."
    assert RESULT_HEADER + "No tools matched the query; nothing was loaded.<|end|>" in scripted.prompts[-1]


CALL_ITEM: dict[str, Any] = {"type": "tool_search_call", "call_id": "c1", "execution": "client", "arguments": {}}
OUTPUT_ITEM: dict[str, Any] = {"type": "tool_search_output", "call_id": "c1", "execution": "client", "tools": []}


@pytest.mark.parametrize(
    ("case", "body", "param", "code"),
    [
        ("unknown call field", {"input": [dict(CALL_ITEM, query="x")]}, "input[0].query", "unknown_parameter"),
        ("unknown output field", {"input": [CALL_ITEM, dict(OUTPUT_ITEM, x=1)]}, "input[1].x", "unknown_parameter"),
        ("no arguments", {"input": [{"type": "tool_search_call"}]}, "input[0].arguments", "missing_required_parameter"),
        (
            "output naming no tools",
            {"input": [CALL_ITEM, {"type": "tool_search_output", "call_id": "c1"}]},
            "input[1].tools",
            "missing_required_parameter",
        ),
        (
            "tools not an array",
            {"input": [CALL_ITEM, dict(OUTPUT_ITEM, tools={"type": "function"})]},
            "input[1].tools",
            "invalid_type",
        ),
        (
            "a tool it cannot load",
            {"input": [CALL_ITEM, dict(OUTPUT_ITEM, tools=[{"type": "web_search"}])]},
            "input[1].tools[0].type",
            "invalid_value",
        ),
        (
            "a loaded function without a name",
            {"input": [CALL_ITEM, dict(OUTPUT_ITEM, tools=[{"type": "function"}])]},
            "input[1].tools[0].name",
            "missing_required_parameter",
        ),
        ("bad execution", {"input": [dict(CALL_ITEM, execution="remote")]}, "input[0].execution", "invalid_value"),
        ("bad status", {"input": [dict(CALL_ITEM, status="failed")]}, "input[0].status", "invalid_value"),
        ("output of no call", {"input": [dict(OUTPUT_ITEM, call_id="nope")]}, "input[0].call_id", "invalid_value"),
        (
            "two search tools",
            {"input": "x", "tools": [{"type": "tool_search"}, {"type": "tool_search"}]},
            "tools[1].type",
            "invalid_value",
        ),
        (
            "a function named tool_search",
            {"input": "x", "tools": [{"type": "tool_search"}, dict(WEATHER_TOOL, name="tool_search")]},
            "tools[1].name",
            "invalid_value",
        ),
        (
            "defer_loading not a boolean",
            {"input": "x", "tools": [dict(WEATHER_TOOL, defer_loading="yes")]},
            "tools[0].defer_loading",
            "invalid_type",
        ),
    ],
)
def test_bad_tool_search_input_is_400(serve: Serve, case: str, body: dict[str, Any], param: str, code: str) -> None:
    live = serve(Scripted(ANSWER).engine)
    response = post(live, {"model": MODEL, **body})
    assert response.status_code == 400, (case, response.text)
    error = response.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error"), (case, error)
    assert isinstance(error["message"], str) and error["message"]
    # The SDK raises its 400 error for it, as for any invalid request.
    with pytest.raises(openai.BadRequestError):
        openai_client(live).responses.create(model=MODEL, **json.loads(json.dumps(body)))


def test_a_search_over_websocket_and_past_max_tool_calls(serve: Serve) -> None:
    client = openai_client(serve(Scripted(SEARCH, CALL_WEATHER).engine))
    with client.responses.connect() as connection:
        # max_tool_calls limits the tools that run something; a search only declares tools, so it runs.
        connection.response.create(model=MODEL, input="Weather?", tools=SERVER_TOOLS, max_tool_calls=0)  # type: ignore[arg-type]
        events = [json.loads(connection.recv_bytes())]
        while events[-1]["type"] != "response.completed":
            events.append(json.loads(connection.recv_bytes()))
    check_stream(events)
    output = events[-1]["response"]["output"]
    assert [i["type"] for i in output] == ["tool_search_call", "tool_search_output", "function_call"]
    assert output[1]["tools"][0]["name"] == "get_weather"
