"""RecipientMap: which output item a recipient becomes, decided by the request's declared tools (pitfalls.md #23)."""

from __future__ import annotations

import pytest

from harmony_responses.translate import ItemKind, RecipientMap, Target

from .helpers import ALL_TOOLS, CODE_INTERPRETER_TOOL, FUNCTION_TOOL, MCP_TOOL, NAMESPACE_TOOL

FC, CI, WS, MCP = ItemKind.FUNCTION_CALL, ItemKind.CODE_INTERPRETER, ItemKind.WEB_SEARCH, ItemKind.MCP_CALL


def test_from_tools_reads_every_tool_type() -> None:
    recipients = RecipientMap.from_tools(ALL_TOOLS)
    assert recipients.functions == frozenset({"get_weather"})
    assert recipients.custom == frozenset({"apply_patch"})
    # A custom tool is called as a function of the same namespace, and becomes a custom_tool_call.
    assert recipients.resolve("functions.apply_patch") == Target(ItemKind.CUSTOM_TOOL_CALL, "apply_patch")
    assert recipients.namespaces == {"crm": frozenset({"lookup"})}
    assert recipients.mcp_servers == frozenset({"deepwiki"})
    assert recipients.code_interpreter and recipients.web_search
    assert recipients.container_id == "cntr_fixed"


@pytest.mark.parametrize(
    "kind",
    [
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "web_search_2031_01_01",
    ],
)
def test_every_web_search_tool_type_enables_the_browser(kind: str) -> None:
    recipients = RecipientMap.from_tools([{"type": kind}])
    assert recipients.resolve("browser.search") == Target(WS, "search", "browser")


def test_from_tools_ignores_what_it_cannot_use() -> None:
    recipients = RecipientMap.from_tools(
        [
            {"type": "function"},  # no name
            {"type": "function", "name": 7},
            {"type": "mcp"},  # no server label
            {"type": "namespace", "name": "ns", "tools": [{"type": "function"}, "junk", {"name": "ok"}]},
            {"type": "file_search", "vector_store_ids": []},
            {"type": "custom", "name": "grammar_tool"},
            {"type": "code_interpreter", "container": {"type": "auto", "file_ids": []}},
        ]
    )
    assert recipients.functions == frozenset()
    assert recipients.mcp_servers == frozenset()
    assert recipients.namespaces == {"ns": frozenset({"ok"})}
    assert recipients.code_interpreter and recipients.container_id is None  # auto: the translator makes one
    assert RecipientMap.from_tools(None) == RecipientMap.from_tools([]) == RecipientMap(namespaces={})


@pytest.mark.parametrize(
    ("tools", "recipient", "target"),
    [
        # Function tools, declared or not: always a function_call named as the model wrote it.
        ([FUNCTION_TOOL], "functions.get_weather", Target(FC, "get_weather")),
        ([FUNCTION_TOOL], "functions.undeclared", Target(FC, "undeclared")),
        ([], "functions.get_weather", Target(FC, "get_weather")),
        ([], "send_email", Target(FC, "send_email")),
        # Built-ins only when the request declared them (else: a function call named as written).
        ([CODE_INTERPRETER_TOOL], "python", Target(CI, "python")),
        ([FUNCTION_TOOL], "python", Target(FC, "python")),
        ([{"type": "web_search"}], "browser.search", Target(WS, "search", "browser")),
        ([{"type": "web_search"}], "browser.open", Target(WS, "open", "browser")),
        ([{"type": "web_search"}], "browser.find", Target(WS, "find", "browser")),
        ([{"type": "web_search"}], "browser.click", Target(FC, "browser.click")),
        ([], "browser.search", Target(FC, "browser.search")),
        # The model sometimes puts built-ins under functions.* (harmony.md §7.2).
        ([CODE_INTERPRETER_TOOL], "functions.python", Target(CI, "python")),
        ([{"type": "web_search"}], "functions.browser.search", Target(WS, "search", "browser")),
        ([MCP_TOOL], "functions.deepwiki.ask_question", Target(MCP, "ask_question", "deepwiki")),
        # …unless the client declared a function of that name, which then wins.
        ([CODE_INTERPRETER_TOOL, {"type": "function", "name": "python"}], "functions.python", Target(FC, "python")),
        # MCP: <server_label>.<tool>; python is never an MCP call (pitfalls.md #23).
        ([MCP_TOOL], "deepwiki.ask_question", Target(MCP, "ask_question", "deepwiki")),
        ([MCP_TOOL], "deepwiki.", Target(FC, "deepwiki.")),
        ([MCP_TOOL], "deepwiki", Target(FC, "deepwiki")),
        ([MCP_TOOL], "python", Target(FC, "python")),
        ([MCP_TOOL], "other.ask_question", Target(FC, "other.ask_question")),
        # Namespace function tools: N.f → function_call f in namespace N (harmony.md §4.2).
        ([NAMESPACE_TOOL], "crm.lookup", Target(FC, "lookup", "crm")),
        ([NAMESPACE_TOOL], "functions.crm.lookup", Target(FC, "lookup", "crm")),
        ([NAMESPACE_TOOL], "crm.undeclared", Target(FC, "undeclared", "crm")),
        # Recipients that name nothing: never a function_call whose name is "".
        ([FUNCTION_TOOL], "functions.", Target(FC, "functions.")),
        ([NAMESPACE_TOOL], "functions.crm.", Target(FC, "crm.")),
        ([NAMESPACE_TOOL], "crm.", Target(FC, "crm.")),
    ],
)
def test_resolve(tools: list[dict], recipient: str, target: Target) -> None:
    assert RecipientMap.from_tools(tools).resolve(recipient) == target


