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
from .conftest import VLLM

MODEL = "gpt-oss-20b"
# Codex's apply_patch grammar (codex-rs, tool_apply_patch.lark), as Codex declares the tool.
APPLY_PATCH_LARK = """start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
"""
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_LARK},
}
TICKET_RE = r"[A-Z]{2,4}-[0-9]{1,6}"
TICKET = {
    "type": "custom",
    "name": "ticket",
    "description": "Open a ticket.",
    "format": {"type": "grammar", "syntax": "regex", "definition": TICKET_RE},
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
# Add-file hunks only: enough to tell a patch the grammar allows.
ADD_ONLY_PATCH = re.compile(r"\*\*\* Begin Patch\n(\*\*\* Add File: .+\n(\+.*\n)+)+\*\*\* End Patch\n?")


def call(name: str, payload: str, analysis: str = "Calling it.") -> str:
    return (
        f"<|channel|>analysis<|message|>{analysis}<|end|><|start|>assistant"
        f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{payload}<|call|>"
    )


def last_call(client: Any, text: str, tools: list[dict[str, Any]]) -> Any:
    response = client.responses.create(model=MODEL, input=text, tools=tools)
    assert response.status == "completed", response.error
    return response.output[-1]


def test_a_valid_input_comes_through_unchanged(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    patch = '*** Begin Patch\n*** Add File: docs/a "b".txt\n+Hello\tworld \\o/\n+\n*** End Patch\n'
    # The analysis names the tool: free text, not a call, so it is not held to anything.
    completions.script.say("case-gram-ok", call("apply_patch", json.dumps({"input": patch}), "Use apply_patch now."))
    with gateway.client() as client:
        item = last_call(client, "case-gram-ok: add the file", [APPLY_PATCH, TICKET, WEATHER])
    assert (item.type, item.name, item.input) == ("custom_tool_call", "apply_patch", patch)
    (new,) = completions.events("case-gram-ok", "new")
    assert "to=functions.apply_patch " in new["sampling"]["structured_outputs"]  # vLLM's SamplingParams (repr)


def test_an_input_outside_the_regex_is_held_to_it(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    completions.script.say("case-gram-re", call("ticket", json.dumps({"input": "ops-42 please"})))
    with gateway.client() as client:
        item = last_call(client, "case-gram-re: open one", [APPLY_PATCH, TICKET])
    assert (item.type, item.name) == ("custom_tool_call", "ticket")
    assert re.fullmatch(TICKET_RE, item.input), item.input


def test_a_patch_outside_the_lark_grammar_is_held_to_it(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    # The added line lacks its "+": the grammar allows only "+" there.
    bad = "*** Begin Patch\n*** Add File: a.txt\nhello\n*** End Patch\n"
    completions.script.say("case-gram-lark", call("apply_patch", json.dumps({"input": bad})))
    with gateway.client() as client:
        item = last_call(client, "case-gram-lark: add it", [APPLY_PATCH])
    assert (item.type, item.name) == ("custom_tool_call", "apply_patch")
    assert ADD_ONLY_PATCH.fullmatch(item.input), item.input
    assert item.input != bad


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
