"""MCP tools' inputs reach the engine as grammars of the ``inputSchema`` their server listed (issue 26 item 4).

A real MCP server (tests/tools/mcp_server.py, FastMCP's schemas: every parameter required, no
``additionalProperties``) is listed through our server; the engine is handed each listed tool's schema,
closed to its properties, which the constraining adapters send as they send a strict function's
(tests/engine/test_strict_functions.py).
"""

from __future__ import annotations

from typing import Any

import orjson

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding
from tools.mcp_server import McpServerProcess

from .conftest import Serve
from .test_mcp import ADD, ANSWER, calc, mcp_server, serve, stream  # noqa: F401  (fixtures)


class Grammars:
    """A scripted engine that keeps every request's tool grammars."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)
        self.grammars: list[dict[str, Any]] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        self.grammars.append({f"{g.namespace}.{g.name}": g for g in request.tool_grammars})
        encoding = load_encoding()
        yield TokenChunk(token_ids=encoding.encode(self.lines.pop(0), allowed_special="all"))
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


def test_an_mcp_tools_arguments_are_held_to_its_listed_input_schema(
    serve: Serve,  # noqa: F811
    mcp_server: McpServerProcess,  # noqa: F811
) -> None:
    engine = Grammars([ADD, ANSWER])
    live = serve(engine.engine)
    events = stream(live, {"input": "What is 2 + 3?", "tools": [calc(mcp_server.url)]})
    listing = next(e["item"] for e in events if e["type"] == "response.output_item.done")
    listed = {t["name"]: t["input_schema"] for t in listing["tools"]}
    first = engine.grammars[0]
    add = first["calc.add"]
    assert add.syntax == "json_schema_optional"  # a property the server lists as optional may be left out
    schema = orjson.loads(add.definition)
    assert schema["properties"] == listed["add"]["properties"] and schema["additionalProperties"] is False
    assert "additionalProperties" not in listed["add"]  # closed here: a subset of what the server accepts
    assert {f"calc.{name}" for name in listed} <= set(first)


def test_constrain_function_arguments_off_holds_no_mcp_tool(
    serve: Serve,  # noqa: F811
    mcp_server: McpServerProcess,  # noqa: F811
) -> None:
    # An MCP server promises no strict schema: like a non-strict function's, its tools' calls are free.
    engine = Grammars([ADD, ANSWER])
    live = serve(engine.engine, constrain_function_arguments="off")
    stream(live, {"input": "What is 2 + 3?", "tools": [calc(mcp_server.url)]})
    assert not any(name.startswith("calc.") for name in engine.grammars[0])
