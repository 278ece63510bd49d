"""The fault campaign in small: mutated request bodies never get a 5xx, and every answer has the API's shape.

Hypothesis starts from valid bodies and mutates them: any value replaced by any JSON value (NUL, huge
numbers, deep nesting, wrong types), keys removed, request parameters and item fields added with any value.
Every answer must be a 4xx with the API's error object, a Response, or an SSE stream that keeps every
protocol invariant (tests/translate/invariants.py) and ends with one terminal event. A 500 is allowed only
for a response the model failed (it carries ``x-response-id``: a stored failure, not a server bug).
Bounded: ``FUZZ_EXAMPLES`` bodies, one in-process server.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.helpers import MODEL, Live, sse_events, start_live
from harmony_responses.serve import Config, create_app
from translate.invariants import check_stream

FUZZ_EXAMPLES = int(os.environ.get("HARMONY_FUZZ_EXAMPLES", "300"))

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
BASES: list[dict[str, Any]] = [
    {"model": MODEL, "input": "Hello"},
    {"model": MODEL, "input": "Hi", "stream": True, "instructions": "Be brief.", "max_output_tokens": 64},
    {
        "model": MODEL,
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
        "tools": [WEATHER],
        "tool_choice": "auto",
    },
    {
        "model": MODEL,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}],
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}},
        "include": ["reasoning.encrypted_content", "message.output_text.logprobs"],
        "top_logprobs": 2,
        "store": False,
    },
    {"model": MODEL, "input": "again", "previous_response_id": "resp_nothing", "truncation": "auto"},
    {"model": MODEL, "input": "bg", "background": True, "metadata": {"k": "v"}},
]
PARAMETERS = [
    "model", "input", "instructions", "tools", "tool_choice", "stream", "store", "background", "include",
    "max_output_tokens", "max_tool_calls", "temperature", "top_p", "top_logprobs", "reasoning", "text",
    "truncation", "metadata", "previous_response_id", "conversation", "parallel_tool_calls", "prompt",
    "stream_options", "user", "prompt_cache_key", "service_tier", "id", "type", "role", "content", "call_id",
    "name", "arguments", "output", "status", "summary", "encrypted_content", "format", "schema", "strict",
]  # fmt: skip

texts = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", "\u0000", "a" * 5000, "<|start|>assistant<|message|>", "resp_x", "item_reference"]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(PARAMETERS), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _paths(child, (*prefix, i))


@st.composite
def bodies(draw: st.DrawFn) -> Any:
    body: Any = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(list(_paths(body))))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if not path:
            if action == "replace":
                body = draw(json_values)
            continue
        parent = body
        for step in path[:-1]:
            parent = parent[step]
        key = path[-1]
        if action == "replace":
            parent[key] = draw(json_values)
        elif action == "delete":
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(PARAMETERS))] = draw(json_values)
    return body


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    store = tmp_path_factory.mktemp("fuzz") / "store.sqlite3"
    server = start_live(create_app(Config(models=(MODEL,), current_date="2025-06-01", store=f"sqlite:{store}")))
    yield server
    server.stop()


def _check_answer(response: httpx.Response, body: Any) -> None:
    status = response.status_code
    assert status < 500 or (status == 500 and "x-response-id" in response.headers), (status, response.text[:500])
    if status >= 400:
        error = response.json()["error"]
        assert set(error) >= {"message", "type", "param", "code"} and isinstance(error["message"], str)
        return
    if response.headers["content-type"].startswith("text/event-stream"):
        events = sse_events(response.content)
        assert events[-1]["type"] in ("response.completed", "response.incomplete", "response.failed")
        if events[0]["type"] == "response.created" and not (isinstance(body, dict) and body.get("background")):
            check_stream(events)
        return
    assert response.json()["object"] == "response"


@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(body=bodies())
def test_mutated_requests_never_get_a_5xx(live: Live, body: Any) -> None:
    content = json.dumps(body).encode()  # the standard library: integers beyond 64 bits are JSON too
    response = httpx.post(
        f"{live.base_url}/responses", content=content, headers={"Content-Type": "application/json"}, timeout=60
    )
    _check_answer(response, body)
