"""``McpSession``: one MCP server's ``ToolSession`` for one response — runs the model's ``mcp_call`` items.

A call's result goes two ways: to the client (``mcp_call.output``, or ``mcp_call.error`` with the item ending
``failed``) and to the model, as the tool message ``{label}.{tool} to=assistant``. The model reads exactly what
``render`` writes for the same ``mcp_call`` when the conversation comes back as history (the output text, or
``{"error": …}`` as JSON), so a re-rendered conversation matches what the model saw, and engine prefix caches hit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from mcp_types import INVALID_PARAMS, CallToolResult

from .._base import ToolCall, ToolResult, ToolSession
from ._connection import McpConnection, McpFailure

__all__ = ["McpSession", "result_text"]

logger = logging.getLogger("harmony_responses.tools.mcp")


class McpSession(ToolSession):
    """Runs calls to one MCP server's tools for one response.

    Args:
        connection: the server's connection (the one that listed its tools, when they were listed now).
        allowed: the tool names the request allows (``allowed_tools``); None allows every tool.
    """

    def __init__(self, connection: McpConnection, *, allowed: Iterable[str] | None = None) -> None:
        self.namespace = connection.target.label
        self.connection = connection
        self._allowed = frozenset(allowed) if allowed is not None else None

    async def call(self, call: ToolCall) -> ToolResult:
        if self._allowed is not None and call.name not in self._allowed:
            # The model guessed a tool that allowed_tools keeps from it: never reach the server with it.
            return _failed(
                {
                    "type": "mcp_protocol_error",
                    "code": INVALID_PARAMS,
                    "message": f"Tool '{call.name}' is not available on MCP server '{self.namespace}'.",
                }
            )
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            arguments = exc
        if not isinstance(arguments, dict):
            detail = f"not valid JSON ({arguments})" if isinstance(arguments, Exception) else "not a JSON object"
            return _failed(
                {
                    "type": "mcp_protocol_error",
                    "code": INVALID_PARAMS,
                    "message": f"The arguments for '{call.name}' are {detail}: {call.arguments[:200]!r}",
                }
            )
        try:
            result = await self.connection.call_tool(call.name, arguments)
        except McpFailure as failure:
            logger.info("MCP call %s.%s failed: %s", self.namespace, call.name, failure.message)
            return _failed(failure.error)
        return _from_result(result)

    async def aclose(self) -> None:
        await self.connection.aclose()


def result_text(*, output: str | None = None, error: Any = None) -> str:
    """What the model reads for an MCP call: the same text render gives an ``mcp_call`` item in history."""
    if error is not None:
        return json.dumps({"error": error}, ensure_ascii=False)
    return output or ""


def _failed(error: dict[str, Any]) -> ToolResult:
    return ToolResult(text=result_text(error=error), error=error)


def _from_result(result: CallToolResult) -> ToolResult:
    blocks = [block.model_dump(by_alias=True, exclude_none=True, mode="json") for block in result.content]
    if result.is_error:
        return _failed({"type": "mcp_tool_execution_error", "content": blocks})
    output = _output_text(blocks, result.structured_content)
    return ToolResult(text=result_text(output=output), output=output)


def _output_text(blocks: list[dict[str, Any]], structured: Any) -> str:
    """``mcp_call.output``: the result's text blocks joined by newlines; other blocks named, not inlined."""
    texts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "resource":
            resource = block.get("resource") or {}
            texts.append(resource.get("text") or f"[resource {resource.get('uri', '')}]")
        elif kind == "resource_link":
            texts.append(f"[resource {block.get('uri', '')}]")
        else:  # image, audio: binary the model cannot read as text
            texts.append(f"[{kind} {block.get('mimeType', '')}]".replace(" ]", "]"))
    if not texts and structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(texts)
