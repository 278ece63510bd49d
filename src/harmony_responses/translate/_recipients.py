"""Which output item a message becomes, decided from the tools the request declared.

Harmony puts the tool a message is addressed to in its header (``to=functions.get_weather``,
``to=python``, ``to=browser.search``, ``to=file_search.msearch``, ``to=<mcp server label>.<tool>``).
Guessing the item type from prefixes alone is how other servers streamed ``python`` as ``mcp_call``
(pitfalls.md #23); we resolve a recipient against the request's ``tools`` instead, and anything that names no
declared tool is surfaced as a ``function_call`` named as the model wrote it, so the client sees it rather
than the stream crashing.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..tool_types import is_web_search

__all__ = ["FILE_SEARCH_RECIPIENT", "ApprovalRule", "ItemKind", "RecipientMap", "Target"]

BROWSER_ACTIONS = frozenset({"search", "open", "find"})
FILE_SEARCH_RECIPIENT = "file_search.msearch"
# Harmony recipients that mean "back to the assistant", not a tool (tool-result headers say to=assistant).
NOT_A_TOOL = frozenset({"", "assistant", "all", "user"})


class ItemKind(enum.Enum):
    REASONING = "reasoning"
    MESSAGE = "message"
    FUNCTION_CALL = "function_call"
    # A call to a custom (freeform) tool: declared as a function of one string (render/_tools.py), its input
    # unwrapped from the JSON the model writes (_custom.py).
    CUSTOM_TOOL_CALL = "custom_tool_call"
    CODE_INTERPRETER = "code_interpreter_call"
    WEB_SEARCH = "web_search_call"
    FILE_SEARCH = "file_search_call"  # file_search.msearch (render/_tools.py), run by the server
    MCP_CALL = "mcp_call"
    # A call to an MCP tool that needs the user's approval: not run; it ends the response (its arguments are
    # buffered and the item is added and done at once when the call is complete).
    MCP_APPROVAL_REQUEST = "mcp_approval_request"
    # ``functions.tool_search`` (render/_tool_search.py). Run by the server (``execution: "server"``): a built-in
    # call, added when its arguments are complete and done with its result, a ``tool_search_output`` after it.
    TOOL_SEARCH_CALL = "tool_search_call"
    # Answered by the client (``execution: "client"``): like a function call it ends the response; added and
    # done at once when complete (the API has no argument deltas for it).
    CLIENT_TOOL_SEARCH_CALL = "client_tool_search_call"

    @property
    def is_builtin_tool(self) -> bool:
        return self in (
            ItemKind.CODE_INTERPRETER,
            ItemKind.WEB_SEARCH,
            ItemKind.FILE_SEARCH,
            ItemKind.MCP_CALL,
            ItemKind.TOOL_SEARCH_CALL,
        )

    @property
    def is_tool_search(self) -> bool:
        return self in (ItemKind.TOOL_SEARCH_CALL, ItemKind.CLIENT_TOOL_SEARCH_CALL)


@dataclass(frozen=True, slots=True)
class Target:
    """What a recipient resolves to. ``namespace`` is a function's namespace or an MCP server label."""

    kind: ItemKind
    name: str
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class ApprovalRule:
    """Which tools of one MCP server need the user's approval before they run (the tool's ``require_approval``).

    The API's default is approval for every tool ("By default, OpenAI will request your approval before any data
    is shared with a connector or remote MCP server"), so a missing or null ``require_approval`` means
    ``always``. In the filter form a tool matched by ``always`` needs approval, one matched by ``never`` does not,
    and any other tool keeps the safe default (approval): ``always`` wins when a tool matches both.
    """

    default: bool = True
    always: frozenset[str] = frozenset()
    never: frozenset[str] = frozenset()

    def requires(self, name: str) -> bool:
        if name in self.always:
            return True
        if name in self.never:
            return False
        return self.default

    @classmethod
    def from_tool(cls, require_approval: Any, listed_tools: Any = None) -> ApprovalRule:
        """The rule of one ``mcp`` tool; ``listed_tools`` (its ``mcp_list_tools`` tools) resolve ``read_only``."""
        if require_approval == "never":
            return cls(default=False)
        if not isinstance(require_approval, Mapping):
            return cls()  # "always", null, or a shape validation has already refused
        listed = [t for t in listed_tools or () if isinstance(t, Mapping) and isinstance(t.get("name"), str)]
        return cls(
            always=_filter_matches(require_approval.get("always"), listed),
            never=_filter_matches(require_approval.get("never"), listed),
        )


def _filter_matches(tool_filter: Any, listed: list[Mapping[str, Any]]) -> frozenset[str]:
    """The tool names an MCP tool filter (``{tool_names?, read_only?}``) selects; every given criterion must hold."""
    if not isinstance(tool_filter, Mapping):
        return frozenset()
    names, read_only = tool_filter.get("tool_names"), tool_filter.get("read_only")
    if not isinstance(read_only, bool):
        return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else frozenset()
    chosen = {
        tool["name"]
        for tool in listed
        if _read_only_hint(tool) is read_only and (not isinstance(names, list) or tool["name"] in names)
    }
    return frozenset(chosen)


def _read_only_hint(tool: Mapping[str, Any]) -> bool:
    # MCP's readOnlyHint defaults to false: a tool that says nothing may modify data.
    annotations = tool.get("annotations")
    return isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True


