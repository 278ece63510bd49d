"""Input items (prior items + the request's ``input``) → Harmony conversation messages.

Owns the item mapping and the chain-of-thought rule:

- ``message`` user → user message; assistant → ``final`` channel, or ``commentary`` for
  ``phase: "commentary"`` (preambles); system/developer → their text goes to the developer message's
  instructions (collected here, rendered by ``_developer``). An assistant message without ``phase`` that a
  tool call follows in the same turn (the next item that is not reasoning or another such message is a call)
  is a preamble too: that is how the model wrote it, since a final answer ends the turn. pydantic-ai, llm,
  llama-index and haystack resend preambles so, and rendering them as final answers would also drop the
  turn's reasoning (below). An assistant message without phase (or on commentary) between calls and their
  output is those calls' preamble, rendered before them: the model writes nothing between a call and its
  result, and haystack resends a turn as reasoning, call, preamble, output (``_preambles_first``).
- Text parts of one message (``input_text``/``output_text``/``text``, and ``refusal`` on assistant
  messages) are joined with ``"\\n"``, so that separately sent blocks (Codex sends its environment context
  and the prompt as separate parts) stay on separate lines; the same join applies to function outputs,
  reasoning parts and code-interpreter logs.
- ``function_call`` → ``assistant to=functions.NAME`` (``to=NS.NAME`` with ``namespace``) on commentary,
  content type ``<|constrain|>json``; ``function_call_output`` → a ``functions.NAME to=assistant`` tool
  message on commentary (the name found through ``call_id`` among earlier calls).
- ``custom_tool_call`` / ``_output`` (history only) → the same shape without the json content type.
- ``web_search_call`` → ``assistant to=browser.search|open|find`` on analysis, content type ``code``;
  ``file_search_call`` → ``assistant to=file_search.msearch`` on analysis, ``{"queries": [...]}`` as content type
  ``code``, plus, when it has ``results``, the ``file_search.msearch`` tool message listing them
  (``_file_search.results_text``, numbered by the call's place among the conversation's file searches:
  the text the server's search answered with);
  ``code_interpreter_call`` → ``assistant to=python`` code plus a ``python`` tool message with its logs;
  ``mcp_call`` → ``assistant to=LABEL.NAME`` plus a ``LABEL.NAME`` tool message with the output or error
  (MCP servers are built-in-style system namespaces, so both sit on analysis like browser and python).
- ``mcp_list_tools`` → no message (its tools can fill an MCP namespace, see ``_tools``).
- ``tool_search_call`` → ``assistant to=functions.tool_search`` on commentary, its ``arguments`` as compact JSON;
  ``tool_search_output`` → a ``functions.tool_search`` tool message declaring the loaded tools
  (``_tool_search.loaded_tools_text``, the same text the server's own search answers with). Their fields are
  checked as the API's item types define them: an unknown field, a missing ``arguments`` or ``tools``, a tool
  that cannot be loaded is a 400.
- ``mcp_approval_request`` + its ``mcp_approval_response`` → the call (as for ``mcp_call``), rendered where the
  response is, then: declined → a tool message saying so; approved and not yet run (no ``mcp_call`` with its
  ``approval_request_id`` in the conversation) → nothing: the conversation ends with the call, which the server
  runs before generating (``History.pending_mcp_call``). A request nobody answered is followed by a tool message
  saying it was not run; a request whose ``mcp_call`` is in the conversation renders as that call only.
- ``compaction`` → a user message with its summary, and of the items before the last one only user,
  developer and system messages are kept (``_compaction``); ``compaction_trigger`` → nothing.
- ``reasoning`` → an ``analysis`` message, kept only when no user message and no final answer follows it
  (the current, unfinished tool-calling turn); reasoning of completed turns is dropped (harmony.md §6.2).
  Tool calls and results of completed turns are not chain of thought and are kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from openai_harmony import Author, Message, Role

from ._compaction import compacted_items, summary_text
from ._errors import RenderError
from ._file_search import results_text
from ._text import compact_json
from ._tool_search import SEARCH_NAME, loaded_namespaces, loaded_tools_text
from ._tools import tool_spec

__all__ = ["History", "Location", "PendingMcpCall", "build_history", "message_text"]

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_MEDIA_PARTS = frozenset({"input_image", "input_file", "input_audio", "image", "file", "image_url"})
_ROLES = frozenset({"user", "assistant", "system", "developer"})
# Items a client may echo from other models' or tools' output that gpt-oss cannot represent.
_UNREPRESENTABLE = frozenset(
    {
        "computer_call",
        "computer_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "image_generation_call",
    }
)


@dataclass(frozen=True, slots=True)
class Location:
    """Where an item came from, to name it in errors: ``input[3]``, or a stored item of a prior response."""

    path: str
    from_client: bool = True

    def param(self, suffix: str = "") -> str:
        # A broken stored item is not something the client can fix by editing `input`.
        return f"{self.path}{suffix}" if self.from_client else "previous_response_id"


def _error(loc: Location, suffix: str, message: str, code: str = "invalid_value") -> RenderError:
    where = f"{loc.path}{suffix}"
    if not loc.from_client:
        message = f"{message} (in stored item {where})"
    return RenderError(message, param=loc.param(suffix), code=code)


def _part_text(part: Any, where: str, *, assistant: bool) -> str | None:
    """Text of one content part; raises for media parts and unknown parts."""
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        raise RenderError(f"Invalid type for '{where}': expected an object.", param=where, code="invalid_type")
    kind = part.get("type")
    if kind in _TEXT_PARTS:
        text = part.get("text")
        if not isinstance(text, str):
            raise RenderError(
                f"Invalid type for '{where}.text': expected a string.", param=f"{where}.text", code="invalid_type"
            )
        return text
    if kind == "refusal" and assistant:
        refusal = part.get("refusal")
        return refusal if isinstance(refusal, str) else None
    if kind in _MEDIA_PARTS:
        raise RenderError(
            f"Invalid value for '{where}': '{kind}' content is not supported; this model accepts text only.",
            param=where,
        )
    raise RenderError(
        f"Invalid value for '{where}.type': unsupported content part type '{kind}'.", param=f"{where}.type"
    )


def message_text(content: Any, where: str, *, role: Any) -> str:
    """The text of a message's ``content`` (string or parts), parts joined with ``"\\n"``."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise RenderError(
            f"Invalid type for '{where}.content': expected a string or an array of content parts.",
            param=f"{where}.content",
            code="invalid_type",
        )
    texts: list[str] = []
    for j, part in enumerate(content):
        text = _part_text(part, f"{where}.content[{j}]", assistant=role == "assistant")
        if text is not None:
            texts.append(text)
    return "\n".join(texts)


