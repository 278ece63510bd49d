"""The file_search tool of one response: each ``file_search.msearch`` call searched, numbered and citable.

A call's ``{"queries": [...]}`` goes to ``search`` (the server's vector-store search over the tool's
``vector_store_ids`` with its ``max_num_results``, ``filters`` and ``ranking_options``: run/start.py binds
it), and the model reads the results as ``render/_file_search.results_text`` writes them: the call numbered
after the conversation's earlier file searches (``first_number``), each result ``【n:i†filename】``.
``cite(n, i)`` resolves such a marker for the translator (a ``file_citation``); a call of this response only,
since earlier responses' results are not kept. Bad arguments and failing searches are results with
``error`` set (the item ends ``failed`` and the model reads why), never exceptions.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...errors import APIError
from ...render import FILE_SEARCH_MAX_QUERIES, file_search_results_text
from ...translate import ToolCall
from .._base import ToolResult, ToolSession

__all__ = ["FileSearchSession", "Search"]

logger = logging.getLogger("harmony_responses.file_search")

# queries → results in the vector-store search shape (file_id, filename, score, attributes, content).
Search = Callable[[list[str]], Awaitable[list[dict[str, Any]]]]


class FileSearchSession(ToolSession):
    """Args:
    search: runs the queries over the tool's vector stores.
    include_results: ``file_search_call.results`` is filled (``include: ["file_search_call.results"]``).
    first_number: the number of this response's first search (the conversation's earlier file searches).
    """

    namespace = "file_search"

    def __init__(self, search: Search, *, include_results: bool = False, first_number: int = 0) -> None:
        self._search = search
        self.include_results = include_results
        self.first_number = first_number
        self.searches: list[list[dict[str, Any]]] = []  # each call's results, in the item's shape

    def cite(self, number: int, index: int) -> tuple[str, str] | None:
        """The ``(file_id, filename)`` of result ``index`` of search ``number``, or None."""
        own = number - self.first_number
        if not 0 <= own < len(self.searches) or not 0 <= index < len(self.searches[own]):
            return None
        result = self.searches[own][index]
        return result["file_id"], result["filename"]

    async def call(self, call: ToolCall) -> ToolResult:
        if call.name != "msearch":
            return _failure(f"Unknown function: file_search.{call.name}. Call file_search.msearch.")
        queries = _queries(call.arguments)
        if isinstance(queries, str):
            return _failure(queries)
        try:
            found = await self._search(queries)
        except APIError as exc:
            return _failure(f"The search failed: {exc.message}")
        except Exception as exc:  # a store failure: the model reads it and the response goes on
            logger.exception("file_search.msearch failed")
            return _failure(f"The search failed: {type(exc).__name__}: {exc}")
        results = [_result(hit) for hit in found]
        number = self.first_number + len(self.searches)
        self.searches.append(results)
        text = file_search_results_text(number, queries, results)
        return ToolResult(text=text, results=results if self.include_results else None)


def _queries(arguments: str) -> list[str] | str:
    """The call's queries, or what is wrong with its arguments."""
    try:
        value = json.loads(arguments) if arguments.strip() else None
    except ValueError:
        value = None
    queries = value.get("queries") if isinstance(value, dict) else None
    if isinstance(queries, str):
        queries = [queries]
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        return 'Invalid function arguments: expected {"queries": ["..."]}, an array of strings.'
    queries = [q for q in queries if q.strip()]
    if not queries:
        return "Invalid function arguments: `queries` should hold at least one non-empty query."
    if len(queries) > FILE_SEARCH_MAX_QUERIES:
        return f"Invalid function arguments: at most {FILE_SEARCH_MAX_QUERIES} queries per search."
    return queries


def _result(hit: dict[str, Any]) -> dict[str, Any]:
    """A search result as ``file_search_call.results`` holds it."""
    content: Sequence[Any] = hit.get("content") or ()
    text = "\n".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return {
        "file_id": hit["file_id"],
        "filename": hit.get("filename") or "",
        "score": hit.get("score"),
        "text": text,
        "attributes": hit.get("attributes"),
    }


def _failure(message: str) -> ToolResult:
    return ToolResult(text=json.dumps({"error": message}, ensure_ascii=False), error=message)
