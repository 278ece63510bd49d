"""Declared recipients only (issue 26 item 3) through llama-server's lazy grammar: a header's ``to=`` is held
to the declared tools.

The scripted model (its own here) writes ``CALL``: ``to=functions.get_weather``, with known runner-ups: a
space after ``.get`` (so that ``functions.get`` followed by its header is the next best recipient) and
``<|message|>`` after ``commentary`` (a header without a recipient). The request declares only ``get``:
under ``--constrain-recipients declared`` the grammar masks ``_weather`` and the call goes to the declared
``get``; under ``off`` the same script calls the undeclared ``get_weather``, which the client cannot
dispatch. Under ``tool_choice: "none"`` no header may name a recipient: the script's call becomes a message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..gateway import EngineProcess, Gateway, start_engine, start_gateway
from ..grammars import GET
from ..tiny_model import Chain, harmony_ids, scripted_checkpoint, to_gguf
from .conftest import CALL, llama_server_argv

MODEL = "gpt-oss-20b"
_IDS = [harmony_ids("<|start|>assistant")[-1], *harmony_ids(CALL)]
# Positions in [assistant, *CALL] after which a runner-up follows, 10 logits below the script's token.
AFTER_GET = _IDS.index(harmony_ids(".get")[0])
AFTER_COMMENTARY = _IDS.index(harmony_ids(" to")[0]) - 1
CHAIN = Chain(
    CALL,
    alternatives=((AFTER_GET, harmony_ids(" ")[0], 10.0), (AFTER_COMMENTARY, harmony_ids("<|message|>")[0], 10.0)),
)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    gguf: Path = to_gguf(scripted_checkpoint([CHAIN]))
    engine = start_engine(
        llama_server_argv(gguf), timeout=120, log_dir=tmp_path_factory.mktemp("llama"), name="llama-server"
    )
    yield engine
    engine.stop()


def _gateway(llama: EngineProcess, mode: str, tmp: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start_gateway(
        f"llamacpp:{llama.url}", args=["--constrain-recipients", mode], record=True, log_dir=tmp.mktemp("serve")
    )
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def held(llama: EngineProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    yield from _gateway(llama, "declared", tmp_path_factory)


@pytest.fixture(scope="module")
def loose(llama: EngineProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    yield from _gateway(llama, "off", tmp_path_factory)


def _last(gw: Gateway, **extra: Any) -> Any:
    response = gw.client().responses.create(
        model=MODEL, input="What is the weather in Paris?", tools=[GET], max_output_tokens=100, **extra
    )
    assert response.status == "completed", response.error
    return response.output[-1]


def test_an_undeclared_recipient_is_steered_to_a_declared_one(held: Gateway, loose: Gateway) -> None:
    as_written = _last(loose)
    assert (as_written.type, as_written.name) == ("function_call", "get_weather")  # not declared
    item = _last(held)
    assert (item.type, item.name) == ("function_call", "get")
    assert json.loads(item.arguments) == {"city": "Paris"}


def test_tool_choice_none_writes_no_recipient(held: Gateway, loose: Gateway) -> None:
    # tool_choice none declares no tools, yet the script calls one: as written, a call of get_weather.
    as_written = _last(loose, tool_choice="none")
    assert as_written.type == "function_call", as_written
    item = _last(held, tool_choice="none")
    assert item.type == "message", item
