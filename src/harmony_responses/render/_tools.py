"""The request's ``tools`` and ``tool_choice``: which tools the prompt declares, and the forced-call prefill.

Owns the mapping of Responses tool types onto Harmony namespaces:

- ``function`` → the developer message's ``functions`` namespace (``defer_loading`` ones: see below);
- ``custom`` (freeform input, e.g. Codex's ``apply_patch``) → a function of the same namespace taking one
  string, ``{"input": string}``, its format (a lark or regex grammar) in the description: gpt-oss was
  trained on JSON function calls and writes them reliably, while a bare-text call is not a form it knows
  (OpenAI's own Codex gave gpt-oss ``apply_patch`` as such a JSON function). The translator unwraps the
  string again into the ``custom_tool_call``'s ``input`` (translate/_custom.py);
- ``tool_search`` → a ``tool_search`` function in ``functions`` (``_tool_search``); with it, ``defer_loading``
  functions, custom tools and namespace members are not declared up front but kept in ``ToolSet.deferred``,
  to be loaded by a search. Without a ``tool_search`` tool nothing could load them, so they are declared
  like the others;
- ``namespace`` (Codex) → a developer namespace of its own, ``namespace N { ... }``, so the model calls
  ``to=N.f`` and the translator maps that back to ``function_call{name: f, namespace: N}``;
- ``web_search`` / ``web_search_preview`` (and dated variants) → the system ``browser`` namespace;
- ``file_search`` → the system ``file_search`` namespace, its one function ``msearch`` (``_file_search``);
- ``code_interpreter`` → the system ``python`` namespace;
- ``mcp`` → a system namespace named by ``server_label``.

``tool_choice`` is enforced, not hoped for: ``none`` declares nothing, ``allowed_tools`` declares the
subset, and a forced call is a prefill of the assistant header that the model must continue.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..tool_types import NAME_PATTERN, UNSUPPORTED_TOOL_TYPES, is_web_search
from ._errors import RenderError
from ._schema_ts import ToolSpec
from ._tool_search import SEARCH_NAME, DeferredTool, ToolSearch, search_tool_spec

__all__ = ["McpServer", "ToolSet", "apply_tool_choice", "parse_tools", "tool_spec"]

_SUPPORTED = (
    "function, custom, namespace, tool_search, web_search, web_search_preview, file_search, code_interpreter and mcp"
)
# Namespaces harmony and our system message already use; a developer namespace must not shadow them.
_RESERVED_NAMESPACES = frozenset({"functions", "browser", "python", "assistant", "file_search"})


@dataclass(frozen=True, slots=True)
class McpServer:
    """An MCP server declared as a system namespace; ``tools`` is None when nobody listed them yet."""

    label: str
    description: str | None
    tools: tuple[ToolSpec, ...] | None


@dataclass(frozen=True, slots=True)
class ToolSet:
    """The tools the prompt declares, after ``tool_choice`` filtering."""

    functions: tuple[ToolSpec, ...] = ()
    custom: frozenset[str] = frozenset()  # names among ``functions`` that are custom (freeform) tools
    namespaces: dict[str, tuple[str | None, tuple[ToolSpec, ...]]] = field(default_factory=dict)
    browser: bool = False
    python: bool = False
    file_search: bool = False
    mcp: tuple[McpServer, ...] = ()
    tool_search: ToolSearch | None = None
    deferred: tuple[DeferredTool, ...] = ()  # defer_loading tools, loaded by a tool search

    @property
    def empty(self) -> bool:
        return not (self.functions or self.namespaces or self.browser or self.python or self.file_search or self.mcp)


def _require_str(value: Any, param: str, what: str) -> str:
    if value is None:
        raise RenderError(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    if not isinstance(value, str):
        raise RenderError(f"Invalid type for '{param}': expected {what}.", param=param, code="invalid_type")
    return value


def _name(value: Any, param: str) -> str:
    name = _require_str(value, param, "a string")
    if not NAME_PATTERN.match(name):
        raise RenderError(
            f"Invalid '{param}': string does not match pattern. Expected a string that matches the pattern "
            f"'^[a-zA-Z0-9_-]+$'.",
            param=param,
        )
    return name


def _description(value: Any, param: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RenderError(f"Invalid type for '{param}': expected a string.", param=param, code="invalid_type")
    return value


def _parameters(value: Any, param: str) -> Any:
    if value is not None and not isinstance(value, dict):
        raise RenderError(
            f"Invalid type for '{param}': expected a JSON Schema object.", param=param, code="invalid_type"
        )
    return value


def _function_spec(tool: dict[str, Any], param: str) -> ToolSpec:
    return ToolSpec(
        name=_name(tool.get("name"), f"{param}.name"),
        description=_description(tool.get("description"), f"{param}.description"),
        parameters=_parameters(tool.get("parameters"), f"{param}.parameters"),
    )


def _custom_spec(tool: dict[str, Any], param: str) -> ToolSpec:
    """A custom tool as the function the model calls: its raw input is the one string argument ``input``."""
    description = _description(tool.get("description"), f"{param}.description")
    fmt = tool.get("format")
    note = "Freeform tool: pass the raw input text, unchanged and complete, as the string `input`."
    if isinstance(fmt, dict) and fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        syntax = "Lark grammar" if fmt.get("syntax") == "lark" else "regular expression"
        note += f" The input must match this {syntax}:\n```\n{fmt['definition']}\n```"
    return ToolSpec(
        name=_name(tool.get("name"), f"{param}.name"),
        description=f"{description}\n\n{note}" if description else note,
        parameters={
            "type": "object",
            "properties": {"input": {"type": "string", "description": "The raw input of the tool."}},
            "required": ["input"],
        },
    )


def _mcp_tool_specs(raw: Any, param: str, allowed: set[str] | None) -> tuple[ToolSpec, ...]:
    if not isinstance(raw, list):
        raise RenderError(f"Invalid type for '{param}': expected an array.", param=param, code="invalid_type")
    specs: list[ToolSpec] = []
    for j, entry in enumerate(raw):
        where = f"{param}[{j}]"
        if not isinstance(entry, dict):
            raise RenderError(f"Invalid type for '{where}': expected an object.", param=where, code="invalid_type")
        name = _name(entry.get("name"), f"{where}.name")
        if allowed is not None and name not in allowed:
            continue
        schema = entry.get("input_schema", entry.get("parameters"))
        specs.append(
            ToolSpec(
                name=name,
                description=_description(entry.get("description"), f"{where}.description"),
                parameters=_parameters(schema, f"{where}.input_schema"),
            )
        )
    return tuple(specs)


def _mcp_allowed(value: Any, param: str) -> set[str] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("tool_names")
        if value is None:
            return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RenderError(
            f"Invalid type for '{param}': expected an array of tool names.", param=param, code="invalid_type"
        )
    return set(value)


def parse_tools(tools: Any, *, listed_mcp_tools: dict[str, list[Any]]) -> ToolSet:
    """The declared tools of a request. ``listed_mcp_tools``: label → tools from ``mcp_list_tools`` items."""
    if tools is None:
        return ToolSet()
    if not isinstance(tools, list):
        raise RenderError("Invalid type for 'tools': expected an array.", param="tools", code="invalid_type")
    functions: list[ToolSpec] = []
    custom: set[str] = set()
    namespaces: dict[str, tuple[str | None, tuple[ToolSpec, ...]]] = {}
    browser = python = file_search = False
    mcp: list[McpServer] = []
    search = _tool_search(tools)
    deferred: list[DeferredTool] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise RenderError(f"Invalid type for '{where}': expected an object.", param=where, code="invalid_type")
        kind = _require_str(tool.get("type"), f"{where}.type", "a string")
        if kind in ("function", "custom"):
            spec = _function_spec(tool, where) if kind == "function" else _custom_spec(tool, where)
            if any(f.name == spec.name for f in functions) or any(
                d.namespace is None and d.spec.name == spec.name for d in deferred
            ):
                raise RenderError(
                    f"Invalid '{where}.name': a function or custom tool named '{spec.name}' is already declared.",
                    param=f"{where}.name",
                )
            if search is not None and spec.name == SEARCH_NAME:
                raise RenderError(
                    f"Invalid '{where}.name': '{SEARCH_NAME}' is the name of the tool_search tool declared in 'tools'.",
                    param=f"{where}.name",
                )
            if kind == "custom":
                custom.add(spec.name)
            if search is not None and _deferred(tool, where):
                deferred.append(DeferredTool(spec=spec, raw=tool))
            else:
                functions.append(spec)
        elif kind == "tool_search":
            pass  # read before the loop (_tool_search); its function is declared after it
        elif kind == "namespace":
            name = _name(tool.get("name"), f"{where}.name")
            if name in _RESERVED_NAMESPACES or name in namespaces:
                raise RenderError(
                    f"Invalid '{where}.name': the namespace name '{name}' is reserved or already declared.",
                    param=f"{where}.name",
                )
            members = tool.get("tools")
            if not isinstance(members, list):
                raise RenderError(
                    f"Invalid type for '{where}.tools': expected an array.", param=f"{where}.tools", code="invalid_type"
                )
            specs: list[ToolSpec] = []
            for j, member in enumerate(members):
                inner = f"{where}.tools[{j}]"
                if not isinstance(member, dict):
                    raise RenderError(
                        f"Invalid type for '{inner}': expected an object.", param=inner, code="invalid_type"
                    )
                member_kind = member.get("type", "function")
                if member_kind != "function":
                    raise RenderError(
                        f"Invalid value for '{inner}.type': '{member_kind}' tools are not supported inside a "
                        "namespace by this server; use function tools.",
                        param=f"{inner}.type",
                    )
                member_spec = _function_spec(member, inner)
                if search is not None and _deferred(member, inner):
                    deferred.append(DeferredTool(spec=member_spec, raw=member, namespace=name))
                else:
                    specs.append(member_spec)
            description = _description(tool.get("description"), f"{where}.description") or None
            deferred[:] = [
                replace(d, namespace_description=description) if d.namespace == name else d for d in deferred
            ]
            if specs:  # a namespace without functions offers the model nothing to call: not declared
                namespaces[name] = (description, tuple(specs))
        elif is_web_search(kind):
            browser = True
        elif kind == "file_search":
            file_search = True
        elif kind == "code_interpreter":
            python = True
        elif kind == "mcp":
            label = _name(tool.get("server_label"), f"{where}.server_label")
            if label in _RESERVED_NAMESPACES or any(s.label == label for s in mcp):
                raise RenderError(
                    f"Invalid '{where}.server_label': '{label}' is reserved or already declared.",
                    param=f"{where}.server_label",
                )
            allowed = _mcp_allowed(tool.get("allowed_tools"), f"{where}.allowed_tools")
            raw_tools = tool.get("_mcp_tools")
            listed: tuple[ToolSpec, ...] | None = None
            if raw_tools is not None:
                listed = _mcp_tool_specs(raw_tools, f"{where}._mcp_tools", allowed)
            elif label in listed_mcp_tools:
                listed = _mcp_tool_specs(listed_mcp_tools[label], f"{where}._mcp_tools", allowed)
            description = tool.get("server_description")
            mcp.append(
                McpServer(label=label, description=description if isinstance(description, str) else None, tools=listed)
            )
        elif kind in UNSUPPORTED_TOOL_TYPES:
            raise RenderError(
                f"Invalid value for '{where}.type': '{kind}' tools are not supported by this server. "
                f"Supported tool types are {_SUPPORTED}.",
                param=f"{where}.type",
            )
        else:
            raise RenderError(
                f"Invalid value for '{where}.type': unknown tool type '{kind}'. Supported tool types are {_SUPPORTED}.",
                param=f"{where}.type",
            )
    namespace_names = set(namespaces)
    for server in mcp:
        if server.label in namespace_names:
            raise RenderError(
                f"The MCP server_label '{server.label}' collides with a namespace tool of the same name.",
                param="tools",
            )
    if search is not None:
        functions.append(search_tool_spec(search, tuple(deferred)))
    return ToolSet(
        functions=tuple(functions),
        custom=frozenset(custom),
        namespaces=namespaces,
        browser=browser,
        python=python,
        file_search=file_search,
        mcp=tuple(mcp),
        tool_search=search,
        deferred=tuple(deferred),
    )


def _tool_search(tools: list[Any]) -> ToolSearch | None:
    """The request's ``tool_search`` tool (at most one), read first: whether ``defer_loading`` defers."""
    found: ToolSearch | None = None
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "tool_search":
            continue
        where = f"tools[{i}]"
        if found is not None:
            raise RenderError(
                f"Invalid value for '{where}.type': only one tool_search tool may be declared.", param=f"{where}.type"
            )
        execution = tool.get("execution") or "server"
        if execution not in ("server", "client"):
            raise RenderError(
                f"Invalid value: '{execution}'. Supported values are: 'server' and 'client'.",
                param=f"{where}.execution",
            )
        found = ToolSearch(
            execution=execution,
            description=_description(tool.get("description"), f"{where}.description") or None,
            parameters=_parameters(tool.get("parameters"), f"{where}.parameters"),
        )
    return found