def _output_text(output: Any, loc: Location) -> str:
    """A tool output: a string, parts (text joined with "\\n"), or any other JSON value serialised."""
    if isinstance(output, str):
        return output
    if output is None:
        return ""
    if isinstance(output, list):
        texts: list[str] = []
        for j, part in enumerate(output):
            where = f"{loc.path}.output[{j}]"
            try:
                text = _part_text(part, where, assistant=False)
            except RenderError as exc:
                raise _error(loc, f".output[{j}]", exc.message, exc.code or "invalid_value") from None
            if text is not None:
                texts.append(text)
        return "\n".join(texts)
    return json.dumps(output, ensure_ascii=False)


def _assistant(text: str, channel: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)


def _tool_result(author: str, text: str, channel: str) -> Message:
    return (
        Message.from_author_and_content(Author.new(Role.TOOL, author), text)
        .with_channel(channel)
        .with_recipient("assistant")
    )


def _item_type(item: dict[str, Any], loc: Location) -> str:
    kind = item.get("type")
    if kind is None:
        if "role" in item:
            return "message"
        if "id" in item:
            return "item_reference"
        raise _error(loc, ".type", f"Missing required parameter: '{loc.path}.type'.", "missing_required_parameter")
    if not isinstance(kind, str):
        raise _error(loc, ".type", f"Invalid type for '{loc.path}.type': expected a string.", "invalid_type")
    return kind


# Items that are the assistant calling a tool: what follows a preamble in the same turn.
_CALLS = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "mcp_call",
        "mcp_approval_request",
        "tool_search_call",
    }
)


# Calls whose result comes back as an item of its own, and that item's type.
_OUTPUTS = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "tool_search_call": "tool_search_output",
}


def _is_preamble_like(item: dict[str, Any], kind: str) -> bool:
    return kind == "message" and item.get("role") == "assistant" and item.get("phase") in (None, "commentary")


