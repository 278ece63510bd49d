"""Custom tools' grammars through SGLang 0.5.23's xgrammar backend, as its grammar manager builds it.

No sampler runs in the scripted scheduler, so the grammar cannot steer here; the scheduler replays the
scripted ids through the matcher SGLang compiled from our structural tag: what a grammar-following
sampler would have been allowed to write (vLLM's tier shows the steering: tests/real_engines/vllm).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from harmony_responses.vocab import load_encoding

from ..gateway import Gateway
from ..grammars import APPLY_PATCH, PATCH, PATCH_WITHOUT_PLUS, TICKET, call
from .conftest import SGLang

MODEL = "gpt-oss-20b"
WEATHER_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

Stack = tuple[SGLang, Gateway]

pytestmark = pytest.mark.timeout(900)  # the first test waits for SGLang to start (conftest)


def grammar_for(stack: Stack, key: str, text: str, tools: list[dict[str, Any]], **create: Any) -> tuple[Any, Any]:
    """(the response, what SGLang's xgrammar matcher made of the scripted ids) for a prompt with ``key``."""
    sglang, gateway = stack
    sglang.script.say(key, text)
    response = gateway.client().responses.create(model=MODEL, input=key, tools=tools, max_output_tokens=256, **create)
    received = sglang.request_for(key)
    assert "structural_tag" in (received["sampling"] or {}) and received["sampling"]["structural_tag"]
    return response, received["grammar"]


ALL_ACCEPTED = {"accepted_all": True, "rejected_at": None, "rejected_token": None}


def test_a_valid_call_and_other_tools_are_accepted(stack: Stack) -> None:
    response, grammar = grammar_for(
        stack, "grammarowl", call("apply_patch", json.dumps({"input": PATCH})), [APPLY_PATCH, TICKET, WEATHER_TOOL]
    )
    assert {k: grammar[k] for k in ALL_ACCEPTED} == ALL_ACCEPTED, grammar
    assert (response.output[-1].type, response.output[-1].input) == ("custom_tool_call", PATCH)
    # A function's arguments that the ticket grammar would refuse, after an analysis naming the tools.
    text = call("get_weather", '{"city": "ops-42"}', "ticket or apply_patch? Neither.")
    response, grammar = grammar_for(stack, "grammarlynx", text, [APPLY_PATCH, TICKET, WEATHER_TOOL])
    assert {k: grammar[k] for k in ALL_ACCEPTED} == ALL_ACCEPTED, grammar
    assert response.output[-1].arguments == '{"city": "ops-42"}'


@pytest.mark.parametrize(
    ("tool", "payload", "accepted_up_to"),
    [
        (TICKET, json.dumps({"input": "ops-42"}), '{"input": "'),
        (APPLY_PATCH, json.dumps({"input": PATCH_WITHOUT_PLUS}), '{"input": "*** Begin Patch\\n*** Add File: a.txt\\n'),
    ],
    ids=["regex", "lark"],
)
def test_an_input_outside_the_grammar_is_refused_where_it_leaves_it(
    stack: Stack, tool: dict[str, Any], payload: str, accepted_up_to: str
) -> None:
    key = f"grammar{tool['name'].replace('_', '')}mink"
    text = call(tool["name"], payload)
    _, grammar = grammar_for(stack, key, text, [APPLY_PATCH, TICKET])
    assert grammar["accepted_all"] is False, grammar
    ids = load_encoding().encode(text, allowed_special="all")
    accepted = load_encoding().decode(ids[: grammar["rejected_at"]])
    assert accepted.endswith(accepted_up_to), accepted


def test_a_forced_call_is_held_from_its_first_token(stack: Stack) -> None:
    choice = {"type": "custom", "name": "ticket"}
    valid, invalid = (json.dumps({"input": text}) + "<|call|>" for text in ("OPS-42", "nope"))
    _, grammar = grammar_for(stack, "grammarforcedok", valid, [TICKET], tool_choice=choice)
    assert {k: grammar[k] for k in ALL_ACCEPTED} == ALL_ACCEPTED, grammar
    _, grammar = grammar_for(stack, "grammarforcedbad", invalid, [TICKET], tool_choice=choice)
    assert grammar["accepted_all"] is False, grammar
    assert grammar["rejected_at"] == len(load_encoding().encode('{"input": "')), grammar