def _deferred(tool: dict[str, Any], param: str) -> bool:
    value = tool.get("defer_loading")
    if value is not None and not isinstance(value, bool):
        raise RenderError(
            f"Invalid type for '{param}.defer_loading': expected a boolean.",
            param=f"{param}.defer_loading",
            code="invalid_type",
        )
    return value is True


def tool_spec(tool: dict[str, Any], param: str) -> ToolSpec:
    """The ToolSpec of one function or custom tool (a tool search loads them: ``_tool_search``)."""
    return _custom_spec(tool, param) if tool.get("type") == "custom" else _function_spec(tool, param)


# --------------------------------------------------------------------------------------------------
# tool_choice
# --------------------------------------------------------------------------------------------------

_CHANNEL = "<|channel|>"


def _required_prefill(tools: ToolSet, param: str) -> str:
    """The header prefix that forces *some* call among the declared tools, as far as it can be fixed.

    With one target namespace we fix it (``to=functions.``); with several, only ``to=`` and the model picks
    the recipient. Developer tools are called on commentary, built-ins (browser, python, MCP servers, all
    declared in the system message) on analysis; with both kinds declared we use commentary, which the
    parser classifies by recipient anyway.
    """
    developer_targets = (["functions"] if tools.functions else []) + list(tools.namespaces)
    builtin_targets = (["browser"] if tools.browser else []) + (["python"] if tools.python else [])
    builtin_targets += ["file_search"] if tools.file_search else []
    builtin_targets += [server.label for server in tools.mcp]
    targets = developer_targets + builtin_targets
    if not targets:
        raise RenderError(
            "Tool choice 'required' must be specified with 'tools' parameter.", param=param, code="invalid_value"
        )
    channel = "commentary" if developer_targets else "analysis"
    if len(targets) > 1:
        return f"{_CHANNEL}{channel} to="
    target = targets[0]
    if target == "python":
        return f"{_CHANNEL}{channel} to=python"
    return f"{_CHANNEL}{channel} to={target}."


