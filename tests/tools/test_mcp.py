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
    McpListingError,
    McpOptions,
    McpSession,
    McpTarget,
    StdioServer,
    _guard,
    load_mcp_config,
    parse_stdio_server,
    prepare_mcp,
    result_text,
)
from harmony_responses.tools.mcp._connection import UNIFORM_FAILURE
from harmony_responses.tools.mcp._session import _from_result
from harmony_responses.translate import ItemKind, ToolCall

from .mcp_server import HERE, TOOL_NAMES, BannerService, InternalService, McpServerProcess, free_port

LOOPBACK = McpOptions(allowed_hosts=("127.0.0.1",), timeout=5)  # the test servers' host, listed


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
        # The default: public hosts; internal IP literals and loopback names are refused outright (names are
        # checked by their addresses when connecting: see the guard tests below).
        (None, "https://mcp.example.com/mcp", True),
        (None, "http://8.8.8.8/mcp", True),
        (None, "http://169.254.169.254/latest", False),
        (None, "http://127.0.0.1:8080/mcp", False),
        (None, "http://localhost:8080/mcp", False),
        (None, "http://app.localhost/mcp", False),
        (None, "http://[::1]:9000/mcp", False),
        (None, "http://[::ffff:127.0.0.1]/mcp", False),
        (None, "http://[fe80::1]/mcp", False),
        (None, "http://10.0.0.7/mcp", False),
        (None, "http://172.16.5.4/mcp", False),
        (None, "http://192.168.1.1/mcp", False),
        (None, "http://[fd00::1]/mcp", False),
        (None, "http://0.0.0.0:8000/mcp", False),
        (None, "http://224.0.0.1/mcp", False),
        (("127.0.0.1",), "http://127.0.0.1:8080/mcp", True),  # listed: internal addresses are the operator's call
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
        connection = McpConnection(McpTarget(label="calc", url=server.url, trusted=True), timeout=5)
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
        # A server that cannot be listed fails the preparation, with the API's message.
        with pytest.raises(McpListingError) as failed:
            await prepare_mcp(tools, [], LOOPBACK)
        assert failed.value.message.startswith("Error retrieving tool list from MCP server: 'two'. Could not reach")
        plan = await prepare_mcp(tools[:2], [], LOOPBACK)
        assert plan.tools is not None and plan.tools[0] == tools[0]
        assert [t["name"] for t in plan.tools[1]["_mcp_tools"]] == ["add"]
        ((one, listed, error),) = plan.listings
        assert (one, [t["name"] for t in listed], error) == ("one", ["add"], None)
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
        with pytest.raises(McpListingError) as failed:
            await prepare_mcp(tools, [], options)
        assert "'b'" in failed.value.message and "MCP error -32000" in failed.value.message
        plan = await prepare_mcp(tools[:1], [], options)
        ((_, listed, error),) = plan.listings
        assert [t["name"] for t in listed] == list(TOOL_NAMES) and error is None
        session = plan.session("a")
        assert session is not None
        result = await session.call(call("weather", '{"city": "Oslo"}', "a"))
        assert result.output == "Sunny in Oslo, 21 °C."
        await session.aclose()

    asyncio.run(main())


def test_a_connection_that_cannot_connect_raises_mcp_failure() -> None:
    async def main() -> Any:
        connection = McpConnection(McpTarget(label="x", url="http://127.0.0.1:9/mcp", trusted=True), timeout=5)
        with pytest.raises(McpFailure) as info:
            await connection.list_tools()
        await connection.aclose()
        return info.value.error

    error = asyncio.run(main())
    assert error["type"] == "http_error" and error["code"] == 502


# ---------------------------------------------------------------------------------------------- the SSRF guard


async def _list_error(url: str, *, trusted: bool) -> dict[str, Any]:
    connection = McpConnection(McpTarget(label="probe", url=url, trusted=trusted), timeout=3)
    try:
        with pytest.raises(McpFailure) as info:
            await connection.list_tools()
    finally:
        await connection.aclose()
    return info.value.error


