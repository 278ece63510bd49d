"""Remote MCP: the ``mcp`` tool type, run by the server with the ``mcp`` SDK's client.

``_options`` holds the operator's settings (allowed hosts, named stdio servers, timeout) and the SSRF note;
``_guard`` keeps connections for hosts the operator did not list on public addresses; ``_bounded`` bounds
every body an MCP server sends; ``_request`` checks a request's ``mcp`` tools, lists their tools (or reuses a
listing from the conversation) and builds an ``McpPlan``; ``_connection`` owns one client connection
(streamable HTTP, SSE or stdio) in a task of its own; ``_session`` is the per-response ``ToolSession`` that
runs ``mcp_call`` items.
"""

from ._bounded import DEFAULT_MCP_MAX_BODY_BYTES
from ._connection import McpConnection, McpFailure, McpTarget
from ._options import DEFAULT_MCP_TIMEOUT, McpOptions, StdioServer, load_mcp_config, parse_stdio_server
from ._request import McpListingError, McpPlan, McpRequestError, mcp_tool_problem, prepare_mcp
from ._session import McpSession, result_text

__all__ = [
    "DEFAULT_MCP_MAX_BODY_BYTES",
    "DEFAULT_MCP_TIMEOUT",
    "McpConnection",
    "McpFailure",
    "McpListingError",
    "McpOptions",
    "McpPlan",
    "McpRequestError",
    "McpSession",
    "McpTarget",
    "StdioServer",
    "load_mcp_config",
    "mcp_tool_problem",
    "parse_stdio_server",
    "prepare_mcp",
    "result_text",
]
