"""Shared helpers for the translator tests: Harmony text → token ids, a deterministic Translator, running one.

The translator is driven at its real boundary: token ids in (made from Harmony text by openai-harmony's own
encoder), event dicts out. Ids are deterministic (``msg_0``, ``fc_1``, …) and the clock is fixed, so whole
event lists can be compared literally.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from harmony_responses.translate import RecipientMap, Translator
from harmony_responses.vocab import load_encoding, load_vocabulary

CREATED_AT = 1_700_000_000
COMPLETED_AT = 1_700_000_042

VOCAB = load_vocabulary()
ENCODING = load_encoding()

# Stop tokens, and the special ids a model can emit in practice (199998..200012 covers every named one).
RETURN, CALL = 200002, 200012
SPECIAL_IDS = tuple(range(199998, 200013))


def tokens(text: str) -> list[int]:
    """Token ids of Harmony text with special tokens written literally (``<|channel|>`` …)."""
    return ENCODING.encode(text, allowed_special="all")


def id_factory() -> Callable[[str], str]:
    counter = itertools.count()
    return lambda prefix: f"{prefix}_{next(counter)}"


class Clock:
    """``created_at`` on the first call, ``completed_at`` on every later one."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return CREATED_AT if self.calls == 1 else COMPLETED_AT


def make_translator(
    tools: Iterable[dict[str, Any]] | None = None,
    *,
    logprobs: bool = False,
    response: dict | None = None,
    summaries: bool = False,
) -> Translator:
    return Translator(
        vocab=VOCAB,
        new_id=id_factory(),
        clock=Clock(),
        response=response,
        recipients=RecipientMap.from_tools(tools) if tools is not None else None,
        logprobs=logprobs,
        summaries=summaries,
    )


def translate(
    text_or_ids: str | Sequence[int],
    finish: str = "stop",
    *,
    tools: Iterable[dict[str, Any]] | None = None,
    chunk: int | None = None,
    message: str | None = None,
) -> list[dict[str, Any]]:
    """All events for one engine call's output (``chunk`` tokens at a time; all at once by default)."""
    ids = tokens(text_or_ids) if isinstance(text_or_ids, str) else list(text_or_ids)
    translator = make_translator(tools)
    events: list[dict[str, Any]] = []
    size = chunk or max(len(ids), 1)
    for start in range(0, len(ids), size):
        translator.receive_tokens(ids[start : start + size])
        events.extend(translator.events())
    translator.receive_end(finish, message)  # type: ignore[arg-type]
    events.extend(translator.events())
    return events


# ---------------------------------------------------------------------------------------------- tools

FUNCTION_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": None,
}
CODE_INTERPRETER_TOOL = {"type": "code_interpreter", "container": "cntr_fixed"}
WEB_SEARCH_TOOL = {"type": "web_search"}
# require_approval "never": the API's default ("always") would make every call an mcp_approval_request.
MCP_TOOL = {
    "type": "mcp",
    "server_label": "deepwiki",
    "server_url": "https://mcp.deepwiki.com/mcp",
    "require_approval": "never",
}
NAMESPACE_TOOL = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}],
}
CUSTOM_TOOL = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)*/'},
}
ALL_TOOLS = [FUNCTION_TOOL, CODE_INTERPRETER_TOOL, WEB_SEARCH_TOOL, MCP_TOOL, NAMESPACE_TOOL, CUSTOM_TOOL]
