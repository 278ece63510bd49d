"""Custom tools' grammars through vLLM 0.33.0's structured outputs (xgrammar): a call's input is held to them.

The scripted executor takes a scripted id only where xgrammar's bitmask allows it (else ``<|return|>``, else
the lowest allowed id), as a real model's sampler would: a script that writes a valid input comes through
unchanged, one that writes an input outside the grammar is turned into one inside it. Free text and other
tools around the call stay free.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..gateway import Gateway
from ..grammars import ADD_ONLY_PATCH, APPLY_PATCH, PATCH, PATCH_WITHOUT_PLUS, TICKET, TICKET_RE, call
from .conftest import VLLM

MODEL = "gpt-oss-20b"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def last_call(client: Any, text: str, tools: list[dict[str, Any]]) -> Any:
    response = client.responses.create(model=MODEL, input=text, tools=tools)
    assert response.status == "completed", response.error
    return response.output[-1]


def test_a_valid_input_comes_through_unchanged(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    # The analysis names the tool: free text, not a call, so it is not held to anything.
    completions.script.say("case-gram-ok", call("apply_patch", json.dumps({"input": PATCH}), "Use apply_patch now."))
    with gateway.client() as client:
        item = last_call(client, "case-gram-ok: add the file", [APPLY_PATCH, TICKET, WEATHER])
    assert (item.type, item.name, item.input) == ("custom_tool_call", "apply_patch", PATCH)
    (new,) = completions.events("case-gram-ok", "new")
    sampling = new["sampling"]["structured_outputs"]  # vLLM's SamplingParams (repr)
    # The declared recipients' grammar (the default), holding apply_patch's input after its header.
    assert "<|channel|>commentary to=" in sampling and "functions.apply_patch" in sampling


def test_an_input_outside_the_regex_is_held_to_it(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    completions.script.say("case-gram-re", call("ticket", json.dumps({"input": "ops-42 please"})))
    with gateway.client() as client:
        item = last_call(client, "case-gram-re: open one", [APPLY_PATCH, TICKET])
    assert (item.type, item.name) == ("custom_tool_call", "ticket")
    assert re.fullmatch(TICKET_RE, item.input), item.input


def test_a_patch_outside_the_lark_grammar_is_held_to_it(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    completions.script.say("case-gram-lark", call("apply_patch", json.dumps({"input": PATCH_WITHOUT_PLUS})))
    with gateway.client() as client:
        item = last_call(client, "case-gram-lark: add it", [APPLY_PATCH])
    assert (item.type, item.name) == ("custom_tool_call", "apply_patch")
    assert ADD_ONLY_PATCH.fullmatch(item.input), item.input
    assert item.input != PATCH_WITHOUT_PLUS


def test_other_tools_and_free_text_stay_free(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    # A function whose arguments the grammar tools' tags would refuse, and an answer that mentions the tools.
    completions.script.say("case-gram-fn", call("get_weather", '{"city": "ops-42"}', "ticket apply_patch: not now"))
    completions.script.say(
        "case-gram-text",
        "<|channel|>analysis<|message|>to=functions.ticketing is no tool.<|end|><|start|>assistant"
        "<|channel|>final<|message|>No ticket: ops-42.<|return|>",
    )
    with gateway.client() as client:
        item = last_call(client, "case-gram-fn: weather", [APPLY_PATCH, TICKET, WEATHER])
        assert (item.type, item.name, item.arguments) == ("function_call", "get_weather", '{"city": "ops-42"}')
        response = client.responses.create(model=MODEL, input="case-gram-text: hi", tools=[TICKET])
    assert response.status == "completed" and response.output_text == "No ticket: ops-42."


def test_a_forced_call_is_held_from_its_first_token(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    # tool_choice names the tool: the prompt ends with the call's header, the model writes the JSON.
    completions.script.say("case-gram-forced", json.dumps({"input": "nope"}) + "<|call|>")
    with gateway.client() as client:
        response = client.responses.create(
            model=MODEL,
            input="case-gram-forced: open one",
            tools=[TICKET],
            tool_choice={"type": "custom", "name": "ticket"},
        )
    item = response.output[-1]
    assert response.status == "completed", response.error
    assert (item.type, item.name) == ("custom_tool_call", "ticket")
    assert re.fullmatch(TICKET_RE, item.input), item.input
