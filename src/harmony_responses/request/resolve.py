"""What a request's input means: its items normalised, references and history resolved, reasoning reopened.

``read_request`` is where a ``POST /v1/responses`` body becomes a ``ResponseRequest``: validated once
(``validate.py``), the model name checked, the input items given ids (``items.py``), ``item_reference``
items replaced by the stored items they name, and the prior items of ``previous_response_id`` or
``conversation`` put first in the input (rather than beside it) so that ``truncation: "auto"`` can drop
them too, oldest turns first (run/fit.py works on ``input``). What the renderer reads
(``ResponseRequest.model_request``) also has the reasoning this server sealed into ``encrypted_content``
opened again (and each ``compaction`` item's summary, a 400 when it does not open; ``compaction_trigger``
items are left out and said by ``ResponseRequest.compaction_trigger``), the open turn's items put back as the
model wrote them when this owner stored them (reasoning resent with its id alone: LangChain streaming, LiteLLM
and llm send ``{"type": "reasoning", "id": …, "summary": []}``; function arguments re-serialised: pydantic-ai
sends ``{"city":"Paris"}`` for the model's ``{"city": "Paris"}``), and ``web_search`` tools dropped when the
server has no search backend.

The stored items come through ``History``, which the layer that runs responses implements over the store
(``run/stored.py``): this package reads the request and never the database.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import APIError
from ..ids import random_id
from ..offload import offload
from ..tool_types import is_web_search
from .echo import echo_fields
from .items import is_item_reference, normalize_items
from .sealed import COMPACTION, ReasoningSealer
from .validate import RequestOptions, validate_request

__all__ = ["History", "ResponseRequest", "model_not_found", "read_request", "resolve_items"]

# Requests with more input items than this are validated and normalised in a worker thread.
INLINE_ITEMS = 500


class History(Protocol):
    """Stored items, as the caller (``owner``) may see them."""

    async def find_item(self, item_id: str, owner: str) -> dict[str, Any] | None:
        """The stored item with this id, or None."""

    async def previous_items(self, response_id: str, owner: str) -> list[dict[str, Any]]:
        """The input and output of ``response_id`` and of the responses it continues, oldest first.

        Raises:
            APIError: 400 ``previous_response_not_found`` or ``previous_response_in_progress``.
        """

    async def conversation_items(self, conversation_id: str, owner: str) -> list[dict[str, Any]] | None:
        """The conversation's items, oldest first; None when there is no such conversation."""


@dataclass(slots=True, kw_only=True)
class ResponseRequest:
    """A ``POST /v1/responses`` request, validated and resolved: everything the run needs to know of it."""

    body: dict[str, Any]  # as the client sent it
    options: RequestOptions
    owner: str  # who may see what it stores (a hash of its API key), "" without auth
    store: bool
    background: bool
    previous_response_id: str | None
    conversation_id: str | None
    input_items: list[dict[str, Any]]  # this request's own input: normalised, references resolved
    model_request: dict[str, Any]  # what the renderer reads: prior items first, sealed reasoning opened
    web_search: bool  # the server offers web_search to the model
    # The input ends with a compaction_trigger item: the response is the conversation's compaction.
    compaction_trigger: bool = False

    @property
    def echo(self) -> dict[str, Any]:
        """The Response's echo of the request (responses-protocol.md §6), state fields included."""
        return {
            **echo_fields(self.body),
            "previous_response_id": self.previous_response_id,
            "conversation": {"id": self.conversation_id} if self.conversation_id else None,
            "background": self.background,
            "store": self.store,
        }


def model_not_found(model: str) -> APIError:
    # The API's wording, backticks included.
    return APIError(
        f"The model `{model}` does not exist or you do not have access to it.", status=404, code="model_not_found"
    )


