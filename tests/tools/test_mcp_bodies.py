"""What an MCP server may send is bounded: a JSON body that never ends fails the listing or the call cleanly.

``FloodServer`` speaks just enough streamable HTTP (JSON answers) to list one tool, and answers the method it
is told to flood with a JSON-RPC result whose array never ends, written as fast as the client reads, until
the client goes away. It counts what it managed to send: with the bound, the client stops reading a little
past it (what sits in the sockets' buffers); without it, the client reads until the call's timeout, hundreds
of megabytes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from harmony_responses.tools.mcp import McpConnection, McpFailure, McpTarget

LIMIT = 256 * 1024
# Socket buffers on both sides hold a few MiB at the most; an unbounded read takes far more within the timeout.
SENT_AT_MOST = LIMIT + 16 * 1024 * 1024
TOOL = {"name": "flood", "description": "Answers without end.", "inputSchema": {"type": "object"}}


class FloodServer:
    def __init__(self, flood: str, *, content_type: str = "application/json") -> None:
        self.flood = flood
        self.content_type = content_type
        self.sent = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/mcp", self._post)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/mcp"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def _post(self, request: web.Request) -> web.StreamResponse:
        message = await request.json()
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            return web.Response(status=202)  # a notification
        if method == self.flood:
            return await self._endless(request, ident)
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "flood", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        else:
            result = {"content": [{"type": "text", "text": "ok"}]}
        return web.json_response({"jsonrpc": "2.0", "id": ident, "result": result})

    async def _endless(self, request: web.Request, ident: Any) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": self.content_type})
        await response.prepare(request)
        head = json.dumps({"jsonrpc": "2.0", "id": ident})[:-1] + ', "result": {"content": ['
        chunk = b'{"type": "text", "text": "' + b"x" * 65536 + b'"}, '
        try:
            await response.write(head.encode())
            while self.sent < 4 * 1024 * 1024 * 1024:
                await response.write(chunk)
                self.sent += len(chunk)
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            pass  # the client went away: what it read is counted
        return response


async def _flooded(flood: str, **server: Any) -> tuple[McpFailure | Any, int]:
    service = FloodServer(flood, **server)
    await service.start()
    connection = McpConnection(
        McpTarget(label="flood", url=service.url, trusted=True), timeout=20, max_body_bytes=LIMIT
    )
    try:
        if flood == "tools/list":
            outcome: Any = await connection.list_tools()
        else:
            assert [tool.name for tool in await connection.list_tools()] == ["flood"]
            outcome = await connection.call_tool("flood", {})
    except McpFailure as failure:
        outcome = failure
    finally:
        await connection.aclose()
        await service.stop()
    return outcome, service.sent


@pytest.mark.parametrize("flood", ["tools/list", "tools/call"])
def test_an_endless_json_body_fails_cleanly_after_the_bound(flood: str) -> None:
    outcome, sent = asyncio.run(_flooded(flood))
    assert isinstance(outcome, McpFailure), outcome
    assert str(LIMIT) in json.dumps(outcome.error), outcome.error
    assert sent < SENT_AT_MOST, f"the client read {sent} bytes of a body bounded to {LIMIT}"


def test_an_endless_event_is_bounded_too() -> None:
    outcome, sent = asyncio.run(_flooded("tools/call", content_type="text/event-stream"))
    assert isinstance(outcome, McpFailure), outcome
    assert sent < SENT_AT_MOST, f"the client read {sent} bytes of an event bounded to {LIMIT}"
