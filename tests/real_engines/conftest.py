"""What every engine's tier may ask for: a real MCP server (tests/tools/mcp_server.py, the ``mcp`` SDK) whose
listed tools a gateway calls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tools.mcp_server import McpServerProcess


@pytest.fixture(scope="module")
def mcp() -> Iterator[McpServerProcess]:
    server = McpServerProcess()
    yield server
    server.stop()
