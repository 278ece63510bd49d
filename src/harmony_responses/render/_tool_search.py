"""``tool_search`` and deferred tools: the search tool the model calls, the search, and what the model reads back.

A request with a ``tool_search`` tool does not declare its ``defer_loading`` tools up front (``_tools``): the
model gets a ``tool_search`` function in the ``functions`` namespace instead (gpt-oss calls JSON functions
reliably; a built-in namespace of our own would be a form it was never trained on), taking ``{query, limit?}``
when the server runs it, or the client's own ``description`` and ``parameters`` when the client does
(``execution: "client"``, what Codex sends).

The loaded tools are declared where they were loaded: in the tool message that answers the call, as the
developer message would declare them (``## functions`` / ``## NS`` headings and the same TypeScript). That
keeps every earlier token of the conversation unchanged (the engine's prefix cache hits, and nothing before
the call changes when the conversation is resent), and one function, ``loaded_tools_text``, writes that message
for the server's own search in the tool loop and for a ``tool_search_output`` item in the history, so the model
reads the same tokens whether the server ran the search, the client answered it, or the items come back
through ``previous_response_id``.

The server's search (``search_deferred``) is lexical and deterministic: the query and each deferred function's
name (``_``/``-``/camelCase split into words), description, parameter names, namespace name and namespace
description are lowercased into words; a query word that equals a word of the function scores its field's
weight (name 4, namespace name 3, description and parameters 2, namespace description 1), one that is a prefix
of such a word (at least three letters) scores half. A query naming a function exactly loads that one first.
Ties keep declaration order; at most ``limit`` functions (default 5, at most 20) with a score above zero load,
grouped back into their namespaces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import RenderError
from ._schema_ts import ToolSpec, namespace_body

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "SEARCH_NAME",
    "DeferredTool",
    "ToolSearch",
    "loaded_tools_text",
    "search_deferred",
    "search_tool_spec",
]

SEARCH_NAME = "tool_search"  # the function the model calls: functions.tool_search
DEFAULT_LIMIT = 5
MAX_LIMIT = 20
NO_MATCH_TEXT = "No tools matched the query; nothing was loaded."
LOADED_PREFIX = "These tools are loaded now; call them as declared below.\n\n"

_SERVER_DESCRIPTION = (
    "Searches the tools that are not declared above and loads those that match the query. Their declarations "
    "come back in the result; from then on they are called like the declared ones."
)
_SERVER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What the tool should do, in a few words."},
        "limit": {
            "type": "integer",
            "description": f"How many tools to load at most (default {DEFAULT_LIMIT}).",
        },
    },
    "required": ["query"],
}
_CLIENT_DESCRIPTION = "Searches for tools that are not declared above; the matching ones are loaded."
_CLIENT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "What the tool should do."}},
    "required": ["query"],
}


@dataclass(frozen=True, slots=True)
class ToolSearch:
    """The request's ``tool_search`` tool."""

    execution: str  # "server" (the default) or "client"
    description: str | None = None
    parameters: Any = None


@dataclass(frozen=True, slots=True)
class DeferredTool:
    """A ``defer_loading`` tool as the request declared it: ``raw`` is what a ``tool_search_output`` lists."""

    spec: ToolSpec
    raw: Mapping[str, Any]
    namespace: str | None = None  # a namespace member's namespace
    namespace_description: str | None = None


def search_tool_spec(search: ToolSearch, deferred: tuple[DeferredTool, ...]) -> ToolSpec:
    """The ``tool_search`` function the model is given."""
    if search.execution == "client":
        return ToolSpec(
            name=SEARCH_NAME,
            description=search.description or _CLIENT_DESCRIPTION,
            parameters=search.parameters if isinstance(search.parameters, dict) else _CLIENT_PARAMETERS,
        )
    lines = [_SERVER_DESCRIPTION]
    namespaces: dict[str, str | None] = {}
    loose = 0
    for tool in deferred:
        if tool.namespace is None:
            loose += 1
        elif tool.namespace not in namespaces:
            namespaces[tool.namespace] = tool.namespace_description
    if namespaces or loose:
        lines.append("Tools that can be loaded:")
        for name, description in namespaces.items():
            lines.append(f"- namespace {name}" + (f": {' '.join(description.split())}" if description else ""))
        if loose:
            lines.append(f"- {loose} function{'s' if loose != 1 else ''} in functions")
    return ToolSpec(name=SEARCH_NAME, description="\n".join(lines), parameters=_SERVER_PARAMETERS)


# --------------------------------------------------------------------------------------------------
# The server's search
# --------------------------------------------------------------------------------------------------

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_NAME, _NAMESPACE, _TEXT, _NAMESPACE_TEXT = 4.0, 3.0, 2.0, 1.0


def _words(text: str | None) -> set[str]:
    return {w.lower() for w in _WORD.findall(text or "")}


def _parameter_text(schema: Any) -> str:
    """Property names and descriptions of a parameter schema, nested ones included."""
    if not isinstance(schema, Mapping):
        return ""
    parts: list[str] = []
    description = schema.get("description")
    if isinstance(description, str):
        parts.append(description)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, sub in properties.items():
            parts.append(str(name))
            parts.append(_parameter_text(sub))
    items = schema.get("items")
    if items is not None:
        parts.append(_parameter_text(items))
    return " ".join(parts)


