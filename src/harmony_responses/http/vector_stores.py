"""The Vector stores API (shapes of ``openai.types.VectorStore``, ``vector_stores.VectorStoreFile``,
``VectorStoreFileBatch``, ``VectorStoreSearchResponse``); the work is ``run/vector_stores.py``'s.

Routes::

    POST   /v1/vector_stores                                   create {name, file_ids, metadata, expires_after,
                                                               chunking_strategy}
    GET    /v1/vector_stores                                   list; ?after, ?limit 1..100 (20), ?order (desc)
    GET    /v1/vector_stores/{id}                              VectorStore
    POST   /v1/vector_stores/{id}                              modify {name, metadata, expires_after}
    DELETE /v1/vector_stores/{id}                              {"id", "object": "vector_store.deleted", ...}
    POST   /v1/vector_stores/{id}/files                        attach {file_id, attributes, chunking_strategy}
    GET    /v1/vector_stores/{id}/files                        list; ?filter=status, ?after, ?limit, ?order
    GET    /v1/vector_stores/{id}/files/{file_id}              VectorStoreFile
    POST   /v1/vector_stores/{id}/files/{file_id}              update {attributes}
    DELETE /v1/vector_stores/{id}/files/{file_id}              detach (the file itself stays)
    POST   /v1/vector_stores/{id}/file_batches                 {file_ids | files, attributes, chunking_strategy}
    GET    /v1/vector_stores/{id}/file_batches/{batch}         VectorStoreFileBatch
    POST   /v1/vector_stores/{id}/file_batches/{batch}/cancel  its in-progress files cancelled
    GET    /v1/vector_stores/{id}/file_batches/{batch}/files   list (as files)
    POST   /v1/vector_stores/{id}/search                       {query, filters, max_num_results,
                                                               ranking_options, rewrite_query}

Everything is the caller's key's: another key's vector store (or file) is a 404. Answers about a file still
being ingested carry ``openai-poll-after-ms`` (the SDK's ``*_and_poll`` helpers wait that long between polls).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import APIError
from ..request import check_metadata
from ..run.vector_stores import (
    DEFAULT_RESULTS,
    MAX_QUERIES,
    MAX_RESULTS,
    STATUSES,
    VectorStoreFile,
    VectorStoreRecord,
    VectorStoreService,
    check_attributes,
    file_object,
    hybrid_option,
    vector_store_service,
)
from .auth import owner_of
from .errors import json_response
from .stored import _body, _list, _page_params

__all__ = ["routes"]

POLL_AFTER_MS = "100"
RANKERS = ("auto", "default-2024-11-15", "none")


def _service(request: Request) -> tuple[VectorStoreService, str]:
    return vector_store_service(request.app.state.server), owner_of(request)


async def _store(request: Request) -> tuple[VectorStoreService, VectorStoreRecord]:
    service, owner = _service(request)
    return service, await service.get(request.path_params["vector_store_id"], owner)


def _file_response(row: VectorStoreFile) -> Response:
    headers = {"openai-poll-after-ms": POLL_AFTER_MS} if row.status == "in_progress" else None
    return json_response(file_object(row), headers=headers)


# ---------------------------------------------------------------------------------------------- stores


async def create_vector_store(request: Request) -> Response:
    service, owner = _service(request)
    body = await _body(request)
    check_metadata(body)
    record = await service.create(owner, body)
    return json_response(await service.store_object(record))


async def list_vector_stores(request: Request) -> Response:
    service, owner = _service(request)
    after, limit, order = _page_params(request)
    await service.recover()
    page = await service.stores.list(owner, after=after, limit=limit, order=order)
    if page is None:
        raise APIError(f"Invalid 'after': no vector store '{after}'.", param="after", code="invalid_value")
    records, has_more = page
    return _list([await service.store_object(r) for r in records], has_more)


async def retrieve_vector_store(request: Request) -> Response:
    service, record = await _store(request)
    return json_response(await service.store_object(record))


async def modify_vector_store(request: Request) -> Response:
    service, record = await _store(request)
    body = await _body(request)
    check_metadata(body)
    return json_response(await service.store_object(await service.update(record, body)))


async def delete_vector_store(request: Request) -> Response:
    service, owner = _service(request)
    store_id = request.path_params["vector_store_id"]
    if not await service.stores.delete(store_id, owner):
        raise APIError(f"No vector store found with id '{store_id}'.", status=404)
    return json_response({"id": store_id, "object": "vector_store.deleted", "deleted": True})


# ---------------------------------------------------------------------------------------------- files


async def attach_file(request: Request) -> Response:
    service, record = await _store(request)
    return _file_response(await service.attach(record, await _body(request)))


def _status_filter(request: Request) -> str | None:
    status = request.query_params.get("filter") or None
    if status is not None and status not in STATUSES:
        raise APIError(
            f"Invalid value: '{status}'. Supported values are: {', '.join(repr(s) for s in STATUSES)}.",
            param="filter",
            code="invalid_value",
        )
    return status


async def _file_page(request: Request, store_id: str, batch_id: str | None) -> Response:
    service, _ = _service(request)
    after, limit, order = _page_params(request)
    page = await service.stores.list_files(
        store_id, after=after, limit=limit, order=order, status=_status_filter(request), batch_id=batch_id
    )
    if page is None:
        raise APIError(f"Invalid 'after': no file '{after}' in this vector store.", param="after", code="invalid_value")
    rows, has_more = page
    return _list([file_object(r) for r in rows], has_more)


async def list_files(request: Request) -> Response:
    _, record = await _store(request)
    return await _file_page(request, record.id, None)


async def retrieve_file(request: Request) -> Response:
    service, record = await _store(request)
    return _file_response(await service.get_file(record, request.path_params["file_id"]))


async def update_file(request: Request) -> Response:
    service, record = await _store(request)
    row = await service.get_file(record, request.path_params["file_id"])
    body = await _body(request)
    if "attributes" not in body:
        raise APIError(
            "Missing required parameter: 'attributes'.", param="attributes", code="missing_required_parameter"
        )
    await service.stores.set_attributes(record.id, row.file_id, check_attributes(body["attributes"]))
    return _file_response(await service.get_file(record, row.file_id))


async def detach_file(request: Request) -> Response:
    service, record = await _store(request)
    file_id = request.path_params["file_id"]
    if not await service.detach(record.id, file_id):
        raise APIError(f"No file found with id '{file_id}' in vector store '{record.id}'.", status=404)
    return json_response({"id": file_id, "object": "vector_store.file.deleted", "deleted": True})


# ---------------------------------------------------------------------------------------------- batches


async def _batch(service: VectorStoreService, record: VectorStoreRecord, batch_id: str) -> Response:
    created_at = await service.stores.get_batch(batch_id, record.id, record.owner)
    if created_at is None:
        raise APIError(f"No file batch found with id '{batch_id}' in vector store '{record.id}'.", status=404)
    batch = await service.batch_object(batch_id, record.id, created_at)
    headers = {"openai-poll-after-ms": POLL_AFTER_MS} if batch["status"] == "in_progress" else None
    return json_response(batch, headers=headers)


async def create_batch(request: Request) -> Response:
    service, record = await _store(request)
    return await _batch(service, record, await service.attach_batch(record, await _body(request)))


async def retrieve_batch(request: Request) -> Response:
    service, record = await _store(request)
    return await _batch(service, record, request.path_params["batch_id"])


async def cancel_batch(request: Request) -> Response:
    service, record = await _store(request)
    batch_id = request.path_params["batch_id"]
    await _batch(service, record, batch_id)  # a 404 first for a batch of another store
    await service.cancel_batch(record.id, batch_id)
    return await _batch(service, record, batch_id)


async def list_batch_files(request: Request) -> Response:
    service, record = await _store(request)
    batch_id = request.path_params["batch_id"]
    if await service.stores.get_batch(batch_id, record.id, record.owner) is None:
        raise APIError(f"No file batch found with id '{batch_id}' in vector store '{record.id}'.", status=404)
    return await _file_page(request, record.id, batch_id)


# ---------------------------------------------------------------------------------------------- search


def search_options(body: dict[str, Any]) -> tuple[list[str], int, float, tuple[float, float] | None]:
    """``query`` (a string or up to 10 strings), ``max_num_results`` (1..50, 10), the score threshold and
    ``ranking_options.hybrid_search``'s weights (as the file_search tool takes them; None: not given)."""
    query = body.get("query")
    queries = [query] if isinstance(query, str) else query
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
        raise APIError("Invalid 'query': expected a string or an array of strings.", param="query", code="invalid_type")
    if len(queries) > MAX_QUERIES:
        raise APIError(f"Invalid 'query': at most {MAX_QUERIES} queries.", param="query", code="invalid_value")
    limit = body.get("max_num_results", DEFAULT_RESULTS)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_RESULTS:
        raise APIError(
            f"Invalid 'max_num_results': expected an integer between 1 and {MAX_RESULTS}.",
            param="max_num_results",
            code="invalid_value",
        )
    ranking = body.get("ranking_options") or {}
    if not isinstance(ranking, dict):
        raise APIError("Invalid 'ranking_options': expected an object.", param="ranking_options", code="invalid_type")
    if ranking.get("ranker", "auto") not in RANKERS:
        raise APIError(
            f"Invalid 'ranking_options.ranker'. Supported values are: {', '.join(repr(r) for r in RANKERS)}.",
            param="ranking_options.ranker",
            code="invalid_value",
        )
    threshold = ranking.get("score_threshold", 0.0)
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
        raise APIError(
            "Invalid 'ranking_options.score_threshold': expected a number between 0 and 1.",
            param="ranking_options.score_threshold",
            code="invalid_value",
        )
    weights = hybrid_option(ranking.get("hybrid_search"), "ranking_options.hybrid_search")
    return queries, limit, float(threshold), weights


