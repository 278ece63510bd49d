"""``render_request``: a Responses API request (JSON-decoded dict) → Harmony prompt token ids.

Owns the orchestration and the token-level assembly. Each message is rendered on its own, through the
cache of rendered messages (``_cache``): the system message with
``RenderOptions(conversation_has_function_tools=...)`` because our function declarations are pre-rendered
text (see ``_schema_ts``), which harmony's own detection of function tools cannot see; the others as
harmony renders a conversation with ``auto_drop_analysis=False``, because ``_history`` already dropped the
chain of thought of completed turns, correctly (harmony's rule drops only before the first final message).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from openai_harmony import Conversation, Message, ReasoningEffort, Role

from harmony_responses.vocab import load_encoding

from ._cache import MessageCache
from ._compaction import SUMMARY_INSTRUCTION, SUMMARY_PREFILL
from ._developer import build_developer_message, instructions_text
from ._errors import RenderError
from ._history import Location, PendingMcpCall, build_history
from ._system import build_system_message, reasoning_effort
from ._text import without_surrogates
from ._tool_search import loaded_namespaces, loaded_tools_text, search_arguments, search_deferred
from ._tools import ToolSet, apply_tool_choice, parse_tools, tool_spec

__all__ = ["RenderedPrompt", "answer_tool_search", "render_request"]

# Rendered messages of this process's requests (render/_cache.py).
MESSAGES = MessageCache()


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered prompt.

    ``token_ids``: the whole prompt, ending with ``<|start|>assistant`` plus the prefill, if any.
    ``prefill_ids``: the forced-tool-choice prefill at the end of ``token_ids`` (``[]`` if none); feed them
    to the translator before the engine's output, since the model continues from them.
    ``messages`` (and ``conversation``, the same as a harmony Conversation): the messages rendered, for
    debugging and tests. Rendering the conversation again with harmony's
    ``render_conversation_for_completion`` omits the system line "Calls to these tools must go to the
    commentary channel: 'functions'." (see the module docstring) and the prefill.
    ``pending_mcp_call``: an approved MCP call that has not run; then ``token_ids`` end with that call's
    ``<|call|>`` (no ``<|start|>assistant``, no prefill): the server runs it and appends its result as after a
    call the model just made.
    """

    token_ids: list[int]
    prefill_ids: list[int]
    messages: tuple[Message, ...]
    pending_mcp_call: PendingMcpCall | None = None

    @property
    def conversation(self) -> Conversation:
        # Built when asked for (tests, debugging): a Conversation's pydantic validation is not free.
        return Conversation.from_messages(list(self.messages))


@functools.lru_cache(maxsize=64)
def _plain_system(
    effort: ReasoningEffort,
    browser: bool,
    python: bool,
    file_search: bool,
    current_date: str,
    knowledge_cutoff: str,
    python_description: str | None,
    function_tools: bool,
) -> tuple[Message, tuple[int, ...]]:
    """The system message without MCP namespaces and its tokens, built once per set of inputs: it is the
    same for every such request of a day (building the harmony message and its cache key cost more than
    the rest of a short request's rendering)."""
    system = build_system_message(
        effort=effort,
        tools=ToolSet(browser=browser, python=python, file_search=file_search),
        current_date=current_date,
        knowledge_cutoff=knowledge_cutoff,
        python_description=python_description,
    )
    return system, tuple(MESSAGES.render(load_encoding(), system, function_tools=function_tools))


def _entries(request: dict[str, Any], prior_items: list[dict[str, Any]] | None) -> list[tuple[Any, Location]]:
    entries: list[tuple[Any, Location]] = [
        (item, Location(f"prior_items[{i}]", from_client=False)) for i, item in enumerate(prior_items or [])
    ]
    raw = request.get("input")
    if raw is None:
        return entries
    if isinstance(raw, str):
        return [*entries, ({"type": "message", "role": "user", "content": raw}, Location("input"))]
    if not isinstance(raw, list):
        raise RenderError(
            "Invalid type for 'input': expected a string or an array of input items.",
            param="input",
            code="invalid_type",
        )
    return entries + [(item, Location(f"input[{i}]")) for i, item in enumerate(raw)]