def _preambles_first(typed: list[tuple[dict[str, Any], str, Location]]) -> list[tuple[dict[str, Any], str, Location]]:
    """The items with each preamble sent between calls and their output moved before those calls.

    A run of calls followed by assistant messages (no phase, or commentary) and then the output of one of
    those calls: the messages are the calls' preamble, which the model wrote before the first of them.
    """
    ordered: list[tuple[dict[str, Any], str, Location]] = []
    run_start: int | None = None  # where in `ordered` the current run of calls begins
    run_calls: set[str] = set()  # the run's call ids
    index = 0
    while index < len(typed):
        item, kind, _ = typed[index]
        if kind in _OUTPUTS:
            if run_start is None:
                run_start = len(ordered)
            call_id = item.get("call_id")
            if isinstance(call_id, str):
                run_calls.add(call_id)
            ordered.append(typed[index])
            index += 1
            continue
        if run_start is not None and _is_preamble_like(item, kind):
            end = index
            while end < len(typed) and _is_preamble_like(typed[end][0], typed[end][1]):
                end += 1
            if end < len(typed):
                after, after_kind, _ = typed[end]
                if after_kind in _OUTPUTS.values() and after.get("call_id") in run_calls:
                    ordered[run_start:run_start] = typed[index:end]
                    run_start += end - index
                    index = end
                    continue
        run_start, run_calls = None, set()
        ordered.append(typed[index])
        index += 1
    return ordered


def _preambles(typed: list[tuple[dict[str, Any], str, Location]]) -> set[int]:
    """Indices of assistant messages that are preambles: ``phase: "commentary"``, or no phase and a call next."""
    found: set[int] = set()
    pending: list[int] = []  # phaseless assistant messages waiting to see what comes next
    for index, (item, kind, _) in enumerate(typed):
        if kind == "message" and item.get("role") == "assistant":
            phase = item.get("phase")
            if phase == "commentary":
                found.add(index)
            elif phase is None:
                pending.append(index)
                continue
            else:
                pending = []
        elif kind == "reasoning":
            continue
        elif kind in _CALLS:
            found.update(pending)
            pending = []
        else:
            pending = []
    return found


def _reasoning_text(item: dict[str, Any]) -> str:
    for key in ("content", "summary"):
        parts = item.get(key)
        if isinstance(parts, list):
            texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"]]
            if texts:
                return "\n".join(texts)
    return ""


def _web_search_call(item: dict[str, Any]) -> Message | None:
    action = item.get("action")
    if not isinstance(action, dict):
        return None  # nothing says what was searched; an empty call would only confuse the model
    kind = action.get("type")
    args: dict[str, Any]
    if kind == "search":
        query = action.get("query")
        if not isinstance(query, str):
            queries = action.get("queries")
            query = queries[0] if isinstance(queries, list) and queries and isinstance(queries[0], str) else None
        if query is None:
            return None
        args, function = {"query": query}, "search"
    elif kind == "open_page":
        url = action.get("url")
        if not isinstance(url, str):
            return None
        args, function = {"id": url}, "open"
    elif kind in ("find", "find_in_page"):
        pattern = action.get("pattern")
        if not isinstance(pattern, str):
            return None
        args, function = {"pattern": pattern}, "find"
    else:
        return None
    # json.dumps' default ", " / ": " separators match how the model writes browser arguments.
    return (
        _assistant(json.dumps(args, ensure_ascii=False), "analysis")
        .with_recipient(f"browser.{function}")
        .with_content_type("code")
    )


_FILE_SEARCH_RECIPIENT = "file_search.msearch"


def _file_search_call(item: dict[str, Any], number: int, loc: Location) -> list[Message]:
    """The call as the model writes it, and the results it read when the item carries them."""
    queries = item.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise _error(loc, ".queries", f"Invalid type for '{loc.path}.queries': expected an array of strings.")
    call = (
        _assistant(json.dumps({"queries": queries}, ensure_ascii=False), "analysis")
        .with_recipient(_FILE_SEARCH_RECIPIENT)
        .with_content_type("code")
    )
    results = item.get("results")
    if not isinstance(results, list):
        return [call]  # results not included: what the model read is not known
    shown = [r for r in results if isinstance(r, dict)]
    return [call, _tool_result(_FILE_SEARCH_RECIPIENT, results_text(number, queries, shown), "analysis")]


@dataclass(frozen=True)
class PendingMcpCall:
    """An MCP call the user approved that has not run yet: the conversation ends with it."""

    server_label: str
    name: str
    arguments: str
    approval_request_id: str


