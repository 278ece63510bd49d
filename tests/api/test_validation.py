"""Request validation over HTTP: every parameter, good and bad, with the API's status, param, code and wording."""

# The case tables keep one case per line (with the API's full messages), so they run past 120 columns.
# ruff: noqa: E501

from __future__ import annotations

from typing import Any

import pytest

from .helpers import MODEL, WEATHER_TOOL, Live, post

STRICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "string"}},
    "required": ["a"],
    "additionalProperties": False,
}
CODEX_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a command.",
        "strict": False,
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    },
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Agents.",
        "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object", "properties": {}}}],
    },
    {"type": "web_search", "external_web_access": False},
]

# Each case: extra fields (merged into a valid request), then the expected 200.
GOOD: list[tuple[str, dict[str, Any]]] = [
    ("nulls everywhere", {k: None for k in (
        "instructions", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls",
        "max_output_tokens", "max_tool_calls", "temperature", "top_p", "top_logprobs", "reasoning", "text",
        "truncation", "store", "background", "previous_response_id", "conversation", "include", "metadata",
        "user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier", "prompt",
    )}),  # fmt: skip
    ("unknown fields", {"client_metadata": {"thread_id": "t"}, "some_future_field": [1, 2]}),
    ("input items", {"input": [{"role": "developer", "content": "Be nice."}, {"role": "user", "content": "Hi"}]}),
    ("instructions list", {"instructions": [{"role": "developer", "content": "Be nice."}]}),
    ("max_output_tokens 16", {"max_output_tokens": 16}),
    ("temperature bounds", {"temperature": 0, "top_p": 1}),
    ("temperature 2", {"temperature": 2.0, "top_p": 0.0}),
    ("top_logprobs 20", {"top_logprobs": 20, "include": ["message.output_text.logprobs"]}),
    ("top_logprobs 0", {"top_logprobs": 0}),
    ("every effort", {"reasoning": {"effort": "xhigh", "summary": "auto"}}),
    ("effort none", {"reasoning": {"effort": "none"}}),
    ("effort max", {"reasoning": {"effort": "max", "generate_summary": "concise"}}),
    ("text json_object", {"text": {"format": {"type": "json_object"}, "verbosity": "low"}}),
    ("text json_schema not strict", {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}}),
    ("text json_schema strict", {"text": {"format": {"type": "json_schema", "name": "a-b_1", "schema": STRICT_SCHEMA, "strict": True}}}),
    ("include all", {"include": ["reasoning.encrypted_content", "message.output_text.logprobs", "web_search_call.action.sources"]}),
    ("truncation auto", {"truncation": "auto"}),
    ("metadata 16", {"metadata": {f"k{i}": "v" * 512 for i in range(16)}}),
    ("store false", {"store": False, "background": False}),
    ("codex tools", {"tools": CODEX_TOOLS, "tool_choice": "auto", "parallel_tool_calls": True}),
    ("tool_choice required", {"tools": [WEATHER_TOOL], "tool_choice": "required"}),
    ("tool_choice none", {"tools": [WEATHER_TOOL], "tool_choice": "none"}),
    ("tool_choice function", {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "name": "get_weather"}}),
    ("tool_choice allowed", {"tools": [WEATHER_TOOL], "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]}}),
    ("strict function", {"tools": [WEATHER_TOOL]}),
    ("function without parameters", {"tools": [{"type": "function", "name": "now"}]}),
    ("ids and keys", {"user": "u", "safety_identifier": "s", "prompt_cache_key": "k", "service_tier": "flex", "prompt_cache_retention": "24h"}),
    ("stream_options", {"stream_options": {"include_obfuscation": False}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "extra"), GOOD, ids=[name for name, _ in GOOD])
def test_valid_requests(shared_server: Live, name: str, extra: dict[str, Any]) -> None:
    body = {"model": MODEL, "input": "Hi", **extra}
    response = post(shared_server, body)
    # The echo engine's answer is 29 tokens of prose: cut at 16, and not the JSON a strict schema wants (a
    # response that fails without streaming is an HTTP 500, the request itself was accepted).
    if name == "text json_schema strict":
        assert response.status_code == 500 and "does not match the JSON schema 'a-b_1'" in response.text
        return
    assert response.status_code == 200, response.text
    expected = {"max_output_tokens 16": "incomplete"}.get(name, "completed")
    assert response.json()["status"] == expected


def test_echo_of_the_request(shared_server: Live) -> None:
    body = {
        "model": MODEL,
        "input": "Hi",
        "instructions": "Be nice.",
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "max_output_tokens": 500,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_logprobs": 3,
        "reasoning": {"effort": "low", "summary": "auto"},
        # Not strict: the echo engine's prose would fail a strict schema (an HTTP 500, no Response to read).
        "text": {"format": {"type": "json_schema", "name": "x", "schema": STRICT_SCHEMA, "strict": False}},
        "truncation": "auto",
        "store": False,
        "metadata": {"a": "b"},
        "user": "u",
        "safety_identifier": "s",
        "prompt_cache_key": "k",
        "parallel_tool_calls": False,
        "service_tier": "auto",
    }
    response = post(shared_server, body).json()
    for key in ("instructions", "tool_choice", "max_output_tokens", "truncation", "store", "metadata", "user"):
        assert response[key] == body[key], key
    for key in ("safety_identifier", "prompt_cache_key", "parallel_tool_calls", "top_logprobs"):
        assert response[key] == body[key], key
    assert response["temperature"] == 0.5 and response["top_p"] == 0.9
    assert response["reasoning"] == {"effort": "low", "summary": "auto"}
    assert response["text"]["format"]["name"] == "x" and response["text"]["format"]["strict"] is False
    assert response["service_tier"] == "default"
    assert [t["type"] for t in response["tools"]] == ["function", "namespace", "web_search"]
    function = response["tools"][0]
    assert {"description", "parameters", "strict"} <= set(function)
    assert response["tools"][1]["tools"][0]["strict"] is None  # nested function tools are echoed in full too
    defaults = post(shared_server, {"model": MODEL, "input": "Hi"}).json()
    assert (defaults["temperature"], defaults["top_p"], defaults["tool_choice"], defaults["store"]) == (
        1.0,
        1.0,
        "auto",
        True,
    )
    assert defaults["metadata"] == {} and defaults["tools"] == [] and defaults["truncation"] == "disabled"


def _deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(levels):
        node = {"items": node}
    return {"items": node}


# Each case: extra fields, expected status, param, code, and a fragment (or the whole) of the message.
BAD: list[tuple[str, dict[str, Any], int, str | None, str, str]] = [
    ("missing model", {"model": None}, 400, "model", "missing_required_parameter", "Missing required parameter: 'model'."),
    ("model type", {"model": 5}, 400, "model", "invalid_type", "Invalid type for 'model': expected a string, but got an integer instead."),
    ("input type", {"input": 5}, 400, "input", "invalid_type", "expected a string or an array of input items"),
    ("input item type", {"input": ["hi"]}, 400, "input[0]", "invalid_type", "Invalid type for 'input[0]': expected an object"),
    ("input item render", {"input": [{"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]}, 400, "input[0].content[0]", None, ""),
    ("instructions type", {"instructions": 3}, 400, "instructions", "invalid_type", "Invalid type for 'instructions': expected a string or an array of input items, but got an integer instead."),
    ("stream type", {"stream": "yes"}, 400, "stream", "invalid_type", "expected a boolean, but got a string"),
    ("max_output_tokens low", {"max_output_tokens": 1}, 400, "max_output_tokens", "integer_below_min_value",
     "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 1 instead."),
    ("max_output_tokens type", {"max_output_tokens": "10"}, 400, "max_output_tokens", "invalid_type", "expected an integer"),
    ("max_output_tokens bool", {"max_output_tokens": True}, 400, "max_output_tokens", "invalid_type", "got a boolean"),
    ("max_output_tokens float", {"max_output_tokens": 20.5}, 400, "max_output_tokens", "invalid_type", "got a decimal"),
    ("temperature high", {"temperature": 2.5}, 400, "temperature", "decimal_above_max_value",
     "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 2.5 instead."),
    ("temperature low", {"temperature": -1}, 400, "temperature", "decimal_below_min_value", "Expected a value >= 0"),
    ("temperature type", {"temperature": "hot"}, 400, "temperature", "invalid_type", "expected a decimal, but got a string"),
    ("top_p high", {"top_p": 1.5}, 400, "top_p", "decimal_above_max_value", "Expected a value <= 1, but got 1.5"),
    ("top_logprobs high", {"top_logprobs": 21}, 400, "top_logprobs", "integer_above_max_value", "Expected a value <= 20, but got 21"),
    ("top_logprobs low", {"top_logprobs": -1}, 400, "top_logprobs", "integer_below_min_value", ""),
    ("max_tool_calls type", {"max_tool_calls": "x"}, 400, "max_tool_calls", "invalid_type", ""),
    ("parallel_tool_calls type", {"parallel_tool_calls": 1}, 400, "parallel_tool_calls", "invalid_type", ""),
    ("reasoning type", {"reasoning": "high"}, 400, "reasoning", "invalid_type", "expected an object"),
    ("effort value", {"reasoning": {"effort": "extreme"}}, 400, "reasoning.effort", "invalid_value",
     "Invalid value: 'extreme'. Supported values are: 'none', 'minimal', 'low', 'medium', 'high', 'xhigh', and 'max'."),
    ("summary value", {"reasoning": {"summary": "long"}}, 400, "reasoning.summary", "invalid_value", ""),
    ("text type", {"text": "json"}, 400, "text", "invalid_type", ""),
    ("verbosity", {"text": {"verbosity": "loud"}}, 400, "text.verbosity", "invalid_value", ""),
    ("format type", {"text": {"format": {"type": "xml"}}}, 400, "text.format.type", "invalid_value", "'text', 'json_object', and 'json_schema'"),
    ("format name missing", {"text": {"format": {"type": "json_schema", "schema": STRICT_SCHEMA}}}, 400, "text.format.name", "missing_required_parameter", ""),
    ("format name pattern", {"text": {"format": {"type": "json_schema", "name": "my schema", "schema": STRICT_SCHEMA}}}, 400,
     "text.format.name", "invalid_value", "string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."),
    ("format name long", {"text": {"format": {"type": "json_schema", "name": "a" * 65, "schema": STRICT_SCHEMA}}}, 400,
     "text.format.name", "string_above_max_length", "maximum length 64, but got a string with length 65"),
    ("format schema missing", {"text": {"format": {"type": "json_schema", "name": "x"}}}, 400, "text.format.schema", "missing_required_parameter", ""),
    ("format schema invalid", {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "objekt"}}}}, 400,
     "text.format.schema", "invalid_json_schema", "Invalid schema for response_format 'x': "),
    ("strict additionalProperties", {"text": {"format": {"type": "json_schema", "name": "x", "strict": True,
     "schema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}}}, 400, "text.format.schema", "invalid_json_schema",
     "Invalid schema for response_format 'x': In context=(), 'additionalProperties' is required to be supplied and to be false."),
    ("strict nested", {"text": {"format": {"type": "json_schema", "name": "x", "strict": True, "schema": {
     "type": "object", "required": ["a"], "additionalProperties": False,
     "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}, "additionalProperties": False}}}}}},
     400, "text.format.schema", "invalid_json_schema",
     "In context=('properties', 'a'), 'required' is required to be supplied and to be an array including every key in properties. Missing 'b'."),
    ("strict root array", {"text": {"format": {"type": "json_schema", "name": "x", "strict": True, "schema": {"type": "array"}}}}, 400,
     "text.format.schema", "invalid_json_schema", "schema must be a JSON Schema of 'type: \"object\"', got 'type: \"array\"'."),
    ("deep schema", {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "properties": {"a": {"items": {}}}} | _deep(200)}}}, 400,
     "text.format.schema", "invalid_json_schema", "nested more than 64 levels"),
    ("include value", {"include": ["everything"]}, 400, "include[0]", "invalid_value", "Invalid value: 'everything'. Supported values are: "),
    ("include type", {"include": "reasoning.encrypted_content"}, 400, "include", "invalid_type", "expected an array"),
    ("truncation value", {"truncation": "middle"}, 400, "truncation", "invalid_value", "Invalid value: 'middle'. Supported values are: 'auto' and 'disabled'."),
    ("store type", {"store": "no"}, 400, "store", "invalid_type", ""),
    ("metadata type", {"metadata": ["a"]}, 400, "metadata", "invalid_type", ""),
    ("metadata pairs", {"metadata": {f"k{i}": "v" for i in range(17)}}, 400, "metadata", "object_above_max_properties",
     "Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got an object with 17 properties instead."),
    ("metadata key", {"metadata": {"k" * 65: "v"}}, 400, "metadata", "string_above_max_length", "maximum length 64"),
    ("metadata value", {"metadata": {"k": "v" * 513}}, 400, "metadata.k", "string_above_max_length", "maximum length 512, but got a string with length 513"),
    ("metadata value type", {"metadata": {"k": 1}}, 400, "metadata.k", "invalid_type", "expected a string, but got an integer"),
    ("user type", {"user": 1}, 400, "user", "invalid_type", ""),
    ("prompt_cache_retention", {"prompt_cache_retention": "forever"}, 400, "prompt_cache_retention", "invalid_value", ""),
    ("tools type", {"tools": {"type": "function"}}, 400, "tools", "invalid_type", ""),
    ("tool type missing", {"tools": [{"name": "x"}]}, 400, "tools[0].type", "missing_required_parameter", ""),
    ("tool type unknown", {"tools": [{"type": "teleport"}]}, 400, "tools[0].type", "invalid_value", "Invalid value: 'teleport'."),
    ("file search", {"tools": [WEATHER_TOOL, {"type": "file_search", "vector_store_ids": []}]}, 400,
     "tools[1].vector_store_ids", "invalid_value", "expected at least one vector store id"),
    ("computer use", {"tools": [WEATHER_TOOL, {"type": "computer_use_preview"}]}, 400, "tools[1].type",
     "unsupported_value", "'computer_use_preview' tools are not supported by this server"),
    ("code interpreter container missing", {"tools": [{"type": "code_interpreter"}]}, 400, "tools[0].container", "missing_required_parameter", ""),
    ("code interpreter container type", {"tools": [{"type": "code_interpreter", "container": 3}]}, 400, "tools[0].container", "invalid_type", ""),
    ("code interpreter container kind", {"tools": [{"type": "code_interpreter", "container": {"type": "big"}}]}, 400, "tools[0].container.type", "invalid_value", "'big'"),
    ("code interpreter file_ids", {"tools": [{"type": "code_interpreter", "container": {"type": "auto", "file_ids": ["file_1"]}}]}, 400, "tools[0].container.file_ids", "unsupported_value", "Files API"),
    ("code interpreter memory_limit", {"tools": [{"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "2g"}}]}, 400, "tools[0].container.memory_limit", "invalid_value", ""),
    ("code interpreter unknown container", {"tools": [{"type": "code_interpreter", "container": "cntr_nope"}]}, 400, "tools[0].container", "invalid_value", "'cntr_nope' not found"),
    ("mcp server_url", {"tools": [{"type": "mcp", "server_label": "x"}]}, 400, "tools[0].server_url", "missing_required_parameter", "'tools[0].server_url'"),
    ("custom tool format", {"tools": [{"type": "custom", "name": "x", "format": {"type": "yaml"}}]}, 400, "tools[0].format.type", "invalid_value", ""),
    ("custom tool syntax", {"tools": [{"type": "custom", "name": "x", "format": {"type": "grammar", "syntax": "ebnf", "definition": "a"}}]}, 400, "tools[0].format.syntax", "invalid_value", ""),
    ("custom tool definition", {"tools": [{"type": "custom", "name": "x", "format": {"type": "grammar", "syntax": "lark"}}]}, 400, "tools[0].format.definition", "missing_required_parameter", ""),
    ("custom tool name", {"tools": [{"type": "custom", "name": "a b"}]}, 400, "tools[0].name", "invalid_value", ""),
    ("tool_choice custom undeclared", {"tools": [{"type": "custom", "name": "x"}], "tool_choice": {"type": "custom", "name": "y"}}, 400, "tool_choice.name", "invalid_value", "Tool choice 'custom' with name 'y' not found"),
    ("tool_search execution", {"tools": [{"type": "tool_search", "execution": "remote"}]}, 400, "tools[0].execution", "invalid_value", ""),
    ("function name missing", {"tools": [{"type": "function"}]}, 400, "tools[0].name", "missing_required_parameter", ""),
    ("function name pattern", {"tools": [{"type": "function", "name": "get weather"}]}, 400, "tools[0].name", "invalid_value", "does not match pattern"),
    ("function parameters type", {"tools": [{"type": "function", "name": "f", "parameters": "{}"}]}, 400, "tools[0].parameters", "invalid_type", ""),
    ("function strict type", {"tools": [{"type": "function", "name": "f", "strict": "yes"}]}, 400, "tools[0].strict", "invalid_type", ""),
    ("strict function schema", {"tools": [{"type": "function", "name": "f", "strict": True, "parameters": {"type": "object", "properties": {}}}]}, 400,
     "tools[0].parameters", "invalid_function_parameters",
     "Invalid schema for function 'f': In context=(), 'additionalProperties' is required to be supplied and to be false."),
    ("namespace member", {"tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "custom", "name": "x"}]}]}, 400, "tools[0].tools[0].type", "unsupported_value", ""),
    ("strict function keyword", {"tools": [{"type": "function", "name": "f", "strict": True, "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"], "additionalProperties": False}}]}, 400,
     "tools[0].parameters", "invalid_function_parameters",
     "Invalid schema for function 'f': In context=('properties', 'n'), 'minimum' is not supported by the grammar that constrains the arguments."),
    ("strict namespace function format", {"tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f", "strict": True, "parameters": {"type": "object", "properties": {"u": {"type": "string", "format": "iri"}}, "required": ["u"], "additionalProperties": False}}]}]}, 400,
     "tools[0].tools[0].parameters", "invalid_function_parameters", "In context=('properties', 'u'), 'format' 'iri' is not supported."),
    ("tool_choice value", {"tool_choice": "always"}, 400, "tool_choice", "invalid_value", "'none', 'auto', and 'required'"),
    ("tool_choice required without tools", {"tool_choice": "required"}, 400, "tool_choice", "invalid_value", "must be specified with 'tools'"),
    ("tool_choice unknown function", {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "name": "nope"}}, 400, "tool_choice.name", "invalid_value", "'nope' not found"),
    ("tool_choice hosted", {"tool_choice": {"type": "web_search_preview"}}, 400, "tool_choice.type", "unsupported_value", ""),
    ("tool_choice allowed mode", {"tools": [WEATHER_TOOL], "tool_choice": {"type": "allowed_tools", "mode": "all", "tools": []}}, 400, "tool_choice.mode", "invalid_value", ""),
    ("tool_choice type", {"tool_choice": 1}, 400, "tool_choice", "invalid_type", ""),
    ("previous_response_id", {"previous_response_id": "resp_x"}, 400, "previous_response_id", "previous_response_not_found",
     "Previous response with id 'resp_x' not found."),
    ("background without store", {"background": True, "store": False}, 400, "background", "invalid_value", "requires 'store'"),
    ("conversation", {"conversation": "conv_1"}, 404, "conversation", None, "Conversation with id 'conv_1' not found."),
    ("conversation object", {"conversation": {"id": "conv_1"}}, 404, "conversation", None, "Conversation with id 'conv_1'"),
    ("conversation id type", {"conversation": {"id": 1}}, 400, "conversation.id", "invalid_type", ""),
    # A malformed id is 400, as the API answers; only a well-formed one is looked up (the 404 above).
    ("conversation id prefix", {"conversation": "1"}, 400, "conversation", "invalid_value",
     "Invalid 'conversation': '1'. Expected an ID that begins with 'conv_'."),
    ("conversation object id prefix", {"conversation": {"id": "resp_1"}}, 400, "conversation.id", "invalid_value",
     "Expected an ID that begins with 'conv_'."),
    ("conversation and previous", {"conversation": "conv_1", "previous_response_id": "resp_x"}, 400, None,
     "mutually_exclusive_parameters", "Mutually exclusive parameters"),
    ("prompt", {"prompt": {"id": "pmpt_1"}}, 400, "prompt", "unsupported_parameter", ""),
]  # fmt: skip


@pytest.mark.parametrize(("name", "extra", "status", "param", "code", "message"), BAD, ids=[case[0] for case in BAD])
def test_invalid_requests(
    shared_server: Live,
    name: str,
    extra: dict[str, Any],
    status: int,
    param: str | None,
    code: str | None,
    message: str,
) -> None:
    body = {"model": MODEL, "input": "Hi", **extra}
    body = {k: v for k, v in body.items() if not (k == "model" and v is None)}
    for stream in (False, True):
        response = post(shared_server, {**body, "stream": stream} if "stream" not in extra else body)
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] == param
        if code is not None:
            assert error["code"] == code
        assert message in error["message"]