async def resolve_items(raw: Any, owner: str, history: History, *, param: str) -> list[dict[str, Any]]:
    """``raw`` items normalised, each ``item_reference`` replaced by the stored item it names.

    Raises:
        APIError: 400 naming ``{param}[i]`` for a reference to no stored item.
    """
    if isinstance(raw, list) and len(raw) > INLINE_ITEMS:
        # Normalising takes about 6 µs an item: a request of thousands must not keep the event loop (and with
        # it every other stream and health check) waiting.
        items = await offload(normalize_items, raw, random_id)
    else:
        items = normalize_items(raw, random_id)
    for i, item in enumerate(items):
        if is_item_reference(item):
            found = await history.find_item(item["id"], owner)
            if found is None:
                raise APIError(f"Item with id '{item['id']}' not found.", param=f"{param}[{i}]", code="invalid_value")
            items[i] = found
    return items


def _check_forced_web_search(body: Mapping[str, Any]) -> None:
    # Without a backend web_search stays hidden from the model, and forcing it is refused with a 400 rather
    # than rendered as a call to a tool the model was never given.
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and is_web_search(choice.get("type")):
        raise APIError(
            f"Invalid value for 'tool_choice.type': '{choice['type']}' cannot be forced: this server has no "
            "search backend configured (harmony-responses serve --search-dir or --search-backend).",
            param="tool_choice.type",
            code="unsupported_value",
        )


def _opened_compaction(item: Mapping[str, Any], sealer: ReasoningSealer, param: str) -> dict[str, Any]:
    """A ``compaction`` item with its sealed summary opened into ``summary`` (what the renderer reads).

    Unlike reasoning (dropped quietly when its blob does not open), a compaction item stands in for the history
    it replaced: without its summary the model would answer from a conversation with a hole in it, so a blob
    that does not open is a 400.
    """
    text = sealer.open(item.get("encrypted_content"), COMPACTION)
    if text is None:
        raise APIError(
            f"Invalid '{param}': the compaction item's encrypted_content could not be opened. It must be a "
            "compaction item this server made, unchanged (it is sealed with the server's key; another server's "
            "items, edited ones and reasoning items' encrypted_content are refused).",
            param=param,
            code="invalid_encrypted_content",
        )
    return {**item, "summary": text}


def _for_render(
    body: Mapping[str, Any],
    sealer: ReasoningSealer,
    *,
    web_search: bool,
    prior: int = 0,
    prior_param: str = "previous_response_id",
) -> dict[str, Any]:
    """The request as the renderer should see it: hidden web_search tools dropped, sealed reasoning and
    compaction summaries opened, ``compaction_trigger`` items left out (the run acts on them, and a stored
    one in the prior items of ``previous_response_id`` has done its work). ``prior``: how many of the
    input items came from the store, before the client's own (``prior_param`` names them in errors)."""
    request = dict(body)
    tools = body.get("tools")
    if tools and not web_search:
        request["tools"] = [t for t in tools if not is_web_search(t.get("type"))]
    items = body.get("input")
    if isinstance(items, list):
        restored: list[Any] = []
        for index, item in enumerate(items):
            kind = item.get("type")
            if kind == "reasoning" and item.get("encrypted_content") and not item.get("content"):
                text = sealer.open(item["encrypted_content"])
                if text is not None:
                    item = {**item, "content": [{"type": "reasoning_text", "text": text}]}
            elif kind == "compaction":
                where = f"input[{index - prior}].encrypted_content" if index >= prior else prior_param
                item = _opened_compaction(item, sealer, where)
            elif kind == "compaction_trigger":
                continue
            restored.append(item)
        request["input"] = restored
    return request


def _has_text(item: Mapping[str, Any], key: str) -> bool:
    parts = item.get(key)
    return isinstance(parts, list) and any(isinstance(p, dict) and p.get("text") for p in parts)


def _same_json(a: Any, b: Any) -> bool:
    try:
        return isinstance(a, str) and isinstance(b, str) and json.loads(a) == json.loads(b)
    except ValueError:
        return False