def _filter_allowed(tools: ToolSet, allowed: Any, param: str) -> ToolSet:
    if not isinstance(allowed, list):
        raise RenderError(f"Invalid type for '{param}': expected an array.", param=param, code="invalid_type")
    functions: list[ToolSpec] = []
    namespaces: dict[str, tuple[str | None, list[ToolSpec]]] = {}
    browser = python = file_search = False
    mcp: dict[str, McpServer] = {}
    for j, entry in enumerate(allowed):
        where = f"{param}[{j}]"
        if not isinstance(entry, dict):
            raise RenderError(f"Invalid type for '{where}': expected an object.", param=where, code="invalid_type")
        kind = entry.get("type")
        missing = RenderError(f"Invalid value for '{where}': no such tool is declared in 'tools'.", param=where)
        if kind == "custom":
            spec = next((f for f in tools.functions if f.name == entry.get("name") and f.name in tools.custom), None)
            if spec is None:
                raise missing
            if spec not in functions:
                functions.append(spec)
        elif kind == "function":
            name = entry.get("name")
            namespace = entry.get("namespace")
            if namespace is None:
                spec = next((f for f in tools.functions if f.name == name), None)
                if spec is not None:
                    if spec not in functions:
                        functions.append(spec)
                    continue
            for ns_name, (ns_description, ns_tools) in tools.namespaces.items():
                if namespace is not None and ns_name != namespace:
                    continue
                member = next((t for t in ns_tools if t.name == name), None)
                if member is not None:
                    kept = namespaces.setdefault(ns_name, (ns_description, []))[1]
                    if member not in kept:
                        kept.append(member)
                    break
            else:
                raise missing
        elif kind == "namespace":
            ns_name = entry.get("name")
            ns = tools.namespaces.get(ns_name) if isinstance(ns_name, str) else None
            if ns is None or not isinstance(ns_name, str):
                raise missing
            namespaces[ns_name] = (ns[0], list(ns[1]))
        elif kind == "tool_search":
            spec = next((f for f in tools.functions if f.name == SEARCH_NAME), None)
            if tools.tool_search is None or spec is None:
                raise missing
            if spec not in functions:
                functions.append(spec)
        elif isinstance(kind, str) and is_web_search(kind):
            if not tools.browser:
                raise missing
            browser = True
        elif kind == "code_interpreter":
            if not tools.python:
                raise missing
            python = True
        elif kind == "file_search":
            if not tools.file_search:
                raise missing
            file_search = True
        elif kind == "mcp":
            server = next((s for s in tools.mcp if s.label == entry.get("server_label")), None)
            if server is None:
                raise missing
            name = entry.get("name")
            if name is not None and server.tools is not None:
                chosen = tuple(t for t in server.tools if t.name == name)
                if not chosen:
                    raise missing
                previous = mcp.get(server.label)
                merged = chosen if previous is None or previous.tools is None else previous.tools + chosen
                mcp[server.label] = replace(server, tools=merged)
            else:
                mcp[server.label] = server
        else:
            raise RenderError(
                f"Invalid value for '{where}.type': '{kind}' is not a tool type this server declares.",
                param=f"{where}.type",
            )
    return ToolSet(
        functions=tuple(functions),
        custom=tools.custom & {f.name for f in functions},
        namespaces={name: (desc, tuple(specs)) for name, (desc, specs) in namespaces.items()},
        browser=browser,
        python=python,
        file_search=file_search,
        mcp=tuple(mcp.values()),
        # The deferred tools stay loadable only while the search that loads them is allowed.
        tool_search=tools.tool_search if any(f.name == SEARCH_NAME for f in functions) else None,
        deferred=tools.deferred if any(f.name == SEARCH_NAME for f in functions) else (),
    )


