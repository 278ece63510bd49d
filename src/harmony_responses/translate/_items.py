"""What each output item looks like: its ``added`` payload, the events that open it, its delta event.

The shapes follow responses-protocol.md §4 (and the openai 3.57 types): a message is added with
``content: []`` and an ``output_text`` part with ``text: ""`` (openai-python appends and concatenates to
them); a function call with ``arguments: ""``, a custom tool call with ``input: ""``; a code interpreter
call with ``code: ""`` and a real ``container_id``; an MCP approval request is announced only when its
arguments are complete. Keeping the shapes here as data leaves the translator with the order of events,
not the spelling of payloads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ._citations import CitationFilter
from ._custom import InputUnwrapper
from ._recipients import ItemKind, Target

__all__ = [
    "SHAPES",
    "Item",
    "ItemShape",
    "added_item",
    "delta_template",
    "file_search_queries",
    "summary_delta_template",
    "text_part",
    "tool_search_arguments",
    "web_search_action",
]

Event = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ItemShape:
    id_prefix: str
    announced_at_open: bool  # output_item.added when the header completes (all but approval requests)
    opening_part: Callable[[], dict[str, Any]] | None  # content_part.added payload
    in_progress_event: str | None  # e.g. response.code_interpreter_call.in_progress, right after added
    delta_event: str | None  # the event carrying each piece of text, None when the API streams none
    content_index: bool  # whether the delta event carries content_index


def _reasoning_part() -> dict[str, Any]:
    return {"type": "reasoning_text", "text": ""}


def _empty_text_part() -> dict[str, Any]:
    return text_part("", [])


SHAPES: dict[ItemKind, ItemShape] = {
    ItemKind.MESSAGE: ItemShape("msg", True, _empty_text_part, None, "response.output_text.delta", True),
    ItemKind.REASONING: ItemShape("rs", True, _reasoning_part, None, "response.reasoning_text.delta", True),
    ItemKind.FUNCTION_CALL: ItemShape("fc", True, None, None, "response.function_call_arguments.delta", False),
    ItemKind.CUSTOM_TOOL_CALL: ItemShape("ctc", True, None, None, "response.custom_tool_call_input.delta", False),
    ItemKind.CODE_INTERPRETER: ItemShape(
        "ci",
        True,
        None,
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta",
        False,
    ),
    # The API has no argument deltas for web search: the query shows in the done item's action.
    ItemKind.WEB_SEARCH: ItemShape("ws", True, None, "response.web_search_call.in_progress", None, False),
    # No query deltas either: the queries show in the done item (the model's {"queries": [...]}).
    ItemKind.FILE_SEARCH: ItemShape("fs", True, None, "response.file_search_call.in_progress", None, False),
    # Only added and done, both at the end with the whole arguments (responses-protocol.md §4.6).
    ItemKind.MCP_APPROVAL_REQUEST: ItemShape("mcpr", False, None, None, None, False),
    ItemKind.MCP_CALL: ItemShape(
        "mcp", True, None, "response.mcp_call.in_progress", "response.mcp_call_arguments.delta", False
    ),
    # No events of their own in the API: added when the arguments are complete (they are a JSON object, not
    # streamed text), done with the search (server) or at once (client).
    ItemKind.TOOL_SEARCH_CALL: ItemShape("tsc", False, None, None, None, False),
    ItemKind.CLIENT_TOOL_SEARCH_CALL: ItemShape("tsc", False, None, None, None, False),
}


def added_item(
    kind: ItemKind,
    target: Target | None,
    new_id: Callable[[str], str],
    *,
    phase: str | None,
    container_id: str | None,
    approval_request_id: str | None,
) -> dict[str, Any]:
    """The item as ``output_item.added`` carries it."""
    item_id = new_id(SHAPES[kind].id_prefix)
    if kind is ItemKind.MESSAGE:
        return {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
            "phase": phase,
        }
    if kind is ItemKind.REASONING:
        return {"id": item_id, "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
    assert target is not None
    if kind is ItemKind.FUNCTION_CALL:
        added: dict[str, Any] = {
            "id": item_id,
            "type": "function_call",
            "status": "in_progress",
            "name": target.name,
            # The call id shares the item id's random part, so that a call resent without its item id
            # (pydantic-ai sends only call_id) still names the stored item (request/resolve.py).
            "call_id": "call_" + item_id.removeprefix("fc_"),
            "arguments": "",
        }
        if target.namespace is not None:
            added["namespace"] = target.namespace
        return added
    if kind is ItemKind.CUSTOM_TOOL_CALL:
        # ``status`` as the API sends it (its custom tools guide shows "completed"), like a function call's.
        return {
            "id": item_id,
            "type": "custom_tool_call",
            "status": "in_progress",
            "call_id": "call_" + item_id.removeprefix("ctc_"),
            "name": target.name,
            "input": "",
        }
    if kind is ItemKind.CODE_INTERPRETER:
        return {
            "id": item_id,
            "type": "code_interpreter_call",
            "status": "in_progress",
            "code": "",
            "container_id": container_id or new_id("cntr"),
            "outputs": None,
        }
    if kind.is_tool_search:
        return {
            "id": item_id,
            "type": "tool_search_call",
            "status": "in_progress",
            "call_id": "call_" + item_id.removeprefix("tsc_"),
            "execution": "server" if kind is ItemKind.TOOL_SEARCH_CALL else "client",
            "arguments": {},
        }
    if kind is ItemKind.FILE_SEARCH:
        return {"id": item_id, "type": "file_search_call", "status": "in_progress", "queries": [], "results": None}
    if kind is ItemKind.WEB_SEARCH:
        return {
            "id": item_id,
            "type": "web_search_call",
            "status": "in_progress",
            "action": web_search_action(target, None),
        }
    assert target.namespace is not None
    if kind is ItemKind.MCP_APPROVAL_REQUEST:
        return {
            "id": item_id,
            "type": "mcp_approval_request",
            "server_label": target.namespace,
            "name": target.name,
            "arguments": "",
        }
    added = {
        "id": item_id,
        "type": "mcp_call",
        "status": "in_progress",
        "server_label": target.namespace,
        "name": target.name,
        "arguments": "",
    }
    if approval_request_id is not None:
        added["approval_request_id"] = approval_request_id
    return added


class Item:
    """The one open item. Harmony writes one message at a time, so at most one item is open."""

    __slots__ = (
        "added",
        "call_made",
        "channel",
        "cites",
        "delta",
        "fast",
        "index",
        "kind",
        "logprobs",
        "parts",
        "pending_lp",
        "reasoning",
        "summary_delta",
        "summary_open",
        "target",
        "unwrap",
    )

    def __init__(
        self, kind: ItemKind, index: int, added: dict[str, Any], target: Target | None, channel: str | None
    ) -> None:
        self.kind = kind
        self.channel = channel
        self.index = index
        self.added = added
        self.target = target
        self.parts: list[str] = []
        self.delta: Event | None = None  # the delta event's shape, copied per delta
        self.logprobs: list[dict[str, Any]] | None = None  # all logprobs of a message, when asked for
        self.pending_lp: list[dict[str, Any]] = []  # logprobs of tokens not yet in a delta
        self.call_made = False  # a built-in call has been sent (code.done / searching emitted)
        self.cites: CitationFilter | None = None  # a message's browser citations, when a resolver is given
        # A reasoning item streamed as its summary: False until the summary part opens, True after; None when
        # summaries were not asked for.
        self.summary_open: bool | None = None
        self.summary_delta: Event | None = None  # its reasoning_summary_text.delta shape, when summarised
        self.unwrap: InputUnwrapper | None = None  # a custom tool call's input, unwrapped from its JSON
        # The delta template when each piece of text becomes one delta as is (no logprobs, citations, JSON
        # unwrapping or summary): the translator's inline per-token path takes such an item's text tokens.
        self.fast: Event | None = None
        self.reasoning = kind is ItemKind.REASONING

    @property
    def id(self) -> str:
        return self.added["id"]


def text_part(text: str, logprobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def delta_template(shape: ItemShape, item_id: str, index: int) -> Event:
    """The item's delta event with placeholders: copied per delta, then sequence_number and delta set."""
    assert shape.delta_event is not None
    event: Event = {"type": shape.delta_event, "sequence_number": 0, "item_id": item_id, "output_index": index}
    if shape.content_index:
        event["content_index"] = 0
    event["delta"] = ""
    if shape.delta_event == "response.output_text.delta":
        event["logprobs"] = []
    return event


