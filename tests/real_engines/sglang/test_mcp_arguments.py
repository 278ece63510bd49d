"""An MCP tool's arguments held to the ``inputSchema`` its server listed (issue 26 item 4), on SGLang 0.5.23.

A real MCP server (tests/tools/mcp_server.py, the ``mcp`` SDK) lists ``add(a: int, b: int)``; the scripted
model calls it with ``"b": "3"``, a string the listed schema refuses. SGLang's xgrammar matcher, compiled
from the structural tag our gateway sent, refuses the id that begins the string (the scripted scheduler
runs no sampler: the vLLM tier shows the steering); under ``--constrain-function-arguments off`` no grammar
holds the arguments (the declared recipients' still holds the header) and the MCP server is called with
them as written.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tools.mcp_server import McpServerProcess

from ..gateway import Gateway, start_gateway
from .matching import MODEL, Stack, refused_where

pytestmark = pytest.mark.timeout(900)  # the first test waits for SGLang to start (conftest)

ARGUMENTS = '{"a": 2, "b": "3"}'
CALL = (
    "<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant"
    f"<|channel|>commentary to=calc.add <|constrain|>json<|message|>{ARGUMENTS}<|call|>"
)
AFTER = "<|start|>calc.add to=assistant"  # the second engine call's prompt ends with the tool's output


def _gateway(stack: Stack, mcp: McpServerProcess, tmp: pytest.TempPathFactory, *extra: str) -> Gateway:
    sglang, _ = stack
    args = ["--mcp-allowed-hosts", f"127.0.0.1:{mcp.port}", *extra]
    return start_gateway(f"sglang:{sglang.url}", args=args, log_dir=tmp.mktemp("gw-mcp"))


@pytest.fixture(scope="module")
def held(stack: Stack, mcp: McpServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    g = _gateway(stack, mcp, tmp_path_factory)
    yield g
    g.stop()


@pytest.fixture(scope="module")
def loose(stack: Stack, mcp: McpServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    g = _gateway(stack, mcp, tmp_path_factory, "--constrain-function-arguments", "off")
    yield g
    g.stop()


def _respond(gw: Gateway, mcp: McpServerProcess, key: str) -> Any:
    tool = {"type": "mcp", "server_label": "calc", "server_url": mcp.url, "require_approval": "never"}
    with gw.client(max_retries=0) as client:
        return client.responses.create(model=MODEL, input=f"{key}: 2 + 3?", tools=[tool], max_output_tokens=200)


def test_an_mcp_tools_arguments_are_held_to_its_listed_schema(
    stack: Stack, held: Gateway, loose: Gateway, mcp: McpServerProcess
) -> None:
    sglang, _ = stack
    sglang.script.say("mcpargsheld", CALL)
    sglang.script.say("mcpargsoff", CALL)
    sglang.script.say(AFTER, "<|channel|>final<|message|>Done.<|return|>")
    _respond(held, mcp, "mcpargsheld")
    received = sglang.request_for("mcpargsheld")
    assert "calc.add" in received["sampling"]["structural_tag"]
    refused_where(CALL, received["grammar"], '{"a": 2, "b": ')
    # Unconstrained, the call is made as written (the MCP SDK's own validation lets "3" pass as 3).
    response = _respond(loose, mcp, "mcpargsoff")
    # (the declared recipients' grammar still holds the header; nothing holds the arguments)
    assert sglang.request_for("mcpargsoff")["grammar"]["accepted_all"] is True
    [call] = [item for item in response.output if item.type == "mcp_call"]
    assert call.arguments == ARGUMENTS