@dataclass
class History:
    """What the input items contribute: developer instructions, conversation messages, listed MCP tools."""

    instructions: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    listed_mcp_tools: dict[str, list[Any]] = field(default_factory=dict)
    pending_mcp_call: PendingMcpCall | None = None


# What the model reads after an MCP call that did not run (a tool message on the call's channel).
MCP_DECLINED = "The user declined this call, so it was not run."
MCP_UNANSWERED = "This call needed the user's approval, which was not given, so it was not run."


def _approval_request(item: dict[str, Any], loc: Location) -> tuple[str, str, str, str]:
    """``(id, server_label, name, arguments)`` of an ``mcp_approval_request`` item."""
    values = []
    for key in ("id", "server_label", "name"):
        value = item.get(key)
        if not isinstance(value, str) or not value:
            raise _error(
                loc, f".{key}", f"Missing required parameter: '{loc.path}.{key}'.", "missing_required_parameter"
            )
        values.append(value)
    arguments = item.get("arguments")
    if not isinstance(arguments, str):
        arguments = "" if arguments is None else json.dumps(arguments, ensure_ascii=False)
    return values[0], values[1], values[2], arguments


def _mcp_call_message(label: str, name: str, arguments: str) -> Message:
    # MCP servers are system namespaces like browser and python: their calls sit on analysis, as code.
    return _assistant(arguments, "analysis").with_recipient(f"{label}.{name}").with_content_type("code")


_TOOL_SEARCH_FIELDS = {
    "tool_search_call": frozenset({"type", "id", "call_id", "execution", "status", "arguments", "created_by"}),
    "tool_search_output": frozenset({"type", "id", "call_id", "execution", "status", "tools", "created_by"}),
}
_SEARCH_RECIPIENT = f"functions.{SEARCH_NAME}"


def _check_tool_search_item(item: dict[str, Any], kind: str, loc: Location) -> str | None:
    """Check a ``tool_search_call`` / ``tool_search_output`` against the API's item type; its call_id."""
    for key in item:
        if key not in _TOOL_SEARCH_FIELDS[kind]:
            raise _error(loc, f".{key}", f"Unknown parameter: '{loc.path}.{key}'.", "unknown_parameter")
    required = "arguments" if kind == "tool_search_call" else "tools"
    if item.get(required) is None:
        raise _error(
            loc, f".{required}", f"Missing required parameter: '{loc.path}.{required}'.", "missing_required_parameter"
        )
    for key, supported in (("execution", ("server", "client")), ("status", ("in_progress", "completed", "incomplete"))):
        value = item.get(key)
        if value is not None and value not in supported:
            listed = ", ".join(f"'{v}'" for v in supported[:-1]) + f" and '{supported[-1]}'"
            raise _error(loc, f".{key}", f"Invalid value: '{value}'. Supported values are: {listed}.")
    call_id = item.get("call_id")
    if call_id is not None and not isinstance(call_id, str):
        raise _error(loc, ".call_id", f"Invalid type for '{loc.path}.call_id': expected a string.", "invalid_type")
    return call_id


