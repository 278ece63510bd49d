"""tools/mcp on its own: operator options (hosts, named stdio servers), connections and sessions, results.

The live tests talk to ``mcp_server.py`` (the ``mcp`` SDK's ``MCPServer``) in a child process over streamable
HTTP, and over stdio as a configured server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_types import CallToolResult, ImageContent, TextContent

from harmony_responses.serve.cli import add_serve_arguments, config_from_args
from harmony_responses.tools.mcp import (
    McpConnection,
    McpFailure,
    McpOptions,
    McpSession,
    McpTarget,
    StdioServer,
    load_mcp_config,
    parse_stdio_server,
    prepare_mcp,
    result_text,
)
from harmony_responses.tools.mcp._session import _from_result
from harmony_responses.translate import ItemKind, ToolCall

from .mcp_server import HERE, TOOL_NAMES, McpServerProcess


@pytest.fixture(scope="module")
def server() -> Iterator[McpServerProcess]:
    process = McpServerProcess()
    yield process
    process.stop()


def call(name: str, arguments: str, label: str = "calc") -> ToolCall:
    return ToolCall(
        kind=ItemKind.MCP_CALL, item_id="mcp_1", name=name, namespace=label, arguments=arguments, channel="analysis"
    )


# ---------------------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("hosts", "url", "allowed"),
    [
        (None, "http://169.254.169.254/latest", True),  # the default: anything (the documented SSRF risk)
        (("mcp.example.com",), "https://mcp.example.com/mcp", True),
        (("mcp.example.com",), "https://MCP.example.com/mcp", True),
        (("mcp.example.com",), "https://evil.com/mcp?x=mcp.example.com", False),
        (("*.example.com",), "https://a.b.example.com/mcp", True),
        (("*.example.com",), "https://example.com/mcp", False),
        (("*.example.com",), "https://notexample.com/mcp", False),
        (("127.0.0.1:8080",), "http://127.0.0.1:8080/mcp", True),
        (("127.0.0.1:8080",), "http://127.0.0.1:8081/mcp", False),
        (("example.com:443",), "https://example.com/mcp", True),
        (("[::1]:9000",), "http://[::1]:9000/mcp", True),
        (("::1",), "http://[::1]:9000/mcp", True),  # a bare IPv6 address: any port
        (("*",), "http://anything.at.all/", True),
        (("a.com", "b.com"), "http://b.com/", True),
    ],
)
def test_allowed_hosts(hosts: tuple[str, ...] | None, url: str, allowed: bool) -> None:
    assert (McpOptions(allowed_hosts=hosts).url_problem(url) is None) is allowed


@pytest.mark.parametrize("url", ["ftp://example.com/", "file:///etc/passwd", "http:///nohost", "http://[bad/"])
def test_only_http_urls(url: str) -> None:
    assert McpOptions().url_problem(url) is not None


def test_stdio_server_specs_and_config_file(tmp_path: Path) -> None:
    server = parse_stdio_server("files=npx -y '@scope/server files' /srv/docs")
    assert server == StdioServer(name="files", command="npx", args=("-y", "@scope/server files", "/srv/docs"))
    for bad in ["files", "=cmd", "files=", "a b=cmd", "x='unclosed"]:
        with pytest.raises(ValueError):
            parse_stdio_server(bad)
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"notes": {"command": "notes-server", "args": ["-v"], "env": {"A": "1"}}}})
    )
    assert load_mcp_config(config) == (
        StdioServer(name="notes", command="notes-server", args=("-v",), env=(("A", "1"),)),
    )
    for content in [
        "[]",
        '{"mcpServers": {"x": {"url": "http://a"}}}',
        '{"mcpServers": {"x": {"command": "c", "args": "a"}}}',
        "{",
    ]:
        config.write_text(content)
        with pytest.raises(ValueError):
            load_mcp_config(config)
    with pytest.raises(ValueError, match="unique"):
        McpOptions(servers=(server, server))
    with pytest.raises(ValueError, match="positive"):
        McpOptions(timeout=0)


def test_cli_flags(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"notes": {"command": "notes-server"}}}))
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(
        [
            "--mcp-server",
            "files=files-server /srv",
            "--mcp-config",
            str(config),
            "--mcp-allowed-hosts",
            "a.com, *.b.com",
        ]
        + ["--mcp-timeout", "7.5"]
    )
    options = config_from_args(args).mcp
    assert options.allowed_hosts == ("a.com", "*.b.com") and options.timeout == 7.5
    assert [s.name for s in options.servers] == ["files", "notes"]
    assert config_from_args(parser.parse_args([])).mcp == McpOptions()


# ---------------------------------------------------------------------------------------------- results


def test_results_become_output_or_errors() -> None:
    ok = _from_result(CallToolResult(content=[TextContent(text="a"), TextContent(text="b")]))
    assert (ok.output, ok.text, ok.error) == ("a\nb", "a\nb", None)
    image = _from_result(CallToolResult(content=[ImageContent(data="AAAA", mime_type="image/png")]))
    assert image.output == "[image image/png]"
    structured = _from_result(CallToolResult(content=[], structured_content={"x": 1}))
    assert structured.output == '{"x": 1}'
    failed = _from_result(CallToolResult(content=[TextContent(text="nope")], is_error=True))
    assert failed.error == {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "nope"}]}
    assert failed.output is None and json.loads(failed.text) == {"error": failed.error}
    assert result_text(output=None) == "" and result_text(error="x") == '{"error": "x"}'


# ---------------------------------------------------------------------------------------------- live


def test_session_calls_and_reconnects(server: McpServerProcess) -> None:
    async def main() -> None:
        connection = McpConnection(McpTarget(label="calc", url=server.url), timeout=5)
        session = McpSession(connection, allowed=["add", "fail"])
        assert session.namespace == "calc"
        result = await session.call(call("add", '{"a": 1, "b": 2}'))
        assert (result.output, result.error) == ("3", None)
        assert connection.instructions == "Arithmetic, weather and notes for the tests."
        refused = await session.call(call("weather", '{"city": "Oslo"}'))
        assert refused.error is not None and "not available" in refused.error["message"]
        empty = await session.call(call("add", ""))  # no arguments: {} (the server says what is missing)
        assert empty.error is not None and empty.error["type"] == "mcp_tool_execution_error"
        await session.aclose()
        await session.aclose()  # idempotent
        again = await session.call(call("add", '{"a": 2, "b": 2}'))  # a closed session connects again
        assert again.output == "4"
        await session.aclose()

    asyncio.run(main())


def test_prepare_lists_in_parallel_and_closes_its_connections(server: McpServerProcess) -> None:
    async def main() -> None:
        tools = [
            {"type": "function", "name": "f"},
            {"type": "mcp", "server_label": "one", "server_url": server.url, "allowed_tools": ["add"]},
            {"type": "mcp", "server_label": "two", "server_url": "http://127.0.0.1:9/mcp"},
        ]
        plan = await prepare_mcp(tools, [], McpOptions(timeout=5))
        assert plan.tools is not None and plan.tools[0] == tools[0]
        assert [t["name"] for t in plan.tools[1]["_mcp_tools"]] == ["add"]
        assert plan.tools[2]["_mcp_tools"] == [] and "could not be listed" in plan.tools[2]["server_description"]
        (one, listed, error), (two, nothing, failure) = plan.listings
        assert (one, [t["name"] for t in listed], error) == ("one", ["add"], None)
        assert (two, nothing) == ("two", []) and failure is not None and "Could not reach" in failure
        for session in plan.sessions:
            assert session.connection._task is None  # closed after listing: sessions connect when called
        assert await prepare_mcp([{"type": "function", "name": "f"}], [], McpOptions()) is not None

    asyncio.run(main())


def test_stdio_server_listing_and_a_broken_one() -> None:
    async def main() -> None:
        options = McpOptions(
            servers=(
                StdioServer(name="local", command=sys.executable, args=(str(HERE), "stdio")),
                StdioServer(name="broken", command=sys.executable, args=("-c", "import sys; sys.exit(3)")),
            ),
            timeout=20,
        )
        tools = [
            {"type": "mcp", "server_label": "a", "server_url": "stdio:local"},
            {"type": "mcp", "server_label": "b", "server_url": "stdio:broken"},
        ]
        plan = await prepare_mcp(tools, [], options)
        (_, listed, error), (_, _, failure) = plan.listings
        assert [t["name"] for t in listed] == list(TOOL_NAMES) and error is None
        assert failure is not None and "MCP error -32000" in failure
        session = plan.session("a")
        assert session is not None
        result = await session.call(call("weather", '{"city": "Oslo"}', "a"))
        assert result.output == "Sunny in Oslo, 21 °C."
        await session.aclose()

    asyncio.run(main())


def test_a_connection_that_cannot_connect_raises_mcp_failure() -> None:
    async def main() -> Any:
        connection = McpConnection(McpTarget(label="x", url="http://127.0.0.1:9/mcp"), timeout=5)
        with pytest.raises(McpFailure) as info:
            await connection.list_tools()
        await connection.aclose()
        return info.value.error

    error = asyncio.run(main())
    assert error["type"] == "http_error" and error["code"] == 502
