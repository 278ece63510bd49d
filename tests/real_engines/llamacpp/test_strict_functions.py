"""Strict functions through llama-server's lazy grammars: a call's arguments are held to the function's schema.

The scripted model (conftest.py) always calls ``get_weather({"city":"Paris"})``. Each schema below makes
those arguments wrong in one way (a wrong type, a value outside an enum, a missing required property, an
extra property); declared ``strict: true`` the call's header triggers the grammar and llama.cpp's sampler
masks what the script would write, so the arguments match the schema. Declared without ``strict`` the same
script comes through as written, and invalid: that is what each test would see without the grammar.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from harmony_responses.request.schema import instance_problem

from ..gateway import Gateway
from ..grammars import TICKET, TICKET_RE
from ..tiny_model import harmony_ids
from .conftest import CALL

MODEL = "gpt-oss-20b"
HEADER = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
SCRIPTED = {"city": "Paris"}


def strict_object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


# Each schema refuses the script's {"city":"Paris"}, and allows only short arguments (no free string a
# sampler could write forever).
SCHEMAS = {
    "wrong-type": strict_object({"city": {"type": "integer"}}),
    "outside-enum": strict_object({"city": {"type": "string", "enum": ["Rome", "Oslo"]}}),
    "missing-required": strict_object(
        {"city": {"type": "string", "enum": ["Paris"]}, "unit": {"type": "string", "enum": ["c", "f"]}}
    ),
    "extra-property": strict_object({}),
}


def weather(schema: dict[str, Any], *, strict: bool) -> dict[str, Any]:
    return {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": schema,
        "strict": strict,
    }


def _generated(gw: Gateway) -> list[int]:
    return list(gw.records()[-1]["tokens"])  # type: ignore[call-overload]


def _call(gw: Gateway, tools: list[dict[str, Any]], **extra: Any) -> Any:
    response = gw.client().responses.create(
        model=MODEL, input="What is the weather in Paris?", tools=tools, max_output_tokens=200, **extra
    )
    assert response.status == "completed", response.error
    return response.output[-1]


@pytest.mark.parametrize("case", list(SCHEMAS))
def test_a_strict_functions_arguments_are_held_to_its_schema(gw: Gateway, case: str) -> None:
    schema = SCHEMAS[case]
    # Without strict: the script's arguments, which the schema refuses.
    loose = _call(gw, [weather(schema, strict=False)])
    assert (loose.type, loose.name, json.loads(loose.arguments)) == ("function_call", "get_weather", SCRIPTED)
    assert instance_problem(SCRIPTED, schema) is not None
    # Strict: the header is the script's (it passed), the arguments are steered into the schema.
    item = _call(gw, [weather(schema, strict=True)])
    assert (item.type, item.name) == ("function_call", "get_weather")
    arguments = json.loads(item.arguments)
    assert instance_problem(arguments, schema) is None, item.arguments
    ids = _generated(gw)
    assert ids[: len(harmony_ids(HEADER))] == harmony_ids(HEADER)
    assert ids != harmony_ids(CALL)


def test_a_forced_strict_function_is_held_from_its_first_token(gw: Gateway) -> None:
    schema = SCHEMAS["outside-enum"]
    choice = {"type": "function", "name": "get_weather"}
    item = _call(gw, [weather(schema, strict=True)], tool_choice=choice)
    assert (item.type, item.name) == ("function_call", "get_weather")
    assert json.loads(item.arguments)["city"] in ("Rome", "Oslo"), item.arguments
    loose = _call(gw, [weather(schema, strict=False)], tool_choice=choice)
    assert json.loads(loose.arguments) == SCRIPTED


def test_a_strict_namespace_function_is_held_to_its_schema(gw: Gateway) -> None:
    schema = SCHEMAS["wrong-type"]
    member = {k: v for k, v in weather(schema, strict=True).items() if k != "type"}
    namespace = {"type": "namespace", "name": "geo", "description": "Places.", "tools": [member]}
    choice = {"type": "function", "name": "get_weather", "namespace": "geo"}
    item = _call(gw, [namespace], tool_choice=choice)
    assert (item.type, item.name, item.namespace) == ("function_call", "get_weather", "geo")
    assert isinstance(json.loads(item.arguments)["city"], int), item.arguments
    loose = {**namespace, "tools": [{**member, "strict": False}]}
    assert json.loads(_call(gw, [loose], tool_choice=choice).arguments) == SCRIPTED


def test_several_constrained_tools_in_one_request(gw: Gateway) -> None:
    # The script calls get_weather: its schema holds, not the other tools' grammars.
    other = {**weather(SCHEMAS["extra-property"], strict=True), "name": "get_weather_v2"}
    tools = [TICKET, other, weather(SCHEMAS["missing-required"], strict=True)]
    item = _call(gw, tools)
    assert (item.type, item.name) == ("function_call", "get_weather")
    assert json.loads(item.arguments)["unit"] in ("c", "f"), item.arguments
    assert not re.fullmatch(TICKET_RE, item.arguments)
