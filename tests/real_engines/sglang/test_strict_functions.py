"""Strict functions through SGLang 0.5.23's xgrammar backend: the matcher refuses what leaves the schema.

No sampler runs in the scripted scheduler (see test_grammar.py), so nothing is steered here: the scheduler
replays the scripted ids through the matcher SGLang compiled from our structural tag and reports the first
id it refused, which is where a grammar-following sampler would have been made to write something else
(the vLLM tier shows the steering itself). Each script writes ``get_weather`` arguments that a strict
schema refuses; the same script for the function declared without ``strict`` is accepted whole, since the
default (``--constrain-function-arguments json``) holds it only to one JSON object.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from ..grammars import TICKET, call
from .matching import Stack, matcher, refused_where

pytestmark = pytest.mark.timeout(900)  # the first test waits for SGLang to start (conftest)


def strict_object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def weather(schema: dict[str, Any], *, strict: bool, name: str = "get_weather") -> dict[str, Any]:
    return {"type": "function", "name": name, "description": "Weather.", "parameters": schema, "strict": strict}


# (schema, the arguments the script writes, what the matcher accepts of them before refusing one id)
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "wrong-type": (strict_object({"city": {"type": "integer"}}), '{"city": "Paris"}', '{"city": '),
    "outside-enum": (
        strict_object({"city": {"type": "string", "enum": ["Rome", "Oslo"]}}),
        '{"city": "Paris"}',
        '{"city": "',
    ),
    "missing-required": (
        strict_object({"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}),
        '{"city": "Paris"}',
        '{"city": "Paris"',
    ),
    "extra-property": (
        strict_object({"city": {"type": "string"}}),
        '{"city": "Paris", "when": "now"}',
        '{"city": "Paris"',
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_strict_function_refuses_arguments_outside_its_schema(stack: Stack, case: str) -> None:
    schema, arguments, accepted_up_to = CASES[case]
    text = call("get_weather", arguments)
    key = f"strict{case.replace('-', '')}"
    response, grammar = matcher(stack, key, text, [weather(schema, strict=True)])
    refused_where(text, grammar, accepted_up_to)
    # Unsteered, the script's arguments reach the translator, which ends the response failed, quoting them.
    assert isinstance(response, openai.InternalServerError) and arguments in response.message, response
    # Declared without strict: one JSON object is all it is held to, and the script is one.
    # (a key no other key is part of: the scripted scheduler's rule for "strict…" would match it too)
    response, grammar = matcher(stack, f"lax{case.replace('-', '')}", text, [weather(schema, strict=False)])
    assert grammar["accepted_all"] is True, grammar
    assert response.output[-1].arguments == arguments


def test_unterminated_json_is_refused_where_the_call_ends(stack: Stack) -> None:
    text = call("get_weather", '{"city": "Paris"')
    loose = weather({"type": "object", "properties": {"city": {"type": "string"}}}, strict=False)
    _, grammar = matcher(stack, "strictunterminated", text, [loose])
    refused_where(text, grammar, '{"city": "Paris"')


def test_a_forced_strict_function_is_held_from_its_first_token(stack: Stack) -> None:
    schema = CASES["outside-enum"][0]
    choice = {"type": "function", "name": "get_weather"}
    _, grammar = matcher(
        stack, "strictforcedok", '{"city": "Rome"}<|call|>', [weather(schema, strict=True)], tool_choice=choice
    )
    assert grammar["accepted_all"] is True, grammar
    bad = '{"city": "Paris"}<|call|>'
    _, grammar = matcher(stack, "strictforcedbad", bad, [weather(schema, strict=True)], tool_choice=choice)
    refused_where(bad, grammar, '{"city": "')


def test_a_strict_namespace_function_and_several_tools(stack: Stack) -> None:
    schema = CASES["wrong-type"][0]
    member = {k: v for k, v in weather(schema, strict=True).items() if k != "type"}
    namespace = {"type": "namespace", "name": "geo", "description": "Places.", "tools": [member]}
    other = weather(CASES["extra-property"][0], strict=True, name="get_weather_v2")
    text = call("get_weather", '{"city": 7}').replace("to=functions.", "to=geo.")
    response, grammar = matcher(stack, "strictnamespaceok", text, [TICKET, other, namespace])
    assert grammar["accepted_all"] is True, grammar
    item = response.output[-1]
    assert (item.type, item.name, item.namespace, item.arguments) == (
        "function_call",
        "get_weather",
        "geo",
        '{"city": 7}',
    )
    bad = call("get_weather", '{"city": "Paris"}').replace("to=functions.", "to=geo.")
    _, grammar = matcher(stack, "strictnamespacebad", bad, [TICKET, other, namespace])
    refused_where(bad, grammar, '{"city": ')
