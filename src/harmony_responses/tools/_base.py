"""The shared interface of built-in tools: a call's result, a tool's per-response session, the registry of sessions.

The tool loop (``run/loop.py``) owns one ``ToolSessions`` per response: it finds the session for each built-in call
by namespace ("python" for the code interpreter, "browser" for web search, an MCP server's label), awaits
``session.call(call)``, hands the ``ToolResult`` to the translator and the model, and closes every session when
the response ends. Tool implementations (code interpreter, web search, MCP) live beside this module.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..translate import ToolCall

__all__ = ["ToolCall", "ToolResult", "ToolSession", "ToolSessions"]


@dataclass(frozen=True, kw_only=True)
class ToolResult:
    """What one built-in tool call produced."""

    text: str  # what the model reads next: the Harmony tool message's content
    error: str | dict[str, Any] | None = None  # the call failed (item ends failed; for MCP an error object or string)
    output: str | None = None  # mcp_call.output
    outputs: list[dict[str, Any]] | None = None  # code_interpreter_call.outputs, e.g. [{"type": "logs", "logs": "..."}]
    action: dict[str, Any] | None = None  # web_search_call action with real URLs
    tools: list[dict[str, Any]] | None = None  # the tools a tool search loaded (tool_search_output.tools)
    results: list[dict[str, Any]] | None = None  # file_search_call.results, when the request includes them


class ToolSession(abc.ABC):
    """Server-side state of one built-in tool for one response (python container, browser pages, MCP connection)."""

    namespace: str  # "python", "browser", an MCP server label, or "tool_search"

    @abc.abstractmethod
    async def call(self, call: ToolCall) -> ToolResult:
        """Run one call. Never raises for tool failures: returns a result with ``error`` set."""

    async def aclose(self) -> None:  # noqa: B027 — optional hook: not every session holds something to release
        """Release what the session holds (processes, connections). Called once, when the response ends."""


class ToolSessions:
    """The sessions of one response, keyed by namespace."""

    def __init__(self, sessions: list[ToolSession] | None = None) -> None:
        self._by_namespace: dict[str, ToolSession] = {}
        for session in sessions or ():
            self.add(session)

    def add(self, session: ToolSession) -> None:
        if session.namespace in self._by_namespace:
            raise ValueError(f"two tool sessions for namespace {session.namespace!r}")
        self._by_namespace[session.namespace] = session

    def get(self, namespace: str) -> ToolSession | None:
        return self._by_namespace.get(namespace)

    def __contains__(self, namespace: object) -> bool:
        return namespace in self._by_namespace

    def __len__(self) -> int:
        return len(self._by_namespace)

    def __iter__(self) -> Iterator[ToolSession]:
        return iter(list(self._by_namespace.values()))

    async def aclose_all(self) -> None:
        """Close every session; one failing to close does not keep the others open."""
        sessions, self._by_namespace = list(self._by_namespace.values()), {}
        for session in sessions:
            try:
                await session.aclose()
            except Exception:  # closing is best effort; the response is already over
                logging.getLogger(__name__).exception("closing the %s tool session failed", session.namespace)
