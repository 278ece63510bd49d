"""Strict functions through vLLM 0.33's structured outputs (xgrammar): a call's arguments are held to the schema.

Each case's scripted model writes ``get_weather`` arguments that its schema refuses (a wrong type, a value
outside an enum, a missing required property, an extra property, unterminated JSON). Declared ``strict:
true``, the call's header triggers the structural tag and the scripted executor takes a scripted id only
where xgrammar's bitmask allows it, as a real sampler would: the arguments come out matching the schema.
The same script for the function declared without ``strict``, through a gateway started with
``--constrain-function-arguments off``, comes through as written, and invalid: what each test would see
without the grammar.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from harmony_responses.request.schema import instance_problem

from ..gateway import Gateway
from ..grammars import TICKET, call
from .conftest import VLLM, gateway_with

MODEL = "gpt-oss-20b"
SCRIPTED = '{"city": "Paris"}'


def strict_object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


# Each schema refuses what its case's script writes, and allows only short arguments (no free string a
# steered sampler could write on and on).
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "wrong-type": (strict_object({"city": {"type": "integer"}}), SCRIPTED),
    "outside-enum": (strict_object({"city": {"type": "string", "enum": ["Rome", "Oslo"]}}), SCRIPTED),
    "missing-required": (
        strict_object({"city": {"type": "string", "enum": ["Paris"]}, "unit": {"type": "string", "enum": ["c", "f"]}}),
        SCRIPTED,
    ),
    "extra-property": (strict_object({}), SCRIPTED),
    "unterminated": (strict_object({"city": {"type": "string", "enum": ["Paris"]}}), '{"city": "Paris"'),
}


def weather(schema: dict[str, Any], *, strict: bool, name: str = "get_weather") -> dict[str, Any]:
    return {
        "type": "function",
        "name": name,
        "description": "Current weather for a city.",
        "parameters": schema,
        "strict": strict,
    }


def matches(arguments: str, schema: dict[str, Any]) -> bool:
    try:
        value = json.loads(arguments)
    except ValueError:
        return False
    return instance_problem(value, schema) is None


@pytest.fixture(scope="module")
def unconstrained(completions: VLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    g = gateway_with(completions, tmp_path_factory, "--constrain-function-arguments", "off")
    yield g
    g.stop()


def _last(gw: Gateway, key: str, tools: list[dict[str, Any]], **extra: Any) -> Any:
    with gw.client() as client:
        response = client.responses.create(
            model=MODEL, input=f"{key}: the weather in Paris?", tools=tools, max_output_tokens=200, **extra
        )
    assert response.status == "completed", (response.error, response.output)
    return response.output[-1]


@pytest.mark.parametrize("case", list(CASES))
def test_a_strict_functions_arguments_are_held_to_its_schema(
    gateway: Gateway, unconstrained: Gateway, completions: VLLM, case: str
) -> None:
    assert completions.script is not None
    schema, arguments = CASES[case]
    key = f"case-strict-{case}"
    completions.script.say(key, call("get_weather", arguments))
    # Unconstrained: the script's arguments as written, which the schema refuses.
    loose = _last(unconstrained, key, [weather(schema, strict=False)])
    assert (loose.type, loose.name, loose.arguments) == ("function_call", "get_weather", arguments)
    assert not matches(loose.arguments, schema)
    # Strict, constrained: the arguments are steered into the schema.
    item = _last(gateway, key, [weather(schema, strict=True)])
    assert (item.type, item.name) == ("function_call", "get_weather")
    assert matches(item.arguments, schema), item.arguments
    new = completions.events(key, "new")[-1]
    assert "functions.get_weather" in new["sampling"]["structured_outputs"]  # the declared recipients grammar


def test_a_non_strict_function_is_held_to_one_json_object(
    gateway: Gateway, unconstrained: Gateway, completions: VLLM
) -> None:
    assert completions.script is not None
    key = "case-loose-json"
    completions.script.say(key, call("get_weather", '{"city": "Paris"'))
    tool = weather({"type": "object", "properties": {"city": {"type": "string"}}}, strict=False)
    assert _last(unconstrained, key, [tool]).arguments == '{"city": "Paris"'
    item = _last(gateway, key, [tool])  # the default, --constrain-function-arguments json
    assert isinstance(json.loads(item.arguments), dict), item.arguments


def test_a_forced_strict_function_is_held_from_its_first_token(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    key = "case-strict-forced"
    # tool_choice names the function: the prompt ends with the call's header, the model writes the JSON.
    completions.script.say(key, SCRIPTED + "<|call|>")
    schema = CASES["outside-enum"][0]
    item = _last(gateway, key, [weather(schema, strict=True)], tool_choice={"type": "function", "name": "get_weather"})
    assert (item.type, item.name) == ("function_call", "get_weather")
    assert json.loads(item.arguments)["city"] in ("Rome", "Oslo"), item.arguments


def test_a_strict_namespace_function_is_held_to_its_schema(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    key = "case-strict-namespace"
    completions.script.say(key, call("get_weather", SCRIPTED).replace("to=functions.", "to=geo."))
    schema = CASES["wrong-type"][0]
    member = {k: v for k, v in weather(schema, strict=True).items() if k != "type"}
    namespace = {"type": "namespace", "name": "geo", "description": "Places.", "tools": [member]}
    item = _last(gateway, key, [namespace])
    assert (item.type, item.name, item.namespace) == ("function_call", "get_weather", "geo")
    assert isinstance(json.loads(item.arguments)["city"], int), item.arguments


def test_several_constrained_tools_in_one_request(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    key = "case-strict-several"
    completions.script.say(key, call("get_weather", SCRIPTED))
    # The script calls get_weather: its own schema holds, not another tool's.
    tools = [TICKET, weather(CASES["extra-property"][0], strict=True, name="get_weather_v2")]
    tools.append(weather(CASES["missing-required"][0], strict=True))
    item = _last(gateway, key, tools)
    assert (item.type, item.name) == ("function_call", "get_weather")
    assert json.loads(item.arguments)["unit"] in ("c", "f"), item.arguments
