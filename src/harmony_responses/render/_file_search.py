"""What gpt-oss reads of the ``file_search`` tool: its system namespace, and the results of each search.

The tool is declared as the system namespace ``file_search`` with one function, ``msearch({queries})``, beside
``browser`` and ``python`` (a developer ``namespace`` tool or an MCP server may not take the name). The model
calls it on analysis, ``to=file_search.msearch``, with ``{"queries": [...]}``; the server searches the tool's
vector stores and answers with a ``file_search.msearch`` tool message (``results_text``) that numbers the
response's searches ``[n]`` and their results ``【n:i†filename】``. The model cites a result by writing its
marker; the translator turns it into a ``file_citation`` (translate/_citations.py). The numbers count the
conversation's ``file_search_call`` items, so a resent conversation renders the same markers again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ._schema_ts import ToolSpec, namespace_body

__all__ = ["FILE_SEARCH_NAMESPACE", "MAX_QUERIES", "MSEARCH_PARAMETERS", "file_search_namespace", "results_text"]

FILE_SEARCH_NAMESPACE = "file_search"
MAX_QUERIES = 5
# Characters a marker's file name may not hold: they would end the marker early (translate/_citations.py).
_MARKER_UNSAFE = re.compile(r"[【】†\n]")

_DESCRIPTION = (
    "Searches the files the user made available to this conversation. Send your message to "
    "`file_search.msearch` to search them.\n"
    "The reply starts with the search's number in brackets, e.g. [2], and marks each result "
    "【{search number}:{result number}†{file name}】, e.g. 【2:0†report.pdf】.\n"
    "When your answer uses a result, cite it by writing its marker exactly as shown, right after the "
    "statement it supports. Cite only results you were shown."
)

# msearch's arguments; also what engines that constrain calls hold them to (run/start.py).
MSEARCH_PARAMETERS = {
    "type": "object",
    "properties": {
        "queries": {
            "type": "array",
            "items": {"type": "string"},
            "description": "What to search for, as full questions or phrases.",
        }
    },
    "required": ["queries"],
}
_MSEARCH = ToolSpec(
    name="msearch",
    description=(
        f"Searches the files for each query (at most {MAX_QUERIES}) and shows the passages that match best. "
        "Prefer one precise query that restates the user's question with the context it needs; add more "
        "only to look up distinct facts."
    ),
    parameters=MSEARCH_PARAMETERS,
)


def file_search_namespace() -> str:
    """The namespace's text, as the system message prints it under ``## file_search``."""
    return namespace_body(FILE_SEARCH_NAMESPACE, _DESCRIPTION, (_MSEARCH,))


def results_text(number: int, queries: Sequence[str], results: Sequence[dict[str, Any]]) -> str:
    """The tool message answering search ``number`` of the conversation: its results in the
    ``file_search_call.results`` shape (``file_id``, ``filename``, ``score``, ``text``), best first."""
    asked = ", ".join(f'"{q}"' for q in queries)
    if not results:
        return f"[{number}] No results for {asked}."
    lines = [f"[{number}] {len(results)} result{'' if len(results) == 1 else 's'} for {asked}."]
    for i, result in enumerate(results):
        name = _MARKER_UNSAFE.sub("_", str(result.get("filename") or result.get("file_id") or "file"))
        score = result.get("score")
        shown = f"{score:.4f}" if isinstance(score, int | float) else "?"
        lines.append("")
        lines.append(f"【{number}:{i}†{name}】 file_id: {result.get('file_id')}, score: {shown}")
        lines.append(str(result.get("text") or "").strip())
    return "\n".join(lines)
