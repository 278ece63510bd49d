"""tools — built-in tools run by the server (code interpreter, web search, remote MCP) and their shared interface.

``_base`` holds the interface every tool implements (``ToolSession.call`` -> ``ToolResult``) and the per-response
registry (``ToolSessions``) the tool loop in ``run/loop.py`` uses.
"""

from ._base import ToolCall, ToolResult, ToolSession, ToolSessions

__all__ = ["ToolCall", "ToolResult", "ToolSession", "ToolSessions"]
