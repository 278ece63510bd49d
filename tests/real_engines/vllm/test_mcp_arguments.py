"""An MCP tool's arguments held to the ``inputSchema`` its server listed (issue 26 item 4), on real vLLM 0.33.

A real MCP server (tests/tools/mcp_server.py, the ``mcp`` SDK) lists ``add(a: int, b: int)``; the scripted
model calls it with ``"b": "3"``, a string the listed schema refuses. Through our gateway's default the
call's arguments are held to the schema by xgrammar (the scripted executor takes an id only where the
bitmask allows it, as a real sampler would), and the MCP server is called with integers; under
``--constrain-function-arguments off`` the arguments reach the MCP server as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from harmony_responses.request.schema import instance_problem
from tools.mcp_server import McpServerProcess

from ..gateway import Gateway
from .conftest import VLLM, gateway_with

MODEL = "gpt-oss-20b"
CALL = (
    "<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant"
    '<|channel|>commentary to=calc.add <|constrain|>json<|message|>{"a": 2, "b": "3"}<|call|>'
)
# The answer after the tool's output (the second engine call's prompt ends with it).
AFTER = "<|start|>calc.add to=assistant"


def _gateway(completions: VLLM, mcp: McpServerProcess, tmp: pytest.TempPathFactory, *extra: str) -> Gateway:
    return gateway_with(completions, tmp, "--mcp-allowed-hosts", f"127.0.0.1:{mcp.port}", *extra)


@pytest.fixture(scope="module")
def held(completions: VLLM, mcp: McpServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    g = _gateway(completions, mcp, tmp_path_factory)
    yield g
    g.stop()


@pytest.fixture(scope="module")
def loose(completions: VLLM, mcp: McpServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    g = _gateway(completions, mcp, tmp_path_factory, "--constrain-function-arguments", "off")
    yield g
    g.stop()


def _mcp_call(gw: Gateway, mcp: McpServerProcess) -> Any:
    tool = {"type": "mcp", "server_label": "calc", "server_url": mcp.url, "require_approval": "never"}
    with gw.client() as client:
        response = client.responses.create(
            model=MODEL, input="case-mcp-args: 2 + 3?", tools=[tool], max_output_tokens=200
        )
    assert response.status == "completed", (response.error, response.output)
    [listed] = [item for item in response.output if item.type == "mcp_list_tools"]
    [call] = [item for item in response.output if item.type == "mcp_call"]
    [schema] = [t.input_schema for t in listed.tools if t.name == "add"]
    return call, schema


def test_an_mcp_tools_arguments_are_held_to_its_listed_schema(
    held: Gateway, loose: Gateway, completions: VLLM, mcp: McpServerProcess
) -> None:
    assert completions.script is not None
    completions.script.say("case-mcp-args", CALL)
    completions.script.say(AFTER, "<|channel|>final<|message|>Done.<|return|>")
    call, schema = _mcp_call(loose, mcp)
    assert call.arguments == '{"a": 2, "b": "3"}'  # as written: the listed schema refuses it
    assert instance_problem(json.loads(call.arguments), schema) is not None
    call, schema = _mcp_call(held, mcp)
    arguments = json.loads(call.arguments)
    assert instance_problem(arguments, schema) is None, call.arguments
    assert call.error is None and call.output == str(arguments["a"] + arguments["b"]), call
    new = completions.events("case-mcp-args", "new")[-1]
    assert "calc.add" in new["sampling"]["structured_outputs"]