@dataclass(frozen=True, slots=True)
class RecipientMap:
    functions: frozenset[str] = frozenset()
    custom: frozenset[str] = frozenset()  # custom tools, called as functions.NAME like functions
    namespaces: Mapping[str, frozenset[str]] | None = None
    mcp_servers: frozenset[str] = frozenset()
    code_interpreter: bool = False
    web_search: bool = False
    file_search: bool = False
    container_id: str | None = None
    mcp_approval: Mapping[str, ApprovalRule] | None = None  # server label -> its rule (absent: approval)
    tool_search: str | None = None  # the tool_search tool's execution ("server", "client"), None: not declared

    @classmethod
    def from_tools(
        cls, tools: Iterable[Mapping[str, Any]] | None, loaded: Iterable[Mapping[str, Any]] = ()
    ) -> RecipientMap:
        """Build the map from a Responses request's ``tools`` array (unknown types are ignored here).

        ``loaded``: the tools of the conversation's ``tool_search_output`` items, callable like declared ones.
        """
        tool_search: str | None = None
        functions: set[str] = set()
        custom: set[str] = set()
        namespaces: dict[str, frozenset[str]] = {}
        mcp: set[str] = set()
        approval: dict[str, ApprovalRule] = {}
        code_interpreter = web_search = file_search = False
        container_id: str | None = None
        for tool in [*(tools or ()), *loaded]:
            kind = tool.get("type")
            if kind == "tool_search":
                tool_search = "client" if tool.get("execution") == "client" else "server"
            elif kind == "function" and isinstance(tool.get("name"), str):
                functions.add(tool["name"])
            elif kind == "custom" and isinstance(tool.get("name"), str):
                custom.add(tool["name"])
            elif kind == "namespace" and isinstance(tool.get("name"), str):
                names = {t["name"] for t in tool.get("tools") or () if isinstance(t, Mapping) and "name" in t}
                namespaces[tool["name"]] = namespaces.get(tool["name"], frozenset()) | names
            elif kind == "mcp" and isinstance(tool.get("server_label"), str):
                mcp.add(tool["server_label"])
                # ``_mcp_tools``: the server's listed tools, put there by the api, whose annotations resolve read_only.
                approval[tool["server_label"]] = ApprovalRule.from_tool(
                    tool.get("require_approval"), tool.get("_mcp_tools")
                )
            elif kind == "code_interpreter":
                code_interpreter = True
                container = tool.get("container")
                if isinstance(container, str):
                    container_id = container
            elif is_web_search(kind):
                web_search = True
            elif kind == "file_search":
                file_search = True
        return cls(
            functions=frozenset(functions),
            custom=frozenset(custom),
            namespaces=namespaces,
            mcp_servers=frozenset(mcp),
            code_interpreter=code_interpreter,
            web_search=web_search,
            file_search=file_search,
            container_id=container_id,
            mcp_approval=approval or None,
            tool_search=tool_search,
        )

    def is_tool_name(self, word: str) -> bool:
        """True when a bare header word (no ``to=``) names a declared tool: then it is a recipient."""
        if word.startswith("functions."):
            return True
        if word == "python":
            return self.code_interpreter
        head, dot, tail = word.partition(".")
        if not dot:
            return False
        if head == "browser":
            return self.web_search and tail in BROWSER_ACTIONS
        if word == FILE_SEARCH_RECIPIENT:
            return self.file_search
        return head in (self.namespaces or {}) or head in self.mcp_servers

    def resolve(self, recipient: str) -> Target:
        if self.tool_search is not None and recipient in ("functions.tool_search", "tool_search"):
            if self.tool_search == "client":
                return Target(ItemKind.CLIENT_TOOL_SEARCH_CALL, "tool_search")
            return Target(ItemKind.TOOL_SEARCH_CALL, "tool_search", "functions")
        if recipient.startswith("functions."):
            name = recipient[len("functions.") :]
            if name in self.functions:
                return Target(ItemKind.FUNCTION_CALL, name)
            if name in self.custom:
                return Target(ItemKind.CUSTOM_TOOL_CALL, name)
            # The model sometimes puts built-ins under functions.* (harmony.md §7.2).
            builtin = self._declared(name)
            if builtin is not None:
                return builtin
            head, dot, tail = name.partition(".")
            if dot and tail and head in (self.namespaces or {}):
                return Target(ItemKind.FUNCTION_CALL, tail, head)
            # ``to=functions.`` (the model stopped after a ``tool_choice: required`` prefill) names no function:
            # keep what it wrote rather than a function_call whose name is "".
            return Target(ItemKind.FUNCTION_CALL, name or recipient)
        builtin = self._declared(recipient)
        if builtin is not None:
            return builtin
        return Target(ItemKind.FUNCTION_CALL, recipient)

    def _declared(self, recipient: str) -> Target | None:
        if recipient == "python" and self.code_interpreter:
            return Target(ItemKind.CODE_INTERPRETER, "python")
        head, dot, tail = recipient.partition(".")
        if not dot or not tail:
            return None
        if head == "browser" and self.web_search and tail in BROWSER_ACTIONS:
            return Target(ItemKind.WEB_SEARCH, tail, "browser")
        if recipient == FILE_SEARCH_RECIPIENT and self.file_search:
            return Target(ItemKind.FILE_SEARCH, tail, head)
        if head in (self.namespaces or {}):
            return Target(ItemKind.FUNCTION_CALL, tail, head)
        if head in self.mcp_servers:
            rule = (self.mcp_approval or {}).get(head)
            if rule is None or rule.requires(tail):
                return Target(ItemKind.MCP_APPROVAL_REQUEST, tail, head)
            return Target(ItemKind.MCP_CALL, tail, head)
        return None
