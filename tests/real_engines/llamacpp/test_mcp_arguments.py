"""An MCP tool's arguments held to the ``inputSchema`` its server listed (issue 26 item 4), on a real llama-server.

A real MCP server (tests/tools/mcp_server.py, the ``mcp`` SDK) lists ``weather(city: str)``. The scripted
model (its own here) calls it with ``{"city":"Paris","x":1}``: a property the listing does not have, which
our grammar, closed to the listed properties, refuses. Its runner-up after ``Paris`` is a closing quote, so
held by the lazy grammar (our gateway's default) the call is ``{"city":"Paris"}``; under
``--constrain-function-arguments off`` nothing holds it and the MCP server gets it as written. Once the
tool's answer (``Sunny…``) is in the prompt, the model answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.mcp_server import McpServerProcess

from ..gateway import EngineProcess, Gateway, start_engine, start_gateway
from ..tiny_model import Chain, harmony_ids, scripted_checkpoint, to_gguf
from .conftest import llama_server_argv

MODEL = "gpt-oss-20b"
ARGUMENTS = '{"city":"Paris","x":1}'
CALL = f"<|channel|>commentary to=calc.weather <|constrain|>json<|message|>{ARGUMENTS}<|call|>"
_IDS = [harmony_ids("<|start|>assistant")[-1], *harmony_ids(CALL)]
AFTER_PARIS = _IDS.index(harmony_ids("Paris")[0])
CHAINS = [
    Chain(CALL, alternatives=((AFTER_PARIS, harmony_ids('"')[0], 10.0),)),
    Chain("<|channel|>final<|message|>Done.<|return|>", marker="Sunny"),
]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    gguf: Path = to_gguf(scripted_checkpoint(CHAINS))
    engine = start_engine(
        llama_server_argv(gguf, ctx=1024), timeout=120, log_dir=tmp_path_factory.mktemp("llama"), name="llama-server"
    )
    yield engine
    engine.stop()


def _call(llama: EngineProcess, mcp: McpServerProcess, tmp: pytest.TempPathFactory, *extra: str) -> Any:
    args = ["--mcp-allowed-hosts", f"127.0.0.1:{mcp.port}", *extra]
    gateway: Gateway = start_gateway(f"llamacpp:{llama.url}", args=args, log_dir=tmp.mktemp("serve"))
    tool = {"type": "mcp", "server_label": "calc", "server_url": mcp.url, "require_approval": "never"}
    try:
        response = gateway.client().responses.create(
            model=MODEL, input="The weather in Paris?", tools=[tool], max_output_tokens=200
        )
    finally:
        gateway.stop()
    assert response.status == "completed", response.error
    [call] = [item for item in response.output if item.type == "mcp_call"]
    assert response.output[-1].content[0].text == "Done."
    return call


def test_an_mcp_tools_arguments_are_held_to_its_listed_properties(
    llama: EngineProcess, mcp: McpServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    as_written = _call(llama, mcp, tmp_path_factory, "--constrain-function-arguments", "off")
    assert as_written.arguments == ARGUMENTS
    held = _call(llama, mcp, tmp_path_factory)
    assert json.loads(held.arguments) == {"city": "Paris"}, held.arguments
    assert held.error is None and held.output == "Sunny in Paris, 21 °C."
