"""Malformed input is the API's 4xx, never a 500, and never reaches the store (issue 16: #1, #6, #13, #15).

Each case is a request the fault campaign found answered 500 (or accepted, and then broke the store or the
client's own types). Both stores run: PostgreSQL is the one that cannot hold NUL in text.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response

from api.helpers import MODEL

ANSWER = ["<|channel|>final<|message|>OK<|return|>"]

REQUESTS: dict[str, tuple[dict[str, Any], str]] = {
    "item type is an object": ({"input": [{"type": {"a": 1}, "role": "user", "content": "hi"}]}, "input[0].type"),
    "item type is an array": ({"input": [{"type": [1], "role": "user", "content": "hi"}]}, "input[0].type"),
    "item_reference without id": ({"input": [{"type": "item_reference"}]}, "input[0].id"),
    "item_reference with a number": ({"input": [{"type": "item_reference", "id": 5}]}, "input[0].id"),
    "mcp_list_tools tool without name": (
        {"input": [{"type": "mcp_list_tools", "server_label": "x", "tools": [{"input_schema": {}}]}, "hi"]},
        "input[0].tools[0].name",
    ),
    "NUL in an item id": ({"input": [{"role": "user", "content": "hi", "id": "msg_\u0000"}]}, "input[0].id"),
    "NUL in an item_reference": ({"input": [{"type": "item_reference", "id": "msg_\u0000"}]}, "input[0].id"),
    "an item id too long for an index": (
        {"input": [{"role": "user", "content": "hi", "id": "msg_" + "x" * 20_000}]},
        "input[0].id",
    ),
    "NUL in previous_response_id": ({"input": "hi", "previous_response_id": "resp_\u0000"}, "previous_response_id"),
    "NUL in conversation": ({"input": "hi", "conversation": "conv_\u0000"}, "conversation"),
    "NUL in conversation.id": ({"input": "hi", "conversation": {"id": "conv_\u0000"}}, "conversation.id"),
    "web_search field of the wrong type": (
        {"input": "hi", "tools": [{"type": "web_search", "search_context_size": 5}]},
        "tools[0].search_context_size",
    ),
    "web_search user_location not an object": (
        {"input": "hi", "tools": [{"type": "web_search", "user_location": "Paris"}]},
        "tools[0].user_location",
    ),
    "empty namespace name": (
        {"input": "hi", "tools": [{"type": "namespace", "name": "", "description": "d", "tools": []}]},
        "tools[0].name",
    ),
    "namespace name too long": (
        {"input": "hi", "tools": [{"type": "namespace", "name": "n" * 65, "description": "d", "tools": []}]},
        "tools[0].name",
    ),
    "server_label too long": (
        {"input": "hi", "tools": [{"type": "mcp", "server_label": "s" * 65, "server_url": "http://127.0.0.1:9/mcp"}]},
        "tools[0].server_label",
    ),
}


@pytest.mark.parametrize("case", sorted(REQUESTS))
def test_malformed_requests_get_a_400_naming_the_parameter(serve: Any, case: str) -> None:
    live = serve(ANSWER)
    body, param = REQUESTS[case]
    response = httpx.post(f"{live.root}/v1/responses", json={"model": MODEL, **body}, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert "expected a string, but got a string" not in error["message"]
    # Nothing was stored and the server still answers.
    assert httpx.get(f"{live.root}/health").status_code == 200


def test_an_empty_name_says_so(serve: Any) -> None:
    live = serve(ANSWER)
    body = {"model": MODEL, "input": "hi", "tools": [{"type": "namespace", "name": "", "tools": []}]}
    error = httpx.post(f"{live.root}/v1/responses", json=body).json()["error"]
    assert error["code"] == "empty_string" and "empty string" in error["message"]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/responses/resp_%00x",
        "/v1/responses/resp_%00x/input_items",
        "/v1/conversations/conv_%00x",
        "/v1/conversations/conv_%00x/items",
        "/v1/responses/" + "r" * 600,
    ],
)
def test_ids_no_object_can_have_are_not_found(serve: Any, path: str) -> None:
    live = serve(ANSWER)
    assert httpx.get(f"{live.root}{path}").status_code == 404
    assert httpx.delete(f"{live.root}{path}").status_code in (404, 405)


def test_conversation_items_are_checked_like_input(serve: Any) -> None:
    live = serve(ANSWER)
    for items, param in (
        ([{"type": {"a": 1}}], "items[0].type"),
        ([{"type": "item_reference"}], "items[0].id"),
        ([{"type": "message", "role": "user", "content": "x", "id": "m\u0000"}], "items[0].id"),
    ):
        response = httpx.post(f"{live.root}/v1/conversations", json={"items": items})
        assert response.status_code == 400 and response.json()["error"]["param"] == param
    conversation = httpx.post(f"{live.root}/v1/conversations", json={}).json()["id"]
    response = httpx.post(f"{live.root}/v1/conversations/{conversation}/items", json={"items": [{"type": [1]}]})
    assert response.status_code == 400 and response.json()["error"]["param"] == "items[0].type"


def test_a_valid_web_search_tool_is_echoed_in_the_clients_own_types(serve: Any) -> None:
    live = serve(ANSWER)
    tool = {
        "type": "web_search",
        "external_web_access": False,
        "filters": {"allowed_domains": ["example.com"]},
        "search_context_size": "low",
        "user_location": {"type": "approximate", "city": "Paris", "country": "FR"},
    }
    client = openai.OpenAI(base_url=live.base_url, api_key="x")
    with client.responses.stream(model=MODEL, input="hi", tools=[tool]) as stream:  # type: ignore[list-item]
        events = list(stream)
    created = events[0].response  # type: ignore[union-attr]
    Response.model_validate(created.model_dump())  # strict validation, not the client's lenient construct
    assert created.tools[0].type == "web_search"


def test_a_request_of_more_items_than_any_context_holds_is_refused_at_once(serve: Any) -> None:
    # 100,000 tiny messages (4 MB) kept the event loop busy for 20 s; no context window holds that many.
    live = serve(ANSWER)
    body = {"model": MODEL, "input": [{"role": "user", "content": "x"}] * 100_000}
    response = httpx.post(f"{live.root}/v1/responses", json=body, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("input", "array_above_max_length")
