"""The ``file_search`` tool of a response, bound to the caller's vector stores.

The request's (first) ``file_search`` tool names its ``vector_store_ids``; each must be a vector store of the
caller's API key, else the response is refused before it starts with the API's 404, naming
``tools[i].vector_store_ids`` (another key's store is as unknown as one that does not exist). Its
``max_num_results`` (default 10), ``filters``, ``ranking_options.score_threshold`` and
``ranking_options.hybrid_search`` (the weights of hybrid ranking, with ``--embeddings``) apply to every
``msearch`` of the response, run by ``VectorStoreService.search`` (``vector_stores.py``).
"""

from __future__ import annotations

from typing import Any

from ..errors import APIError
from ..request import ResponseRequest
from ..tools.file_search import FileSearchSession
from .vector_stores import DEFAULT_RESULTS, VectorStoreService, hybrid_option

__all__ = ["file_search_session"]

RESULTS_INCLUDE = "file_search_call.results"


async def file_search_session(request: ResponseRequest, service: VectorStoreService | None) -> FileSearchSession | None:
    """The response's file search, or None when the request declares no ``file_search`` tool.

    Raises:
        APIError: 404 for a vector store the caller does not have; 400 when the server keeps no vector
            stores (``service`` is None).
    """
    tools = request.body.get("tools") or ()
    found = [(i, t) for i, t in enumerate(tools) if isinstance(t, dict) and t.get("type") == "file_search"]
    if not found:
        return None
    index, tool = found[0]
    param = f"tools[{index}].vector_store_ids"
    if service is None:
        raise APIError("This server keeps no vector stores, so it cannot run file_search.", param=f"tools[{index}]")
    store_ids: list[str] = list(tool["vector_store_ids"])
    for store_id in store_ids:
        if await service.stores.get(store_id, request.owner) is None:
            raise APIError(f"Vector store with id '{store_id}' not found.", status=404, param=param)
    ranking = tool.get("ranking_options") or {}
    threshold = float(ranking.get("score_threshold") or 0.0)
    weights = hybrid_option(ranking.get("hybrid_search"), f"tools[{index}].ranking_options.hybrid_search")
    limit = tool.get("max_num_results") or DEFAULT_RESULTS
    filters = tool.get("filters")

    async def search(queries: list[str]) -> list[dict[str, Any]]:
        return await service.search(
            request.owner,
            store_ids,
            queries,
            filters=filters,
            max_num_results=limit,
            score_threshold=threshold,
            hybrid=weights,
        )

    return FileSearchSession(
        search,
        include_results=RESULTS_INCLUDE in request.options.include,
        first_number=_earlier_searches(request.model_request.get("input")),
    )


def _earlier_searches(items: Any) -> int:
    """The conversation's ``file_search_call`` items: this response's searches are numbered after them."""
    if not isinstance(items, list):
        return 0
    return sum(1 for item in items if isinstance(item, dict) and item.get("type") == "file_search_call")
