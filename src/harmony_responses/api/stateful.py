"""Endpoints over stored state: responses (retrieve, stream, delete, input items, cancel) and conversations.

Routes (responses-protocol.md §8; shapes of the ``openai`` package's types)::

    GET    /v1/responses/{id}                    Response; ?stream=true[&starting_after=N] → SSE replay + live
    DELETE /v1/responses/{id}                    {"id", "object": "response.deleted", "deleted": true}
    GET    /v1/responses/{id}/input_items        list; ?after, ?limit 1..100 (20), ?order asc|desc (desc)
    POST   /v1/responses/{id}/cancel             Response (background only; idempotent)
    POST   /v1/conversations                     Conversation; body {items?, metadata?}
    GET    /v1/conversations/{id}                Conversation
    POST   /v1/conversations/{id}                Conversation; body {metadata}
    DELETE /v1/conversations/{id}                {"id", "object": "conversation.deleted", "deleted": true}
    GET    /v1/conversations/{id}/items          list (as input_items)
    POST   /v1/conversations/{id}/items          list of the added items; body {items}
    GET    /v1/conversations/{id}/items/{item}   the item
    DELETE /v1/conversations/{id}/items/{item}   Conversation

Everything is scoped to the caller's API key (``State.owner_of``): another key's response or conversation
is a 404, exactly as one that does not exist. ``GET …?stream=true`` works for every stored response (each
has its event log), not only background ones.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from ..ids import random_id
from ..store import AppendItems, ConversationRecord, CreateConversation
from .errors import APIError, json_response
from .items import is_item_reference, normalize_items
from .responses import read_json_body
from .state import State, not_found
from .validate import check_metadata

__all__ = ["routes"]

MAX_LIMIT = 100
DEFAULT_LIMIT = 20
MAX_ITEMS_PER_REQUEST = 20


def _state(request: Request) -> tuple[State, str]:
    state: State = request.app.state.stateful
    return state, state.owner_of(request)


def _int_query(request: Request, name: str, default: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise APIError(
            f"Invalid type for '{name}': expected an integer, but got a string instead.",
            param=name,
            code="invalid_type",
        ) from None


def _bool_query(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "false").lower()
    if raw not in ("true", "false", "1", "0"):
        raise APIError(f"Invalid value: '{raw}'. Supported values are: 'true' and 'false'.", param=name)
    return raw in ("true", "1")


def _page_params(request: Request) -> tuple[str | None, int, Any]:
    limit = _int_query(request, "limit", DEFAULT_LIMIT)
    assert limit is not None
    if limit < 1:
        raise APIError(
            f"Invalid 'limit': integer below minimum value. Expected a value >= 1, but got {limit} instead.",
            param="limit",
            code="integer_below_min_value",
        )
    if limit > MAX_LIMIT:
        raise APIError(
            f"Invalid 'limit': integer above maximum value. Expected a value <= {MAX_LIMIT}, but got {limit} instead.",
            param="limit",
            code="integer_above_max_value",
        )
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise APIError(
            f"Invalid value: '{order}'. Supported values are: 'asc' and 'desc'.", param="order", code="invalid_value"
        )
    return request.query_params.get("after") or None, limit, order


async def _page(state: State, parent: str, kind: Any, request: Request) -> Response:
    after, limit, order = _page_params(request)
    page = await state.store.list_items(parent, kind, after=after, limit=limit, order=order)
    if page is None:
        raise APIError(f"Invalid 'after': no item with id '{after}' in this list.", param="after", code="invalid_value")
    return _list(page.items, page.has_more)


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
    state, owner = _state(request)
    response_id = request.path_params["response_id"]
    if _bool_query(request, "stream"):
        after = _int_query(request, "starting_after", -1)
        assert after is not None
        return await state.stream(response_id, owner, after=after)
    return json_response(await state.retrieve(response_id, owner))


async def delete_response(request: Request) -> Response:
    state, owner = _state(request)
    response_id = request.path_params["response_id"]
    await state.delete(response_id, owner)
    return json_response({"id": response_id, "object": "response.deleted", "deleted": True})


async def list_input_items(request: Request) -> Response:
    state, owner = _state(request)
    response_id = request.path_params["response_id"]
    if state.live_for(response_id, owner) is None and await state.store.get_response(response_id, owner) is None:
        raise not_found("Response", response_id)
    return await _page(state, response_id, "input", request)


async def cancel_response(request: Request) -> Response:
    state, owner = _state(request)
    return json_response(await state.cancel(request.path_params["response_id"], owner))


# ---------------------------------------------------------------------------------------------- conversations


def _conversation_object(record: ConversationRecord) -> dict[str, Any]:
    return {"id": record.id, "object": "conversation", "created_at": record.created_at, "metadata": record.metadata}


async def _items_from_body(state: State, owner: str, body: dict[str, Any], *, required: bool) -> list[dict[str, Any]]:
    raw = body.get("items")
    if raw is None:
        if required:
            raise APIError("Missing required parameter: 'items'.", param="items", code="missing_required_parameter")
        return []
    if not isinstance(raw, list):
        raise APIError("Invalid type for 'items': expected an array of items.", param="items", code="invalid_type")
    if len(raw) > MAX_ITEMS_PER_REQUEST:
        raise APIError(
            f"Invalid 'items': array too long. Expected an array with maximum length {MAX_ITEMS_PER_REQUEST}, "
            f"but got an array with length {len(raw)} instead.",
            param="items",
            code="array_above_max_length",
        )
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise APIError(
                f"Invalid type for 'items[{i}]': expected an object.", param=f"items[{i}]", code="invalid_type"
            )
    items = normalize_items(raw, random_id)
    for i, item in enumerate(items):
        if is_item_reference(item):
            found = await state.store.find_item(item["id"], owner)
            if found is None:
                raise APIError(f"Item with id '{item['id']}' not found.", param=f"items[{i}]", code="invalid_value")
            items[i] = found
    return items


async def _body(request: Request) -> dict[str, Any]:
    state: State = request.app.state.stateful
    if request.headers.get("content-length") == "0":
        return {}  # the openai client sends no body for a call without parameters
    body = await read_json_body(request, state.config.max_body_bytes)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise APIError("Invalid body: expected a JSON object.", code="invalid_type")
    return body


async def _conversation(state: State, owner: str, request: Request) -> ConversationRecord:
    conversation_id = request.path_params["conversation_id"]
    record = await state.store.get_conversation(conversation_id, owner)
    if record is None:
        raise not_found("Conversation", conversation_id)
    return record


async def create_conversation(request: Request) -> Response:
    state, owner = _state(request)
    body = await _body(request)
    check_metadata(body)
    items = await _items_from_body(state, owner, body, required=False)
    record = ConversationRecord(
        id=random_id("conv"), owner=owner, created_at=int(time.time()), metadata=body.get("metadata") or {}
    )
    encoded = [(item["id"], orjson.dumps(item)) for item in items]
    await state.store.write([CreateConversation(record=record, updated_at=time.time(), items=encoded)])
    return json_response(_conversation_object(record))


async def retrieve_conversation(request: Request) -> Response:
    state, owner = _state(request)
    return json_response(_conversation_object(await _conversation(state, owner, request)))


async def update_conversation(request: Request) -> Response:
    state, owner = _state(request)
    record = await _conversation(state, owner, request)
    body = await _body(request)
    if body.get("metadata") is None:
        raise APIError("Missing required parameter: 'metadata'.", param="metadata", code="missing_required_parameter")
    check_metadata(body)
    updated = await state.store.update_conversation(record.id, owner, body["metadata"], time.time())
    if updated is None:
        raise not_found("Conversation", record.id)
    return json_response(_conversation_object(updated))


async def delete_conversation(request: Request) -> Response:
    state, owner = _state(request)
    conversation_id = request.path_params["conversation_id"]
    if not await state.store.delete_conversation(conversation_id, owner):
        raise not_found("Conversation", conversation_id)
    return json_response({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def list_conversation_items(request: Request) -> Response:
    state, owner = _state(request)
    record = await _conversation(state, owner, request)
    return await _page(state, record.id, "conversation", request)


async def add_conversation_items(request: Request) -> Response:
    state, owner = _state(request)
    record = await _conversation(state, owner, request)
    items = await _items_from_body(state, owner, await _body(request), required=True)
    encoded = [(item["id"], orjson.dumps(item)) for item in items]
    await state.store.write(
        [AppendItems(parent=record.id, kind="conversation", owner=owner, created_at=int(time.time()), items=encoded)]
    )
    return _list(items, False)


async def retrieve_conversation_item(request: Request) -> Response:
    state, owner = _state(request)
    record = await _conversation(state, owner, request)
    item_id = request.path_params["item_id"]
    item = await state.store.get_item(record.id, "conversation", item_id)
    if item is None:
        raise not_found("Item", item_id)
    return json_response(item)


async def delete_conversation_item(request: Request) -> Response:
    state, owner = _state(request)
    record = await _conversation(state, owner, request)
    item_id = request.path_params["item_id"]
    if not await state.store.delete_item(record.id, "conversation", item_id):
        raise not_found("Item", item_id)
    return json_response(_conversation_object(record))


routes = [
    Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
    Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/input_items", list_input_items, methods=["GET"]),
    Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
    Route("/v1/conversations", create_conversation, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}", retrieve_conversation, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}", update_conversation, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}", delete_conversation, methods=["DELETE"]),
    Route("/v1/conversations/{conversation_id}/items", list_conversation_items, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}/items", add_conversation_items, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}/items/{item_id}", retrieve_conversation_item, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}/items/{item_id}", delete_conversation_item, methods=["DELETE"]),
]