def build_history(entries: list[tuple[Any, Location]]) -> History:
    history = History()
    typed: list[tuple[dict[str, Any], str, Location]] = []
    for item, loc in compacted_items(entries):
        if not isinstance(item, dict):
            raise _error(loc, "", f"Invalid type for '{loc.path}': expected an object.", "invalid_type")
        typed.append((item, _item_type(item, loc), loc))
    typed = _preambles_first(typed)

    # Reasoning is kept only after the last user message or final answer: the unfinished turn.
    preambles = _preambles(typed)
    open_turn_start = 0
    for index, (item, kind, _) in enumerate(typed):
        role = item.get("role") if kind == "message" else None
        if role == "user" or (role == "assistant" and index not in preambles):
            open_turn_start = index + 1

    # MCP approvals: which requests were answered, and which approved calls already ran (an mcp_call names them).
    answered = {item.get("approval_request_id") for item, kind, _ in typed if kind == "mcp_approval_response"}
    executed = {item.get("approval_request_id") for item, kind, _ in typed if kind == "mcp_call"} - {None}
    approval_requests: dict[str, tuple[str, str, str]] = {}  # id → (server_label, name, arguments)

    recipients: dict[str, str] = {}  # call_id → recipient of the call, for its output's author
    file_searches = 0  # file_search_call items so far: the number of the next one's results (results_text)
    for index, (item, kind, loc) in enumerate(typed):
        if kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise _error(
                    loc,
                    ".role",
                    f"Invalid value: '{role}'. Supported values are: 'user', 'assistant', 'system', and 'developer'.",
                )
            try:
                text = message_text(item.get("content"), loc.path, role=role)
            except RenderError as exc:
                if loc.from_client:
                    raise
                raise _error(loc, "", exc.message, exc.code or "invalid_value") from None
            if role in ("system", "developer"):
                if text.strip():
                    history.instructions.append(text)
            elif role == "user":
                history.messages.append(Message.from_role_and_content(Role.USER, text))
            else:
                channel = "commentary" if index in preambles else "final"
                history.messages.append(_assistant(text, channel))
        elif kind == "reasoning":
            if index >= open_turn_start:
                text = _reasoning_text(item)
                if text:
                    history.messages.append(_assistant(text, "analysis"))
        elif kind in ("function_call", "custom_tool_call"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise _error(
                    loc, ".call_id", f"Missing required parameter: '{loc.path}.call_id'.", "missing_required_parameter"
                )
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise _error(
                    loc, ".name", f"Missing required parameter: '{loc.path}.name'.", "missing_required_parameter"
                )
            namespace = item.get("namespace")
            recipient = f"{namespace}.{name}" if isinstance(namespace, str) and namespace else f"functions.{name}"
            recipients[call_id] = recipient
            if kind == "function_call":
                arguments = item.get("arguments")
                if not isinstance(arguments, str):
                    arguments = "" if arguments is None else json.dumps(arguments, ensure_ascii=False)
                message = _assistant(arguments, "commentary").with_recipient(recipient)
                history.messages.append(message.with_content_type("<|constrain|>json"))
            else:
                # As the model writes a custom tool's call: its input as the string argument of a JSON function
                # call (render/_tools.py declares custom tools so).
                raw_input = item.get("input")
                wrapped = json.dumps({"input": raw_input if isinstance(raw_input, str) else ""}, ensure_ascii=False)
                message = _assistant(wrapped, "commentary").with_recipient(recipient)
                history.messages.append(message.with_content_type("<|constrain|>json"))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise _error(
                    loc, ".call_id", f"Missing required parameter: '{loc.path}.call_id'.", "missing_required_parameter"
                )
            if call_id not in recipients:
                raise _error(
                    loc,
                    ".call_id",
                    f"No tool call found for {kind} with call_id '{call_id}': it must follow the call it answers.",
                )
            history.messages.append(
                _tool_result(recipients[call_id], _output_text(item.get("output"), loc), "commentary")
            )
        elif kind == "web_search_call":
            call = _web_search_call(item)
            if call is not None:
                history.messages.append(call)
        elif kind == "file_search_call":
            history.messages.extend(_file_search_call(item, file_searches, loc))
            file_searches += 1
        elif kind == "code_interpreter_call":
            code = item.get("code")
            history.messages.append(
                _assistant(code if isinstance(code, str) else "", "analysis")
                .with_recipient("python")
                .with_content_type("code")
            )
            outputs = item.get("outputs")
            if isinstance(outputs, list):
                logs = [o["logs"] for o in outputs if isinstance(o, dict) and isinstance(o.get("logs"), str)]
                if logs:
                    history.messages.append(_tool_result("python", "\n".join(logs), "analysis"))
        elif kind == "mcp_call":
            label, name = item.get("server_label"), item.get("name")
            if not isinstance(label, str) or not label:
                raise _error(
                    loc,
                    ".server_label",
                    f"Missing required parameter: '{loc.path}.server_label'.",
                    "missing_required_parameter",
                )
            if not isinstance(name, str) or not name:
                raise _error(
                    loc, ".name", f"Missing required parameter: '{loc.path}.name'.", "missing_required_parameter"
                )
            arguments = item.get("arguments")
            if not isinstance(arguments, str):
                arguments = "" if arguments is None else json.dumps(arguments, ensure_ascii=False)
            recipient = f"{label}.{name}"
            history.messages.append(
                _assistant(arguments, "analysis").with_recipient(recipient).with_content_type("code")
            )
            output, error = item.get("output"), item.get("error")
            if error is not None:
                result = json.dumps({"error": error}, ensure_ascii=False)
                history.messages.append(_tool_result(recipient, result, "analysis"))
            elif output is not None:
                history.messages.append(_tool_result(recipient, _output_text(output, loc), "analysis"))
        elif kind == "tool_search_call":
            call_id = _check_tool_search_item(item, kind, loc)
            if call_id is not None:
                recipients[call_id] = _SEARCH_RECIPIENT
            arguments = item["arguments"]
            text = arguments if isinstance(arguments, str) else compact_json(arguments)
            message = _assistant(text, "commentary").with_recipient(_SEARCH_RECIPIENT)
            history.messages.append(message.with_content_type("<|constrain|>json"))
        elif kind == "tool_search_output":
            call_id = _check_tool_search_item(item, kind, loc)
            if call_id is not None and recipients.get(call_id) != _SEARCH_RECIPIENT:
                raise _error(
                    loc,
                    ".call_id",
                    f"No tool_search_call found for tool_search_output with call_id '{call_id}': it must follow "
                    "the call it answers.",
                )
            try:
                groups = loaded_namespaces(item["tools"], f"{loc.path}.tools", tool_spec)
            except RenderError as exc:
                if loc.from_client:
                    raise
                raise _error(loc, "", exc.message, exc.code or "invalid_value") from None
            history.messages.append(_tool_result(_SEARCH_RECIPIENT, loaded_tools_text(groups), "commentary"))
        elif kind == "mcp_list_tools":
            label, tools = item.get("server_label"), item.get("tools")
            if isinstance(label, str) and isinstance(tools, list):
                history.listed_mcp_tools[label] = tools
        elif kind == "item_reference":
            raise _error(loc, "", "item_reference requires stored responses, which this server does not support yet.")
        elif kind == "mcp_approval_request":
            request_id, label, name, arguments = _approval_request(item, loc)
            approval_requests[request_id] = (label, name, arguments)
            if request_id not in answered and request_id not in executed:
                history.messages.append(_mcp_call_message(label, name, arguments))
                history.messages.append(_tool_result(f"{label}.{name}", MCP_UNANSWERED, "analysis"))
        elif kind == "mcp_approval_response":
            request_id = item.get("approval_request_id")
            if not isinstance(request_id, str) or not request_id:
                raise _error(
                    loc,
                    ".approval_request_id",
                    f"Missing required parameter: '{loc.path}.approval_request_id'.",
                    "missing_required_parameter",
                )
            approve = item.get("approve")
            if not isinstance(approve, bool):
                raise _error(
                    loc, ".approve", f"Invalid type for '{loc.path}.approve': expected a boolean.", "invalid_type"
                )
            request = approval_requests.pop(request_id, None)
            if request is None:
                raise _error(
                    loc,
                    ".approval_request_id",
                    f"No mcp_approval_request with id '{request_id}' comes before this mcp_approval_response "
                    f"(send the request item, or use previous_response_id), or it was answered already.",
                )
            if request_id in executed:
                continue  # the call ran in a later response: its mcp_call item says how
            label, name, arguments = request
            history.messages.append(_mcp_call_message(label, name, arguments))
            if not approve:
                reason = item.get("reason")
                text = (
                    f"{MCP_DECLINED} Reason: {reason}" if isinstance(reason, str) and reason.strip() else MCP_DECLINED
                )
                history.messages.append(_tool_result(f"{label}.{name}", text, "analysis"))
            elif index != len(typed) - 1:
                # The server runs an approved call before generating, and its result must follow the call at
                # once; a conversation that goes on past the approval leaves no place to put it.
                raise _error(
                    loc,
                    "",
                    "An mcp_approval_response that approves a call must be the last input item: the server runs "
                    "the call and the model continues from its result.",
                )
            else:
                history.pending_mcp_call = PendingMcpCall(label, name, arguments, request_id)
        elif kind == "compaction":
            text = summary_text(item)
            if text is None:
                raise _error(
                    loc,
                    ".encrypted_content",
                    f"Invalid '{loc.path}.encrypted_content': the compaction item's summary was not opened.",
                )
            history.messages.append(Message.from_role_and_content(Role.USER, text))
        elif kind == "compaction_trigger":
            continue  # the run acts on it (run/compact.py); a stored one has done its work
        elif kind in _UNREPRESENTABLE:
            raise _error(
                loc,
                ".type",
                f"Invalid value for '{loc.path}.type': '{kind}' items cannot be represented for this model.",
            )
        else:
            raise _error(loc, ".type", f"Invalid value for '{loc.path}.type': unknown input item type '{kind}'.")
    return history