async def search(request: Request) -> Response:
    service, record = await _store(request)
    body = await _body(request)
    queries, limit, threshold, weights = search_options(body)
    results = await service.search(
        record.owner,
        [record.id],
        queries,
        filters=body.get("filters"),
        max_num_results=limit,
        score_threshold=threshold,
        hybrid=weights,
    )
    return json_response(
        {
            "object": "vector_store.search_results.page",
            "search_query": queries,
            "data": results,
            "has_more": False,
            "next_page": None,
        }
    )


PREFIX = "/v1/vector_stores"
routes = [
    Route(PREFIX, create_vector_store, methods=["POST"]),
    Route(PREFIX, list_vector_stores, methods=["GET"]),
    Route(PREFIX + "/{vector_store_id}", retrieve_vector_store, methods=["GET"]),
    Route(PREFIX + "/{vector_store_id}", modify_vector_store, methods=["POST"]),
    Route(PREFIX + "/{vector_store_id}", delete_vector_store, methods=["DELETE"]),
    Route(PREFIX + "/{vector_store_id}/files", attach_file, methods=["POST"]),
    Route(PREFIX + "/{vector_store_id}/files", list_files, methods=["GET"]),
    Route(PREFIX + "/{vector_store_id}/files/{file_id}", retrieve_file, methods=["GET"]),
    Route(PREFIX + "/{vector_store_id}/files/{file_id}", update_file, methods=["POST"]),
    Route(PREFIX + "/{vector_store_id}/files/{file_id}", detach_file, methods=["DELETE"]),
    Route(PREFIX + "/{vector_store_id}/file_batches", create_batch, methods=["POST"]),
    Route(PREFIX + "/{vector_store_id}/file_batches/{batch_id}", retrieve_batch, methods=["GET"]),
    Route(PREFIX + "/{vector_store_id}/file_batches/{batch_id}/cancel", cancel_batch, methods=["POST"]),
    Route(PREFIX + "/{vector_store_id}/file_batches/{batch_id}/files", list_batch_files, methods=["GET"]),
    Route(PREFIX + "/{vector_store_id}/search", search, methods=["POST"]),
]
