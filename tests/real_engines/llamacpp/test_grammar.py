"""Custom tools' grammars through llama-server's lazy grammars: a call's input is held to its grammar.

The scripted model (conftest.py) writes a ``get_weather`` call by default. Declared as a *custom* tool of
that name with a regex, the call's header triggers the lazy grammar and llama.cpp's sampler masks what the
script would write after it: every other token has the same logit, so the input is some text the regex
allows, never the script's ``{"city":"Paris"}``. Declared as a function beside a grammar tool, the call is
left as the script wrote it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..gateway import Gateway
from ..grammars import TICKET, TICKET_RE
from ..tiny_model import harmony_ids
from .conftest import CALL, WEATHER_TOOL

MODEL = "gpt-oss-20b"
HEADER = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
# The script's call as a custom tool whose input must be a ticket id.
WEATHER_AS_TICKET: dict[str, Any] = {**TICKET, "name": "get_weather"}


def _generated(gw: Gateway) -> list[int]:
    return list(gw.records()[-1]["tokens"])  # type: ignore[call-overload]


def test_a_call_is_held_to_its_tools_grammar_from_the_header_on(gw: Gateway) -> None:
    response = gw.client().responses.create(
        model=MODEL, input="What is the weather in Paris?", tools=[WEATHER_AS_TICKET], max_output_tokens=120
    )
    assert response.status == "completed", response.error
    item = response.output[-1]
    assert (item.type, item.name) == ("custom_tool_call", "get_weather")
    assert re.fullmatch(TICKET_RE, item.input), item.input
    # Up to the call's body the model wrote its script (the header passed the grammar), then other text.
    ids = _generated(gw)
    header = harmony_ids(HEADER)
    assert ids[: len(header)] == header
    assert ids[: len(harmony_ids(CALL))] != harmony_ids(CALL)


def test_a_forced_call_is_held_from_its_first_token(gw: Gateway) -> None:
    # " kiwi" makes the script write " la" forever; the prompt ends with the forced call's header.
    response = gw.client().responses.create(
        model=MODEL,
        input="Sing kiwi",
        tools=[WEATHER_AS_TICKET],
        tool_choice={"type": "custom", "name": "get_weather"},
        max_output_tokens=120,
    )
    assert response.status == "completed", response.error
    item = response.output[-1]
    assert (item.type, item.name) == ("custom_tool_call", "get_weather")
    assert re.fullmatch(TICKET_RE, item.input), item.input


def test_another_tool_beside_a_grammar_tool_is_left_free(gw: Gateway) -> None:
    response = gw.client().responses.create(
        model=MODEL, input="What is the weather in Paris?", tools=[WEATHER_TOOL, TICKET]
    )
    item = response.output[-1]
    assert (item.type, item.name, json.loads(item.arguments)) == ("function_call", "get_weather", {"city": "Paris"})
    assert _generated(gw) == harmony_ids(CALL)
