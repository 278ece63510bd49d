"""A request's ``mcp`` tools: checked (400s), connected, listed (or reused from history), ready for the loop.

``mcp_tool_problem`` checks one ``mcp`` tool's fields when the request is validated. ``prepare_mcp`` runs
before the prompt is rendered, since the prompt declares each server's tools:

- a server whose tools an ``mcp_list_tools`` item in the conversation already lists is not listed again (as
  the API does); otherwise its tools are listed now, and the response will show a new ``mcp_list_tools``
  item (``McpPlan.emit``, before the model's first item);
- ``allowed_tools`` (names, and/or ``read_only`` matched against the tools' ``readOnlyHint``) filters what is
  declared and shown, and what the session lets the model call;
- a server that cannot be listed (down, refused, timed out) fails the request (``McpListingError``, HTTP 424
  as the API answers, with the API's message): the client declared tools it expects, and the model would
  otherwise answer without them;
- the request's tool dicts come back with the listed tools under ``_mcp_tools`` (what ``render`` declares and
  what ``RecipientMap`` resolves ``require_approval``'s ``read_only`` against).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_types import Tool

from ._connection import McpConnection, McpFailure, McpTarget
from ._options import STDIO_SCHEME, McpOptions
from ._session import McpSession

__all__ = ["McpListingError", "McpPlan", "McpRequestError", "mcp_tool_problem", "prepare_mcp"]

logger = logging.getLogger("harmony_responses.tools.mcp")

# Tool names must be Harmony-safe recipients (render's rule, and the API's for function names).
_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
_APPROVAL_WORDS = ("always", "never")


class McpListingError(Exception):
    """An MCP server's tools could not be listed (it refused, failed or could not be reached): the request
    fails, as the API fails it (HTTP 424), rather than the model answering without the tools the client
    declared. ``message`` is the API's ("Error retrieving tool list from MCP server: 'LABEL'. …")."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class McpRequestError(Exception):
    """A client error in an ``mcp`` tool (answer 400), worded as the API words validation errors."""

    def __init__(self, message: str, *, param: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


# ---------------------------------------------------------------------------------------------- validation


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "null" if value is None else "an object"


def _type_error(param: str, expected: str, value: object) -> McpRequestError:
    return McpRequestError(
        f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead.",
        param=param,
        code="invalid_type",
    )


def _check_filter(value: Any, param: str) -> None:
    """``{tool_names?: [str], read_only?: bool}``."""
    if not isinstance(value, dict):
        raise _type_error(param, "an object", value)
    names, read_only = value.get("tool_names"), value.get("read_only")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise _type_error(f"{param}.tool_names", "an array of strings", names)
    if read_only is not None and not isinstance(read_only, bool):
        raise _type_error(f"{param}.read_only", "a boolean", read_only)


def mcp_tool_problem(tool: Mapping[str, Any], param: str) -> McpRequestError | None:
    """What is wrong with one ``mcp`` tool declaration (``param`` is ``tools[i]``), or None."""
    try:
        label = tool.get("server_label")
        if label is None:
            return McpRequestError(
                f"Missing required parameter: '{param}.server_label'.",
                param=f"{param}.server_label",
                code="missing_required_parameter",
            )
        if not isinstance(label, str):
            raise _type_error(f"{param}.server_label", "a string", label)
        if not _NAME.match(label):
            raise McpRequestError(
                f"Invalid '{param}.server_label': string does not match pattern. Expected a string that matches "
                "the pattern '^[a-zA-Z0-9_-]+$'.",
                param=f"{param}.server_label",
            )
        url = tool.get("server_url")
        if url is None:
            if tool.get("connector_id") is not None or tool.get("tunnel_id") is not None:
                raise McpRequestError(
                    f"Invalid '{param}': connectors and MCP tunnels are not available on this server; give a "
                    "'server_url' (http(s)://…, or stdio:NAME for a server configured on this server).",
                    param=f"{param}.connector_id",
                )
            return McpRequestError(
                f"Missing required parameter: '{param}.server_url'.",
                param=f"{param}.server_url",
                code="missing_required_parameter",
            )
        if not isinstance(url, str):
            raise _type_error(f"{param}.server_url", "a string", url)
        headers = tool.get("headers")
        if headers is not None:
            if not isinstance(headers, dict):
                raise _type_error(f"{param}.headers", "an object", headers)
            for key, value in headers.items():
                if not isinstance(value, str):
                    raise _type_error(f"{param}.headers.{key}", "a string", value)
        for key in ("authorization", "server_description"):
            if tool.get(key) is not None and not isinstance(tool[key], str):
                raise _type_error(f"{param}.{key}", "a string", tool[key])
        allowed = tool.get("allowed_tools")
        if isinstance(allowed, list):
            if not all(isinstance(n, str) for n in allowed):
                raise _type_error(f"{param}.allowed_tools", "an array of strings", allowed)
        elif allowed is not None:
            _check_filter(allowed, f"{param}.allowed_tools")
        approval = tool.get("require_approval")
        if isinstance(approval, str):
            if approval not in _APPROVAL_WORDS:
                raise McpRequestError(
                    f"Invalid value: '{approval}'. Supported values are: 'always' and 'never'.",
                    param=f"{param}.require_approval",
                )
        elif isinstance(approval, dict):
            for key in _APPROVAL_WORDS:
                if approval.get(key) is not None:
                    _check_filter(approval[key], f"{param}.require_approval.{key}")
        elif approval is not None:
            raise _type_error(f"{param}.require_approval", "'always', 'never' or an object", approval)
    except McpRequestError as exc:
        return exc
    return None


# ---------------------------------------------------------------------------------------------- preparation


@dataclass
class _Server:
    index: int
    tool: dict[str, Any]
    connection: McpConnection
    listed: list[dict[str, Any]] | None = None  # all the server's tools, as mcp_list_tools shows them
    error: str | None = None
    reused: bool = False


@dataclass
class McpPlan:
    """The request's MCP servers, prepared: tools for render, listings to show, sessions for the tool loop.

    ``tools``: the request's tools with each ``mcp`` entry given ``_mcp_tools``. ``listings``: the
    ``(server_label, tools, error)`` of the servers listed now, in ``tools`` order. ``sessions``: one per
    server, not connected (each connects at its first call; the loop closes them when the response ends).
    """

    tools: list[Any] | None
    listings: list[tuple[str, list[dict[str, Any]], str | None]] = field(default_factory=list)
    sessions: list[McpSession] = field(default_factory=list)

    def emit(self, translator: Any) -> None:
        """Show the new ``mcp_list_tools`` items (call before the model's first item)."""
        for label, tools, error in self.listings:
            translator.add_mcp_list_tools(label, tools=tools, error=error)

    def session(self, label: str) -> McpSession | None:
        return next((s for s in self.sessions if s.namespace == label), None)

    def prelude(self, pending: Any = None) -> Callable[[Any], None] | None:
        """What the run does first (``ResponseRun(prelude=…)``): show the listings, start an approved call.

        ``pending``: render's ``PendingMcpCall`` (the approved call the prompt ends with), or None.

        Raises:
            McpRequestError: the approved call's server is not among this request's ``mcp`` tools.
        """
        if pending is not None and self.session(pending.server_label) is None:
            raise McpRequestError(
                f"The approved call to '{pending.server_label}.{pending.name}' needs the MCP server "
                f"'{pending.server_label}': declare it in 'tools' (an mcp tool with that server_label).",
                param="tools",
            )
        if not self.listings and pending is None:
            return None

        def prelude(translator: Any) -> None:
            self.emit(translator)
            if pending is not None:
                translator.start_mcp_call(
                    pending.server_label,
                    pending.name,
                    pending.arguments,
                    approval_request_id=pending.approval_request_id,
                )

        return prelude


def _target(tool: Mapping[str, Any], param: str, options: McpOptions) -> McpTarget:
    label, url = tool["server_label"], tool["server_url"]
    if url.startswith(STDIO_SCHEME):
        name = url[len(STDIO_SCHEME) :].lstrip("/")
        server = options.stdio_server(name)
        if server is None:
            known = ", ".join(f"'stdio:{s.name}'" for s in options.servers) or "none are configured"
            raise McpRequestError(
                f"Invalid '{param}.server_url': no MCP server named '{name}' is configured on this server "
                f"(configured: {known}).",
                param=f"{param}.server_url",
            )
        return McpTarget(label=label, stdio=server)
    problem = options.url_problem(url)
    if problem is not None:
        raise McpRequestError(f"Invalid '{param}.server_url': {problem}.", param=f"{param}.server_url")
    # The Host header comes from the URL, never from the client: a forged one would send a name-based proxy
    # or virtual host to a site the URL does not name (and past the host checks above).
    headers = {k: v for k, v in (tool.get("headers") or {}).items() if k.lower() != "host"}
    if tool.get("authorization") and not any(k.lower() == "authorization" for k in headers):
        headers["Authorization"] = f"Bearer {tool['authorization']}"
    return McpTarget(label=label, url=url, headers=tuple(headers.items()), trusted=options.trusts(url))


def _listed_in(history: Iterable[Any], label: str) -> list[dict[str, Any]] | None:
    """The tools of the conversation's last successful ``mcp_list_tools`` item for ``label``."""
    found: list[dict[str, Any]] | None = None
    for item in history:
        if (
            isinstance(item, dict)
            and item.get("type") == "mcp_list_tools"
            and item.get("server_label") == label
            and isinstance(item.get("tools"), list)
        ):
            tools = [t for t in item["tools"] if isinstance(t, dict) and _NAME.match(str(t.get("name")))]
            found = None if item.get("error") else tools
    return found


def _tool_item(tool: Tool) -> dict[str, Any] | None:
    """An ``mcp_list_tools`` tool entry, or None for a name Harmony cannot address."""
    if not _NAME.match(tool.name):
        return None
    annotations = (
        tool.annotations.model_dump(by_alias=True, exclude_none=True, mode="json") if tool.annotations else None
    )
    return {
        "name": tool.name,
        "input_schema": tool.input_schema,
        "description": tool.description,
        "annotations": annotations or None,
    }


def _allowed(tool: Mapping[str, Any], listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The listed tools ``allowed_tools`` lets through (every given criterion must hold)."""
    allowed = tool.get("allowed_tools")
    if allowed is None:
        return listed
    if isinstance(allowed, list):
        names, read_only = set(allowed), None
    else:
        names = set(allowed["tool_names"]) if allowed.get("tool_names") is not None else None
        read_only = allowed.get("read_only")
    chosen = []
    for entry in listed:
        annotations = entry.get("annotations")
        hint = isinstance(annotations, dict) and annotations.get("readOnlyHint") is True
        if (names is None or entry.get("name") in names) and (read_only is None or hint is read_only):
            chosen.append(entry)
    return chosen


async def _list(server: _Server) -> None:
    try:
        tools = await server.connection.list_tools()
    except McpFailure as failure:
        label = server.connection.target.label
        server.error = f"Error retrieving tool list from MCP server: '{label}'. {failure.message}"
        logger.info("%s", server.error)
        return
    listed = []
    for tool in tools:
        entry = _tool_item(tool)
        if entry is None:
            label = server.connection.target.label
            logger.warning("MCP server '%s': tool %r has a name the model cannot call; skipped", label, tool.name)
        else:
            listed.append(entry)
    server.listed = _allowed(server.tool, listed)


async def prepare_mcp(tools: Any, history: Iterable[Any], options: McpOptions) -> McpPlan:
    """Connect the request's MCP servers and list their tools (see the module docstring).

    ``tools``: the request's (validated) tools. ``history``: the conversation's items (stored and input).

    Raises:
        McpRequestError: a server the client may not use (host not allowed, unknown stdio name).
        McpListingError: a server listed now failed its listing (the first such, in ``tools`` order).
    """
    if not isinstance(tools, list) or not any(isinstance(t, dict) and t.get("type") == "mcp" for t in tools):
        return McpPlan(tools=tools)
    items = list(history)
    servers: list[_Server] = []
    for index, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") == "mcp":
            target = _target(tool, f"tools[{index}]", options)
            connection = McpConnection(target, timeout=options.timeout, max_body_bytes=options.max_body_bytes)
            server = _Server(index, tool, connection)
            previous = _listed_in(items, target.label)
            if previous is not None:
                server.listed, server.reused = _allowed(tool, previous), True
            servers.append(server)
    try:
        await asyncio.gather(*(_list(s) for s in servers if not s.reused))
    finally:
        # Closed whatever happens next: rendering may still refuse the request, and nothing would close a
        # connection (or a stdio server's process) left open for a response that never starts. The session
        # connects again at its first call.
        for server in servers:
            await server.connection.aclose()
    failed = next((server for server in servers if server.error is not None), None)
    if failed is not None:
        raise McpListingError(failed.error)  # type: ignore[arg-type]

    plan = McpPlan(tools=list(tools))
    for server in servers:
        label = server.connection.target.label
        plan.tools[server.index] = dict(server.tool, _mcp_tools=server.listed or [])  # type: ignore[index]
        if not server.reused:
            plan.listings.append((label, server.listed or [], None))
        names = [entry["name"] for entry in server.listed or ()]
        plan.sessions.append(McpSession(server.connection, allowed=names))
    return plan
