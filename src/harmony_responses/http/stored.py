"""Endpoints over stored state: responses (retrieve, stream, delete, input items, cancel) and conversations.

Routes (responses-protocol.md §8; shapes of the ``openai`` package's types)::

    GET    /v1/responses/{id}                    Response; ?stream=true[&starting_after=N] → SSE replay + live
    DELETE /v1/responses/{id}                    {"id", "object": "response.deleted", "deleted": true}
    GET    /v1/responses/{id}/input_items        list; ?after, ?limit 1..100 (20), ?order asc|desc (desc)
    POST   /v1/responses/{id}/cancel             Response (background only; idempotent)
    GET    /v1/responses/{id}/trace              a traced response's trace: an HTML page; ?format=json (or an
                                                 Accept of application/json but not text/html): its JSON
    POST   /v1/conversations                     Conversation; body {items?, metadata?}
    GET    /v1/conversations/{id}                Conversation
    POST   /v1/conversations/{id}                Conversation; body {metadata}
    DELETE /v1/conversations/{id}                {"id", "object": "conversation.deleted", "deleted": true}
    GET    /v1/conversations/{id}/items          list (as input_items)
    POST   /v1/conversations/{id}/items          list of the added items; body {items}
    GET    /v1/conversations/{id}/items/{item}   the item
    DELETE /v1/conversations/{id}/items/{item}   Conversation

Everything is scoped to the caller's API key (``auth.owner_of``): another key's response or conversation
is a 404, exactly as one that does not exist. ``GET …?stream=true`` works for every stored response (each
has its event log), not only background ones. ``GET /v1/responses/{id}`` says which request created the
response in ``x-created-by-request-id`` (its ``x-request-id``; the answer's own ``x-request-id`` is the GET's).
"""

from __future__ import annotations

from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from ..errors import APIError
from ..request import check_metadata, conversation_items
from ..run import Server, conversation_object
from ..tokentrace import render_page
from .auth import owner_of
from .errors import json_response
from .responses import read_json_body
from .streaming import FollowStream

__all__ = ["routes"]

MAX_LIMIT = 100
DEFAULT_LIMIT = 20
CREATED_BY_HEADER = "x-created-by-request-id"


def _server(request: Request) -> tuple[Server, str]:
    return request.app.state.server, owner_of(request)