async def _as_written(items: list[Any], owner: str, history: History) -> list[Any]:
    """The open turn's items as the model wrote them, from the stored items of their ids.

    Reasoning resent without its text gets the stored text (a summary resent without the content does not stop
    the lookup: the stored content is what the model wrote); a function call whose arguments are the stored
    call's JSON written differently gets the stored text (found by its item id, or by its call id when the
    client dropped the item id). Only the open turn's (after the last user message):
    the renderer keeps no other reasoning (harmony.md §6.2), and the model reads this turn's calls next, while
    each lookup costs a query.
    """
    start = 0
    for index, item in enumerate(items):
        if isinstance(item, dict) and item.get("role") == "user":
            start = index + 1
    restored = list(items)
    for index in range(start, len(items)):
        item = items[index]
        if not isinstance(item, dict):
            continue
        kind, item_id = item.get("type"), item.get("id")
        if not isinstance(item_id, str) or not item_id:
            continue
        if kind == "reasoning" and not _has_text(item, "content"):
            found = await history.find_item(item_id, owner)
            if found is not None and found.get("type") == "reasoning" and _has_text(found, "content"):
                restored[index] = {**item, "content": found["content"]}
        elif kind == "function_call" and isinstance(item.get("arguments"), str):
            found = await history.find_item(item_id, owner)
            call_id = item.get("call_id")
            if found is None and isinstance(call_id, str) and call_id.startswith("call_"):
                # Resent without its item id (pydantic-ai): this server's call ids share their item's random part.
                found = await history.find_item("fc_" + call_id.removeprefix("call_"), owner)
            if (
                found is not None
                and found.get("type") == "function_call"
                and found.get("call_id") == item.get("call_id")
                and found.get("arguments") != item["arguments"]
                and _same_json(found.get("arguments"), item["arguments"])
            ):
                restored[index] = {**item, "arguments": found["arguments"]}
    return restored


async def read_request(
    body: Any,
    *,
    owner: str,
    models: Collection[str],
    history: History,
    sealer: ReasoningSealer,
    web_search: bool,
) -> ResponseRequest:
    """Validate and resolve a ``POST /v1/responses`` body.

    Args:
        body: the parsed JSON body.
        owner: who is asking (``History`` shows only what this owner stored).
        models: the model names the server answers to.
        history: stored items, for references, ``previous_response_id`` and ``conversation``.
        sealer: opens ``encrypted_content`` this server sealed.
        web_search: whether the server has a search backend (else ``web_search`` is hidden from the model).

    Raises:
        APIError: everything a request can be refused for before it runs (400, 404).
    """
    if isinstance(body, dict) and isinstance(body.get("input"), list) and len(body["input"]) > INLINE_ITEMS:
        options = await offload(validate_request, body)
    else:
        options = validate_request(body)
    if options.model not in models:
        raise model_not_found(options.model)
    if not web_search:
        _check_forced_web_search(body)
    items = await resolve_items(body.get("input"), owner, history, param="input")
    previous = body.get("previous_response_id")
    prior: list[dict[str, Any]] | None = None
    if previous is not None:
        prior = await history.previous_items(previous, owner)
    conversation = body.get("conversation")
    conversation_id = conversation if isinstance(conversation, str) or conversation is None else conversation["id"]
    if conversation_id is not None:
        prior = await history.conversation_items(conversation_id, owner)
        if prior is None:
            raise APIError(f"Conversation with id '{conversation_id}' not found.", status=404, param="conversation")
    model_request = _for_render(
        dict(body, input=(prior or []) + items),
        sealer,
        web_search=web_search,
        prior=len(prior or ()),
        prior_param="conversation" if conversation_id is not None else "previous_response_id",
    )
    model_request["input"] = await _as_written(model_request["input"], owner, history)
    return ResponseRequest(
        body=body,
        options=options,
        owner=owner,
        store=body.get("store") is not False,
        background=bool(body.get("background")),
        previous_response_id=previous,
        conversation_id=conversation_id,
        input_items=items,
        model_request=model_request,
        web_search=web_search,
        compaction_trigger=bool(items) and items[-1].get("type") == "compaction_trigger",
    )
