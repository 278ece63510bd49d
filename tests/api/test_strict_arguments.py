"""Strict functions on an engine that cannot constrain a call (replay): arguments the schema refuses fail the
response, quoting them, as a strict ``text.format`` answer does; arguments that match come through.

On vLLM, SGLang and llama.cpp a grammar keeps the model from writing such arguments at all
(tests/real_engines/llamacpp/test_strict_functions.py); here the replay script writes them anyway.
"""

from __future__ import annotations

import json

import openai
import pytest

from .conftest import Serve
from .helpers import MODEL, openai_client

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


def weather(strict: bool, namespace: str | None = None) -> dict[str, object]:
    tool = {"type": "function", "name": "get_weather", "description": "Weather.", "parameters": SCHEMA}
    tool["strict"] = strict
    if namespace is None:
        return tool
    return {"type": "namespace", "name": namespace, "description": "Places.", "tools": [tool]}


def call(arguments: str, recipient: str = "functions.get_weather") -> str:
    return f"<|channel|>commentary to={recipient} <|constrain|>json<|message|>{arguments}<|call|>"


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{"city": "Paris"}', "'days' is a required property"),
        ('{"city": "Paris", "days": "2"}', "'2' is not of type 'integer'"),
        ('{"city": "Paris", "days": 2, "unit": "c"}', "Additional properties are not allowed"),
        ('{"city": "Paris", "days": 2', "the arguments are not valid JSON"),
    ],
)
def test_arguments_a_strict_schema_refuses_fail_the_response(serve: Serve, arguments: str, reason: str) -> None:
    live = serve([call(arguments), call(arguments)])
    client = openai_client(live)
    with pytest.raises(openai.InternalServerError) as info:
        client.responses.create(model=MODEL, input="Weather?", tools=[weather(True)])
    message = info.value.message
    assert "arguments for the strict function 'get_weather' do not match" in message
    assert reason in message and arguments in message
    # Not strict: the same arguments are the client's to judge.
    response = client.responses.create(model=MODEL, input="Weather?", tools=[weather(False)])
    assert response.status == "completed" and response.output[-1].arguments == arguments


def test_a_streamed_call_ends_with_an_error_event(serve: Serve) -> None:
    live = serve([call('{"city": 3, "days": 1}', "geo.get_weather")])
    stream = openai_client(live).responses.create(
        model=MODEL, input="Weather?", tools=[weather(True, namespace="geo")], stream=True
    )
    seen: list[str] = []
    with pytest.raises(openai.APIError, match="3 is not of type 'string'"):
        for event in stream:
            seen.append(event.type)
    # The call itself was streamed before the verdict.
    assert "response.function_call_arguments.done" in seen


def test_matching_arguments_complete(serve: Serve) -> None:
    arguments = json.dumps({"city": "Paris", "days": 2})
    live = serve([call(arguments)])
    response = openai_client(live).responses.create(model=MODEL, input="Weather?", tools=[weather(True)])
    assert response.status == "completed" and json.loads(response.output[-1].arguments)["days"] == 2