def test_failures_with_hosts_not_listed_are_one_uniform_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Take loopback for a public address, as if these services were on the internet: what is left to check
    # is that the errors of a host the operator did not list say nothing of what answered there.
    monkeypatch.setattr(_guard, "address_problem", lambda ip: None)
    internal, banner, keyed = InternalService(), BannerService(), McpServerProcess(key="sesame")
    urls = {
        "an HTTP service answering JSON": internal.url,
        "the same, as an SSE endpoint": internal.url.replace("/mcp", "/sse"),
        "a service that is not HTTP": f"http://127.0.0.1:{banner.port}/mcp",
        "a closed port": f"http://127.0.0.1:{free_port()}/mcp",
        "an MCP server answering 401": keyed.url,
    }
    try:

        async def main() -> tuple[dict[str, Any], dict[str, Any]]:
            guarded = {what: await _list_error(url, trusted=False) for what, url in urls.items()}
            trusted = {what: await _list_error(url, trusted=True) for what, url in urls.items()}
            return guarded, trusted

        with caplog.at_level("INFO", logger="harmony_responses.tools.mcp"):
            guarded, trusted = asyncio.run(main())
    finally:
        internal.stop(), banner.stop(), keyed.stop()
    assert all(error == UNIFORM_FAILURE for error in guarded.values()), guarded
    assert InternalService.SECRET not in json.dumps(guarded)
    # The same failures are told apart for a listed host (the operator's own), so the test does reach them,
    # and before the guard this is what any client read, the internal service's body included.
    assert len({json.dumps(error) for error in trusted.values()}) == len(urls)
    assert InternalService.SECRET in json.dumps(trusted)
    assert trusted["an MCP server answering 401"] == {"type": "http_error", "code": 401, "message": "Unauthorized"}
    # What happened is in the server's log, for the operator.
    assert InternalService.SECRET in caplog.text and "probe" in caplog.text


def test_a_name_is_judged_by_its_addresses_and_connected_to_as_checked() -> None:
    answers = {"mcp.example.test": [["203.0.113.9"], ["93.184.215.14"], ["93.184.215.14", "127.0.0.1"]]}
    connected: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[str]:
        return answers[host].pop(0)

    class Recorder(_guard.httpcore2.AsyncNetworkBackend):  # stands in for the socket: nothing leaves loopback
        async def connect_tcp(self, host: str, port: int, **kwargs: Any) -> Any:
            connected.append((host, port))
            raise _guard.httpcore2.ConnectError("recorded")

    backend = _guard.GuardedBackend(inner=Recorder(), resolve=resolve)

    async def attempt() -> str:
        with pytest.raises(_guard.httpcore2.ConnectError) as info:
            await backend.connect_tcp("mcp.example.test", 443, timeout=1)
        return str(info.value)

    async def main() -> list[str]:
        return [await attempt() for _ in range(3)]

    documentation, public, mixed = asyncio.run(main())
    assert "resolves to 203.0.113.9" in documentation and "not allowed" in documentation  # TEST-NET-3
    assert public == "recorded" and "a loopback address" in mixed  # one inward answer refuses the name
    # The socket was asked for the address that was checked, never the name (no second lookup to rebind).
    assert connected == [("93.184.215.14", 443)]


def test_the_guarded_transport_goes_through_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    internal = InternalService()

    async def resolve(host: str, port: int) -> list[str]:
        assert host == "internal.example.test"
        return ["127.0.0.1"]

    async def get() -> Any:
        transport = _guard.guarded_transport(_guard.GuardedBackend(resolve=resolve))
        async with _guard.httpx2.AsyncClient(transport=transport, timeout=3) as client:
            return await client.get(f"http://internal.example.test:{internal.port}/")

    try:
        with pytest.raises(_guard.httpx2.ConnectError, match="resolves to 127.0.0.1, a loopback address"):
            asyncio.run(get())
        assert internal.requests == []  # refused before connecting
        monkeypatch.setattr(_guard, "address_problem", lambda ip: None)
        response = asyncio.run(get())  # the same name, loopback taken for public: reached by its checked address
        assert response.json() == {"secret": InternalService.SECRET}
        assert internal.requests[0]["host"] == f"internal.example.test:{internal.port}"  # the URL's name, kept
    finally:
        internal.stop()


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "127.1", "0", "017700000001"])
def test_numeric_spellings_of_internal_addresses_are_caught_where_they_resolve(host: str) -> None:
    # Not IP literals to ipaddress, so not a 400; the system resolver reads them as 127.0.0.1 or 0.0.0.0
    # (no DNS query), and the guard refuses what they resolve to.
    assert McpOptions().url_problem(f"http://{host}/mcp") is None
    connected: list[str] = []

    class Recorder(_guard.httpcore2.AsyncNetworkBackend):
        async def connect_tcp(self, host: str, port: int, **kwargs: Any) -> Any:
            connected.append(host)
            raise _guard.httpcore2.ConnectError("recorded")

    async def main() -> str:
        with pytest.raises(_guard.httpcore2.ConnectError) as info:
            await _guard.GuardedBackend(inner=Recorder()).connect_tcp(host, 80, timeout=2)
        return str(info.value)

    message = asyncio.run(main())
    assert "not allowed without --mcp-allowed-hosts" in message and connected == []