def _with_deferred(tools: ToolSet, name: Any) -> ToolSet:
    """``tools`` with the deferred top-level function ``name`` declared: a call forced to it must see it."""
    loaded = next((d for d in tools.deferred if d.namespace is None and d.spec.name == name), None)
    if loaded is None:
        return tools
    return replace(tools, functions=(*tools.functions, loaded.spec))


def apply_tool_choice(tools: ToolSet, tool_choice: Any) -> tuple[ToolSet, str]:
    """(the tools to declare, the assistant-header prefill text with special tokens, "" for none)."""
    param = "tool_choice"
    if tool_choice is None or tool_choice == "auto":
        return tools, ""
    if tool_choice == "none":
        return ToolSet(), ""
    if tool_choice == "required":
        return tools, _required_prefill(tools, param)
    if isinstance(tool_choice, str):
        raise RenderError(
            f"Invalid value: '{tool_choice}'. Supported values are: 'none', 'auto', and 'required'.", param=param
        )
    if not isinstance(tool_choice, dict):
        raise RenderError(
            "Invalid type for 'tool_choice': expected a string or an object.", param=param, code="invalid_type"
        )
    kind = tool_choice.get("type")
    if kind == "function":
        name = tool_choice.get("name")
        namespace = tool_choice.get("namespace")
        if namespace is None:
            tools = _with_deferred(tools, name)
            if not any(f.name == name for f in tools.functions):
                raise RenderError(
                    f"Tool choice 'function' with name '{name}' is not among the declared function tools.",
                    param=param,
                )
            recipient = f"functions.{name}"
        else:
            ns = tools.namespaces.get(namespace) if isinstance(namespace, str) else None
            if ns is None or not any(t.name == name for t in ns[1]):
                raise RenderError(
                    f"Tool choice 'function' with name '{name}' in namespace '{namespace}' is not declared.",
                    param=param,
                )
            recipient = f"{namespace}.{name}"
        return tools, f"{_CHANNEL}commentary to={recipient} <|constrain|>json<|message|>"
    if kind == "custom":
        name = tool_choice.get("name")
        tools = _with_deferred(tools, name)
        if name not in tools.custom:
            raise RenderError(
                f"Tool choice 'custom' with name '{name}' is not among the declared custom tools.", param=param
            )
        # The same prefill as a named function: the model writes {"input": …} from here (see the docstring).
        return tools, f"{_CHANNEL}commentary to=functions.{name} <|constrain|>json<|message|>"
    if kind == "allowed_tools":
        mode = tool_choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise RenderError(
                f"Invalid value: '{mode}'. Supported values are: 'auto' and 'required'.", param=f"{param}.mode"
            )
        filtered = _filter_allowed(tools, tool_choice.get("tools"), f"{param}.tools")
        return filtered, _required_prefill(filtered, param) if mode == "required" else ""
    if isinstance(kind, str) and is_web_search(kind):
        if not tools.browser:
            raise RenderError(f"Tool choice '{kind}' requires a '{kind}' tool in 'tools'.", param=param)
        return tools, f"{_CHANNEL}analysis to=browser."
    if kind == "code_interpreter":
        if not tools.python:
            raise RenderError(
                "Tool choice 'code_interpreter' requires a 'code_interpreter' tool in 'tools'.", param=param
            )
        return tools, f"{_CHANNEL}analysis to=python"
    if kind == "file_search":
        if not tools.file_search:
            raise RenderError("Tool choice 'file_search' requires a 'file_search' tool in 'tools'.", param=param)
        return tools, f"{_CHANNEL}analysis to=file_search.msearch"
    if kind == "mcp":
        label = tool_choice.get("server_label")
        server = next((s for s in tools.mcp if s.label == label), None)
        if server is None:
            raise RenderError(f"Tool choice 'mcp' names server_label '{label}', which is not declared.", param=param)
        name = tool_choice.get("name")
        if name is None:
            return tools, f"{_CHANNEL}analysis to={label}."
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise RenderError(f"Invalid 'tool_choice.name': '{name}' is not a valid tool name.", param=f"{param}.name")
        if server.tools is not None and not any(t.name == name for t in server.tools):
            raise RenderError(
                f"Tool choice 'mcp' names tool '{name}', which server '{label}' does not list.", param=param
            )
        return tools, f"{_CHANNEL}analysis to={label}.{name}"
    raise RenderError(
        f"Tool choice of type '{kind}' is not supported by this server.", param=f"{param}.type" if kind else param
    )