def render_request(
    request: dict[str, Any],
    *,
    current_date: str,
    knowledge_cutoff: str = "2024-06",
    prior_items: list[dict[str, Any]] | None = None,
    python_description: str | None = None,
    summarize: bool = False,
) -> RenderedPrompt:
    """Render ``request`` into Harmony prompt tokens; raises RenderError for a client error.

    ``prior_items``: items of earlier responses (input and output), treated as input items placed before
    ``request["input"]``. ``python_description``: what the code-interpreter sandbox really does, declared
    in the system message's ``python`` namespace (a generic, honest default otherwise). ``summarize``: the
    prompt asks the model for a summary of the conversation, for compaction (``_compaction``); the request's
    ``tool_choice`` does not apply then.
    """
    if not isinstance(request, dict):
        raise RenderError("The request body must be a JSON object.", param=None, code="invalid_type")
    request = without_surrogates(request)
    if prior_items is not None:
        prior_items = without_surrogates(prior_items)

    history = build_history(_entries(request, prior_items))
    tools = parse_tools(request.get("tools"), listed_mcp_tools=history.listed_mcp_tools)
    tools, prefill = apply_tool_choice(tools, None if summarize else request.get("tool_choice"))
    effort = reasoning_effort(request.get("reasoning"))

    instructions = "\n\n".join(
        text for text in [instructions_text(request.get("instructions")), *history.instructions] if text.strip()
    )
    encoding = load_encoding()
    function_tools = bool(tools.functions)
    if tools.mcp:
        system = build_system_message(
            effort=effort,
            tools=tools,
            current_date=current_date,
            knowledge_cutoff=knowledge_cutoff,
            python_description=python_description,
        )
        system_ids = MESSAGES.render(encoding, system, function_tools=function_tools)
    else:
        system, system_ids = _plain_system(
            effort,
            tools.browser,
            tools.python,
            tools.file_search,
            current_date,
            knowledge_cutoff,
            python_description,
            function_tools,
        )
    developer = build_developer_message(instructions=instructions, tools=tools, text=request.get("text"))
    rest = ([developer] if developer is not None else []) + history.messages
    if summarize:
        rest.append(Message.from_role_and_content(Role.USER, SUMMARY_INSTRUCTION))
        history.pending_mcp_call, prefill = None, SUMMARY_PREFILL

    # Message by message, through the cache: the conversation's rendering is their concatenation (with
    # auto_drop_analysis off), and most of a request's messages were rendered for an earlier request.
    token_ids = list(system_ids)
    for message in rest:
        token_ids += MESSAGES.render(encoding, message)
    if history.pending_mcp_call is not None:
        # The conversation ends with the approved call (…<|call|>): its result comes next, then the assistant.
        prefill = None
    else:
        token_ids += MESSAGES.completion_suffix(encoding, Role.ASSISTANT)
    prefill_ids = encoding.encode(prefill, allowed_special="all") if prefill else []
    return RenderedPrompt(
        token_ids=token_ids + prefill_ids,
        prefill_ids=prefill_ids,
        messages=(system, *rest),
        pending_mcp_call=history.pending_mcp_call,
    )


def answer_tool_search(tools: Any, arguments: str) -> tuple[str, list[dict[str, Any]]]:
    """The server's answer to a ``tool_search`` call: ``(what the model reads, the tools it loaded)``.

    ``tools``: the request's tools (their ``defer_loading`` ones are searched); ``arguments``: the call's
    JSON as the model wrote it. The text is the one a ``tool_search_output`` listing these tools renders to.
    """
    deferred = parse_tools(without_surrogates(tools), listed_mcp_tools={}).deferred
    query, limit = search_arguments(arguments)
    loaded = search_deferred(deferred, query, limit)
    return loaded_tools_text(loaded_namespaces(loaded, "tools", tool_spec)), loaded