def _int_query(request: Request, name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise APIError(
            f"Invalid type for '{name}': expected an integer, but got a string instead.",
            param=name,
            code="invalid_type",
        ) from None
    if value < minimum:
        raise APIError(
            f"Invalid '{name}': integer below minimum value. Expected a value >= {minimum}, but got {value} instead.",
            param=name,
            code="integer_below_min_value",
        )
    if value > maximum:
        raise APIError(
            f"Invalid '{name}': integer above maximum value. Expected a value <= {maximum}, but got {value} instead.",
            param=name,
            code="integer_above_max_value",
        )
    return value


def _bool_query(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "false").lower()
    if raw not in ("true", "false", "1", "0"):
        raise APIError(f"Invalid value: '{raw}'. Supported values are: 'true' and 'false'.", param=name)
    return raw in ("true", "1")


def _page_params(request: Request) -> tuple[str | None, int, Literal["asc", "desc"]]:
    limit = _int_query(request, "limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise APIError(
            f"Invalid value: '{order}'. Supported values are: 'asc' and 'desc'.", param="order", code="invalid_value"
        )
    return request.query_params.get("after") or None, limit, order  # type: ignore[return-value]


def _list(items: list[dict[str, Any]], has_more: bool) -> Response:
    return json_response(
        {
            "object": "list",
            "data": items,
            "first_id": items[0].get("id") if items else None,
            "last_id": items[-1].get("id") if items else None,
            "has_more": has_more,
        }
    )


# ---------------------------------------------------------------------------------------------- responses


async def retrieve_response(request: Request) -> ASGIApp:
    server, owner = _server(request)
    response_id = request.path_params["response_id"]
    if _bool_query(request, "stream"):
        # Sequence numbers are PostgreSQL integers (32 bits; SQLite's have 64): a cursor beyond what the store
        # takes failed in its driver after the stream's 200 had gone out.
        after = _int_query(request, "starting_after", -1, minimum=-(2**31), maximum=2**31 - 1)
        return FollowStream(await server.stored.stream(response_id, owner, after=after))
    response, created_by = await server.stored.retrieve(response_id, owner)
    # The request that created it, for support: its id names that request's log lines (http/observe.py).
    return json_response(response, headers={CREATED_BY_HEADER: created_by} if created_by else None)


async def delete_response(request: Request) -> Response:
    server, owner = _server(request)
    response_id = request.path_params["response_id"]
    await server.stored.delete(response_id, owner)
    return json_response({"id": response_id, "object": "response.deleted", "deleted": True})


async def list_input_items(request: Request) -> Response:
    server, owner = _server(request)
    after, limit, order = _page_params(request)
    items, has_more = await server.stored.input_items(
        request.path_params["response_id"], owner, after=after, limit=limit, order=order
    )
    return _list(items, has_more)


async def cancel_response(request: Request) -> Response:
    server, owner = _server(request)
    return json_response(await server.stored.cancel(request.path_params["response_id"], owner))


# The trace page loads nothing from anywhere: its CSS and script are inline, and this says so to the browser.
TRACE_PAGE_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


async def retrieve_trace(request: Request) -> Response:
    server, owner = _server(request)
    trace = await server.stored.trace(request.path_params["response_id"], owner)
    wanted = request.query_params.get("format")
    if wanted not in (None, "", "json", "html"):
        raise APIError(
            f"Invalid value: '{wanted}'. Supported values are: 'html' and 'json'.", param="format", code="invalid_value"
        )
    accept = request.headers.get("accept", "")
    if wanted == "json" or (not wanted and "application/json" in accept and "text/html" not in accept):
        return json_response(trace)
    return HTMLResponse(
        render_page(trace),
        headers={"content-security-policy": TRACE_PAGE_POLICY, "x-content-type-options": "nosniff"},
    )


# ---------------------------------------------------------------------------------------------- conversations


async def _body(request: Request) -> dict[str, Any]:
    if request.headers.get("content-length") == "0":
        return {}  # the openai client sends no body for a call without parameters
    body = await read_json_body(request, request.app.state.max_body_bytes)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise APIError("Invalid body: expected a JSON object.", code="invalid_type")
    return body


async def create_conversation(request: Request) -> Response:
    server, owner = _server(request)
    body = await _body(request)
    check_metadata(body)
    record = await server.conversations.create(owner, body.get("metadata"), conversation_items(body, required=False))
    return json_response(conversation_object(record))


async def retrieve_conversation(request: Request) -> Response:
    server, owner = _server(request)
    return json_response(
        conversation_object(await server.conversations.get(request.path_params["conversation_id"], owner))
    )


async def update_conversation(request: Request) -> Response:
    server, owner = _server(request)
    record = await server.conversations.get(request.path_params["conversation_id"], owner)
    body = await _body(request)
    if body.get("metadata") is None:
        raise APIError("Missing required parameter: 'metadata'.", param="metadata", code="missing_required_parameter")
    check_metadata(body)
    return json_response(conversation_object(await server.conversations.update(record, body["metadata"])))


async def delete_conversation(request: Request) -> Response:
    server, owner = _server(request)
    conversation_id = request.path_params["conversation_id"]
    await server.conversations.delete(conversation_id, owner)
    return json_response({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def list_conversation_items(request: Request) -> Response:
    server, owner = _server(request)
    after, limit, order = _page_params(request)
    items, has_more = await server.conversations.items(
        request.path_params["conversation_id"], owner, after=after, limit=limit, order=order
    )
    return _list(items, has_more)


async def add_conversation_items(request: Request) -> Response:
    server, owner = _server(request)
    record = await server.conversations.get(request.path_params["conversation_id"], owner)
    items = await server.conversations.add_items(record, conversation_items(await _body(request), required=True))
    return _list(items, False)


async def retrieve_conversation_item(request: Request) -> Response:
    server, owner = _server(request)
    path = request.path_params
    return json_response(await server.conversations.item(path["conversation_id"], owner, path["item_id"]))


async def delete_conversation_item(request: Request) -> Response:
    server, owner = _server(request)
    path = request.path_params
    record = await server.conversations.delete_item(path["conversation_id"], owner, path["item_id"])
    return json_response(conversation_object(record))


routes = [
    Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
    Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/input_items", list_input_items, methods=["GET"]),
    Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
    Route("/v1/responses/{response_id}/trace", retrieve_trace, methods=["GET"]),
    Route("/v1/conversations", create_conversation, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}", retrieve_conversation, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}", update_conversation, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}", delete_conversation, methods=["DELETE"]),
    Route("/v1/conversations/{conversation_id}/items", list_conversation_items, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}/items", add_conversation_items, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}/items/{item_id}", retrieve_conversation_item, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}/items/{item_id}", delete_conversation_item, methods=["DELETE"]),
]