def _score(tool: DeferredTool, query: set[str]) -> float:
    fields = (
        (_words(tool.spec.name), _NAME),
        (_words(tool.namespace), _NAMESPACE),
        (_words(tool.spec.description) | _words(_parameter_text(tool.spec.parameters)), _TEXT),
        (_words(tool.namespace_description), _NAMESPACE_TEXT),
    )
    score = 0.0
    for term in query:
        best = 0.0
        for words, weight in fields:
            if term in words:
                best = max(best, weight)
            elif len(term) >= 3 and any(w.startswith(term) for w in words):
                best = max(best, weight / 2)
        score += best
    return score


def search_deferred(deferred: tuple[DeferredTool, ...], query: str, limit: int = DEFAULT_LIMIT) -> list[dict[str, Any]]:
    """The deferred tools matching ``query`` (module docstring), as ``tool_search_output.tools`` lists them."""
    limit = max(1, min(limit, MAX_LIMIT))
    exact = query.strip()
    terms = _words(query)
    ranked: list[tuple[float, int, DeferredTool]] = []
    for order, tool in enumerate(deferred):
        full = f"{tool.namespace}.{tool.spec.name}" if tool.namespace else tool.spec.name
        score = 100.0 if exact in (tool.spec.name, full) else _score(tool, terms)
        if score > 0:
            ranked.append((-score, order, tool))
    ranked.sort(key=lambda entry: (entry[0], entry[1]))
    chosen = [tool for _, _, tool in ranked[:limit]]
    out: list[dict[str, Any]] = []
    groups: dict[str, dict[str, Any]] = {}
    for tool in chosen:
        if tool.namespace is None:
            out.append(dict(tool.raw))
            continue
        group = groups.get(tool.namespace)
        if group is None:
            group = groups[tool.namespace] = {
                "type": "namespace",
                "name": tool.namespace,
                "description": tool.namespace_description or "",
                "tools": [],
            }
            out.append(group)
        group["tools"].append(dict(tool.raw))
    return out


def search_arguments(arguments: str) -> tuple[str, int]:
    """``(query, limit)`` from the model's arguments; text that is not our JSON is the query itself."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments, DEFAULT_LIMIT
    if not isinstance(parsed, dict):
        return arguments, DEFAULT_LIMIT
    query = parsed.get("query")
    if not isinstance(query, str):
        query = " ".join(str(v) for v in parsed.values() if isinstance(v, str))
    limit = parsed.get("limit")
    if isinstance(limit, bool) or not isinstance(limit, int | float):
        limit = DEFAULT_LIMIT
    return query, int(limit)


# --------------------------------------------------------------------------------------------------
# What the model reads back
# --------------------------------------------------------------------------------------------------


def loaded_namespaces(
    tools: Any, param: str, spec_of: Any
) -> list[tuple[str, str | None, list[ToolSpec], list[tuple[str, str]]]]:
    """``tool_search_output.tools`` → ``(namespace, description, specs, [(kind, name)])`` groups, in order.

    Top-level functions and custom tools are members of ``functions``; ``spec_of(tool, param)`` makes the
    ToolSpec of one function or custom tool (and validates it). Raises RenderError for anything else.
    """
    if not isinstance(tools, list):
        raise RenderError(f"Invalid type for '{param}': expected an array.", param=param, code="invalid_type")
    groups: dict[str, tuple[str | None, list[ToolSpec], list[tuple[str, str]]]] = {}
    for j, tool in enumerate(tools):
        where = f"{param}[{j}]"
        if not isinstance(tool, dict):
            raise RenderError(f"Invalid type for '{where}': expected an object.", param=where, code="invalid_type")
        kind = tool.get("type")
        if kind in ("function", "custom"):
            spec = spec_of(tool, where)
            group = groups.setdefault("functions", (None, [], []))
            group[1].append(spec)
            group[2].append((kind, spec.name))
        elif kind == "namespace":
            name = tool.get("name")
            if not isinstance(name, str) or not re.match(r"^[a-zA-Z0-9_-]+$", name) or name == "functions":
                raise RenderError(
                    f"Invalid value for '{where}.name': expected a namespace name.", param=f"{where}.name"
                )
            description = tool.get("description")
            if description is not None and not isinstance(description, str):
                raise RenderError(
                    f"Invalid type for '{where}.description': expected a string.",
                    param=f"{where}.description",
                    code="invalid_type",
                )
            members = tool.get("tools")
            if not isinstance(members, list):
                raise RenderError(
                    f"Invalid type for '{where}.tools': expected an array.", param=f"{where}.tools", code="invalid_type"
                )
            group = groups.setdefault(name, (description or None, [], []))
            for k, member in enumerate(members):
                inner = f"{where}.tools[{k}]"
                if not isinstance(member, dict) or member.get("type", "function") not in ("function", "custom"):
                    raise RenderError(
                        f"Invalid value for '{inner}': a loaded namespace holds function or custom tools.", param=inner
                    )
                spec = spec_of(member, inner)
                group[1].append(spec)
                group[2].append((member.get("type", "function"), spec.name))
        else:
            raise RenderError(
                f"Invalid value for '{where}.type': '{kind}' tools cannot be loaded by tool search on this server; "
                "it loads function, custom and namespace tools.",
                param=f"{where}.type",
            )
    return [(name, description, specs, kinds) for name, (description, specs, kinds) in groups.items()]


def loaded_tools_text(groups: list[tuple[str, str | None, list[ToolSpec], Any]]) -> str:
    """The tool message answering a tool search: the loaded tools declared as the developer message would."""
    sections = [f"## {name}\n\n{namespace_body(name, description, specs)}" for name, description, specs, _ in groups]
    if not any(specs for _, _, specs, _ in groups):
        return NO_MATCH_TEXT
    return LOADED_PREFIX + "\n\n".join(sections)
