"""Compaction in the prompt: how the model is asked for a summary, and how a ``compaction`` item renders.

Asking (``render_request(..., summarize=True)``): the conversation renders exactly as for an answer (the same
system and developer messages, tools included, so that an engine's prefix cache holds the whole history),
followed by a user message with ``SUMMARY_INSTRUCTION``, and the assistant's turn is prefilled with
``<|channel|>final<|message|>``: the model writes the summary straight away as its final answer, and cannot
call a tool instead (gpt-oss in an agent loop would otherwise often reach for one).

Rendering a ``compaction`` item (its summary opened by request/resolve.py): the item stands in for the history
it replaced. Of the items before the *last* compaction item only messages from the user, the developer and
the system are kept (``/v1/responses/compact`` returns the user messages in the clear, Codex keeps its
developer and user messages, and instructions are never summarised away); the assistant's messages,
reasoning, tool calls and their outputs before it, and earlier compaction items, are what its summary
covers and are not rendered. The item itself renders where it stands as a user message,
``SUMMARY_PREFIX`` + the summary. A conversation therefore renders to the same tokens whether a client
resends everything before a compaction item or only the messages the API keeps, and whether it continues
with ``previous_response_id`` or sends the items itself.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "SUMMARY_INSTRUCTION",
    "SUMMARY_PREFILL",
    "SUMMARY_PREFIX",
    "compacted_items",
    "summary_text",
]

SUMMARY_INSTRUCTION = (
    "The conversation so far is about to be compacted: everything above this message except the user's and "
    "the developer's messages will be replaced by a summary that you write now, and you will continue the "
    "work from that summary alone. Do not call any tool and do not answer the last request. Write the "
    "summary for yourself: the user's goal and every request still open, what has been done so far (the tool "
    "calls that mattered and what they returned, files read or changed, commands run), decisions and their "
    "reasons, facts learned, errors met, and the next steps. Keep names, paths, numbers and code exact. Be "
    "complete but concise; use plain text or short Markdown lists."
)
SUMMARY_PREFILL = "<|channel|>final<|message|>"
SUMMARY_PREFIX = (
    "[The earlier conversation was compacted. Summary of it, written by the assistant to continue from:]\n\n"
)

_KEPT_ROLES = frozenset({"user", "developer", "system"})


def _is_kept_message(item: Any) -> bool:
    if not isinstance(item, dict):
        return True  # not an item at all: left for build_history to refuse
    kind = item.get("type")
    return (kind == "message" or (kind is None and "role" in item)) and item.get("role") in _KEPT_ROLES


def compacted_items(entries: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``(item, location)`` entries with what the last compaction item replaced left out (module docstring)."""
    last = None
    for index, (item, _) in enumerate(entries):
        if isinstance(item, dict) and item.get("type") == "compaction":
            last = index
    if last is None:
        return entries
    return [entry for entry in entries[:last] if _is_kept_message(entry[0])] + entries[last:]


def summary_text(item: dict[str, Any]) -> str | None:
    """The user message text a compaction item renders as; None when its summary was not opened."""
    summary = item.get("summary")
    return SUMMARY_PREFIX + summary if isinstance(summary, str) else None
