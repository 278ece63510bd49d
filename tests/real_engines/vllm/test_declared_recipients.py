"""Declared recipients only (issue 26 item 3) through vLLM 0.33's structured outputs: a header's ``to=`` is held
to the declared tools, which is the default (``--constrain-recipients declared``).

The script calls ``functions.get_weather`` where only ``get`` is declared. The scripted executor takes a
scripted id only where xgrammar's bitmask allows it, as a real sampler would: ``_weather`` is masked after
``.get`` and the call goes to the declared ``get``. Through a gateway started with ``--constrain-recipients
off`` the same script calls the undeclared ``get_weather``, which the client cannot dispatch. Under
``tool_choice: "none"`` no header may name a recipient: the script's call becomes a message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from harmony_responses.vocab import load_encoding

from ..gateway import Gateway
from ..grammars import GET, call
from .conftest import VLLM, gateway_with

MODEL = "gpt-oss-20b"


@pytest.fixture(scope="module")
def loose(completions: VLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    g = gateway_with(completions, tmp_path_factory, "--constrain-recipients", "off")
    yield g
    g.stop()


def _last(gw: Gateway, key: str, completions: VLLM, **extra: Any) -> Any:
    with gw.client() as client:
        response = client.responses.create(
            model=MODEL, input=f"{key}: the weather in Paris?", tools=[GET], max_output_tokens=100, **extra
        )
    written = load_encoding().decode(completions.events(key, "finished")[-1]["ids"])
    assert response.status == "completed", written
    return response.output[-1]


def test_an_undeclared_recipient_is_steered_to_a_declared_one(
    gateway: Gateway, loose: Gateway, completions: VLLM
) -> None:
    assert completions.script is not None
    key = "case-recipient-undeclared"
    completions.script.say(key, call("get_weather", '{"city": "Paris"}'))
    as_written = _last(loose, key, completions)
    assert (as_written.type, as_written.name) == ("function_call", "get_weather")  # not declared
    item = _last(gateway, key, completions)
    assert (item.type, item.name) == ("function_call", "get")
    assert json.loads(item.arguments) == {"city": "Paris"}


def test_tool_choice_none_writes_no_recipient(gateway: Gateway, loose: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    key = "case-recipient-none"
    completions.script.say(key, call("get_weather", '{"city": "Paris"}'))
    # tool_choice none declares no tools, yet the script calls one: as written, a call of get_weather.
    assert _last(loose, key, completions, tool_choice="none").type == "function_call"
    item = _last(gateway, key, completions, tool_choice="none")
    assert item.type == "message", item
