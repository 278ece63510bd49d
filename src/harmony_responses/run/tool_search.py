"""The server-run ``tool_search`` (``execution: "server"``): a tool session the tool loop calls like any built-in.

The search and the text the model reads back belong to render (``render/_tool_search.py``), since a
``tool_search_output`` in a later request must render to the very same tokens; this session only runs them
against the request's tools, once per call.
"""

from __future__ import annotations

from typing import Any

from ..render import RenderError, answer_tool_search
from ..tools import ToolCall, ToolResult, ToolSession

__all__ = ["ToolSearchSession"]


class ToolSearchSession(ToolSession):
    """Searches the request's ``defer_loading`` tools; the result declares the ones it loaded."""

    namespace = "tool_search"

    def __init__(self, tools: list[Any]) -> None:
        self._tools = tools

    async def call(self, call: ToolCall) -> ToolResult:
        try:
            text, loaded = answer_tool_search(self._tools, call.arguments)
        except RenderError as exc:  # the request's tools rendered once already; kept for safety's sake
            return ToolResult(text=f"[ERROR] {exc.message}", error=exc.message)
        return ToolResult(text=text, tools=loaded)
