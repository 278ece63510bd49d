"""The request's echo in the Response object (responses-protocol.md §6).

Every lifecycle event and the non-streaming body carry the Response with the request's parameters
echoed, defaults filled in as the API fills them: ``temperature``/``top_p`` 1.0, ``tool_choice``
``"auto"``, ``truncation`` ``"disabled"``, ``store`` true, ``metadata`` {}, numbers never null (Open
Responses' schema rejects nulls there). Function tools are echoed with all of ``description``,
``parameters`` and ``strict`` present (nullable), as openai-python's ``FunctionTool`` requires.

``service_tier`` is the tier actually used (the API reports the processing mode it used, not the request's
value): the HTTP layer writes it into the body once it has resolved it (``quotas.resolve_tier``: ``auto``
is ``default``, ``fast`` is ``priority``); a body it did not pass through echoes ``default``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["echo_fields"]

TIERS = ("default", "flex", "priority")  # quotas.TIERS: what a response runs in


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    if tool.get("type") == "function":
        echoed = dict(tool)
        for key in ("description", "parameters", "strict"):
            echoed.setdefault(key, None)
        return echoed
    if tool.get("type") == "namespace":
        echoed = dict(tool)
        echoed["tools"] = [_tool(t) for t in tool.get("tools") or ()]
        return echoed
    if tool.get("type") == "mcp":
        # MCP credentials are for the MCP server only: a Response is stored and can be retrieved (and streamed
        # to whoever follows it), so ``authorization`` is left out and header values are masked.
        echoed = {k: v for k, v in tool.items() if k != "authorization"}
        if isinstance(tool.get("headers"), dict):
            echoed["headers"] = dict.fromkeys(tool["headers"], "<redacted>")
        return echoed
    return dict(tool)


def _text(text: Mapping[str, Any] | None) -> dict[str, Any]:
    text = text or {}
    fmt = text.get("format") or {"type": "text"}
    if fmt.get("type") == "json_schema":
        fmt = {
            "type": "json_schema",
            "name": fmt.get("name"),
            "schema": fmt.get("schema"),
            "description": fmt.get("description"),
            "strict": bool(fmt.get("strict")),
        }
    else:
        fmt = {"type": fmt.get("type", "text")}
    return {"format": fmt, "verbosity": text.get("verbosity") or "medium"}


def _reasoning(reasoning: Mapping[str, Any] | None) -> dict[str, Any]:
    reasoning = reasoning or {}
    return {
        "effort": reasoning.get("effort") or "medium",
        "summary": reasoning.get("summary") or reasoning.get("generate_summary"),
    }


def _value(body: Mapping[str, Any], key: str, default: Any) -> Any:
    value = body.get(key)
    return default if value is None else value


def echo_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``translate.response_skeleton`` from a validated request body."""
    return {
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "parallel_tool_calls": _value(body, "parallel_tool_calls", True),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": _reasoning(body.get("reasoning")),
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": body.get("service_tier") if body.get("service_tier") in TIERS else "default",
        "store": _value(body, "store", True),
        "temperature": float(_value(body, "temperature", 1.0)),
        "top_p": float(_value(body, "top_p", 1.0)),
        "top_logprobs": _value(body, "top_logprobs", 0),
        "text": _text(body.get("text")),
        "tool_choice": _value(body, "tool_choice", "auto"),
        "tools": [_tool(t) for t in body.get("tools") or ()],
        "truncation": _value(body, "truncation", "disabled"),
        "user": body.get("user"),
        "metadata": _value(body, "metadata", {}),
    }