def summary_delta_template(item_id: str, index: int) -> Event:
    """A reasoning item's ``reasoning_summary_text.delta`` shape (one summary part, ``summary_index`` 0)."""
    return {
        "type": "response.reasoning_summary_text.delta",
        "sequence_number": 0,
        "item_id": item_id,
        "output_index": index,
        "summary_index": 0,
        "delta": "",
    }


def tool_search_arguments(text: str) -> Any:
    """A tool search call's ``arguments`` (an object in the API): the model's JSON, or its text if not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def file_search_queries(arguments: str) -> list[str]:
    """A ``file_search_call``'s ``queries``: the strings of the model's ``{"queries": [...]}`` (``[]`` when it
    wrote something else: the session then answers with an error the model reads)."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return []
    queries = parsed.get("queries") if isinstance(parsed, dict) else None
    if isinstance(queries, str):
        return [queries]
    return [q for q in queries if isinstance(q, str)] if isinstance(queries, list) else []


def web_search_action(target: Target | None, arguments: str | None) -> dict[str, Any]:
    """The ``web_search_call`` action, read from the model's arguments when the tool gave none."""
    name = target.name if target is not None else "search"
    args: dict[str, Any] = {}
    if arguments:
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            args = parsed
    if name == "open":
        url = args.get("id")
        return {"type": "open_page", "url": url if isinstance(url, str) else None}
    if name == "find":
        pattern = args.get("pattern")
        return {"type": "find_in_page", "pattern": pattern if isinstance(pattern, str) else "", "url": ""}
    query = args.get("query")
    action: dict[str, Any] = {"type": "search"}
    if isinstance(query, str):
        action["query"] = query
    return action
