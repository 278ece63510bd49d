"""Input items as they are stored and listed: every item an object with a ``type``, an ``id`` and a status.

Clients send items in many shapes (a bare string, ``{role, content: "text"}`` easy messages, items with or
without ids); ``input_items`` and conversation listings return them in the API's item shapes, so each is
normalised once, before it is rendered and stored (responses-protocol.md §7.2: "assign ``msg_…`` to input
messages that have none"). Normalising changes nothing the renderer reads: string content becomes one
text part, which renders the same.

``item_reference`` items (``{"type": "item_reference", "id": …}``, or just ``{"id": …}``) are left for the
caller to resolve against the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["is_item_reference", "normalize_items"]

# Id prefixes for items a client sent without one (the API's prefixes where it has them).
ID_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "mcp_approval_response": "mcpr",
    "mcp_call": "mcp",
    "web_search_call": "ws",
    "code_interpreter_call": "ci",
    "tool_search_call": "tsc",
    "tool_search_output": "tso",
    "compaction": "cmp",
    "compaction_trigger": "cmpt",
}
# Item types whose listing shape has a status (``completed`` unless the client said otherwise).
_WITH_STATUS = frozenset({"message", "function_call", "function_call_output"})


def is_item_reference(item: dict[str, Any]) -> bool:
    kind = item.get("type")
    return kind == "item_reference" or (kind is None and "role" not in item and isinstance(item.get("id"), str))


def _message(item: dict[str, Any]) -> dict[str, Any]:
    content = item.get("content")
    if isinstance(content, str):
        if item.get("role") == "assistant":
            part: dict[str, Any] = {"type": "output_text", "text": content, "annotations": []}
        else:
            part = {"type": "input_text", "text": content}
        item["content"] = [part]
    item["type"] = "message"
    return item


def normalize_items(raw: Any, new_id: Callable[[str], str]) -> list[dict[str, Any]]:
    """``input`` (a string or a list of item objects, already validated) → items with ids, in order.

    Item references are returned as they are (``is_item_reference``); everything else gets ``type``,
    ``id`` and, for messages and function calls and outputs, ``status``.
    """
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    items: list[dict[str, Any]] = []
    for original in raw:
        item = dict(original)
        if is_item_reference(item):
            items.append(item)
            continue
        if item.get("type", "message") == "message" and "role" in item:
            item = _message(item)
        kind = item.get("type")
        if not isinstance(item.get("id"), str) or not item["id"]:
            item["id"] = new_id(ID_PREFIXES.get(kind, "item") if isinstance(kind, str) else "item")
        if kind in _WITH_STATUS and item.get("status") is None:
            item["status"] = "completed"
        items.append(item)
    return items