@pytest.mark.parametrize(
    ("tools", "word", "is_tool"),
    [
        ([], "functions.anything", True),
        ([], "python", False),
        ([CODE_INTERPRETER_TOOL], "python", True),
        ([], "browser.search", False),
        ([{"type": "web_search"}], "browser.search", True),
        ([{"type": "web_search"}], "browser.click", False),
        ([MCP_TOOL], "deepwiki.ask_question", True),
        ([NAMESPACE_TOOL], "crm.lookup", True),
        (ALL_TOOLS, "json", False),
        (ALL_TOOLS, "code", False),
        (ALL_TOOLS, "get_weather", False),  # a bare function name without functions. is not a recipient
    ],
)
def test_is_tool_name(tools: list[dict], word: str, is_tool: bool) -> None:
    assert RecipientMap.from_tools(tools).is_tool_name(word) is is_tool


def test_item_kinds() -> None:
    assert {kind for kind in ItemKind if kind.is_builtin_tool} == {
        CI,
        WS,
        ItemKind.FILE_SEARCH,
        MCP,
        ItemKind.TOOL_SEARCH_CALL,
    }
    assert {kind.value for kind in ItemKind} == {
        "reasoning",
        "message",
        "function_call",
        "custom_tool_call",
        "code_interpreter_call",
        "web_search_call",
        "file_search_call",
        "mcp_call",
        "mcp_approval_request",
        "tool_search_call",
        "client_tool_search_call",
    }


def test_file_search_resolves_only_when_declared() -> None:
    declared = RecipientMap.from_tools([{"type": "file_search", "vector_store_ids": ["vs_1"]}])
    assert declared.resolve("file_search.msearch") == Target(ItemKind.FILE_SEARCH, "msearch", "file_search")
    assert declared.resolve("functions.file_search.msearch").kind is ItemKind.FILE_SEARCH
    assert declared.is_tool_name("file_search.msearch") and not declared.is_tool_name("file_search.other")
    undeclared = RecipientMap.from_tools([])
    assert undeclared.resolve("file_search.msearch") == Target(ItemKind.FUNCTION_CALL, "file_search.msearch")
    assert not undeclared.is_tool_name("file_search.msearch")


@pytest.mark.parametrize(
    ("execution", "kind"), [("server", ItemKind.TOOL_SEARCH_CALL), ("client", ItemKind.CLIENT_TOOL_SEARCH_CALL)]
)
def test_the_search_resolves_only_when_declared(execution: str, kind: ItemKind) -> None:
    recipients = RecipientMap.from_tools([{"type": "tool_search", "execution": execution}])
    assert recipients.resolve("functions.tool_search").kind is kind
    assert RecipientMap.from_tools([]).resolve("functions.tool_search") == Target(ItemKind.FUNCTION_CALL, "tool_search")


def test_loaded_tools_are_callable_like_declared_ones() -> None:
    loaded = [{"type": "namespace", "name": "mcp__x__", "tools": [{"type": "function", "name": "read"}]}]
    recipients = RecipientMap.from_tools([{"type": "tool_search", "execution": "client"}], loaded=loaded)
    assert recipients.resolve("mcp__x__.read") == Target(ItemKind.FUNCTION_CALL, "read", "mcp__x__")
