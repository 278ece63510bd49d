"""Declared recipients only (issue 26 item 3): the grammars that hold a header's ``to=`` to the declared tools.

Built from a ``GenerateRequest`` as run/start.py fills it (``recipients``) and read back as a regex
(tests/engine/ebnf.py): the text a model would write after the trigger is judged, so that a test fails when
a declared recipient would be refused or an undeclared one let through. The real llama.cpp steering them:
tests/real_engines/llamacpp/test_declared_recipients.py. The last tests go through our real server with its
defaults: ``--constrain-recipients declared`` is the default.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from harmony_responses.engine import GenerateRequest, ToolGrammar
from harmony_responses.engine._constrain import lazy_grammar, structural_tag
from harmony_responses.run.start import _declared_recipients

from .ebnf import accepts
from .fakes import LlamaCppFake, Scenario, VLLMFake, harmony
from .helpers import stack

ASSISTANT = harmony("<|start|>user<|message|>Hi<|end|><|start|>assistant")
RECIPIENTS = ("functions.get_weather", "geo.lookup", "python", "browser.search")
TICKET = ToolGrammar(name="ticket", syntax="regex", definition=r"[A-Z]{2}-\d")


def request(recipients: tuple[str, ...] | None, prefill: str = "", **extra: Any) -> GenerateRequest:
    return GenerateRequest(prompt_ids=ASSISTANT + (harmony(prefill) if prefill else []), recipients=recipients, **extra)


def held(grammar: dict[str, Any], generated: str) -> str | None:
    """What llama.cpp holds to the grammar: from the trigger's capture group on (None: not triggered)."""
    m = re.search(grammar["grammar_triggers"][0]["value"], generated)
    return generated[m.start(1) :] if m else None


def test_declared_recipients_of_a_request() -> None:
    tools = [
        {"type": "function", "name": "get_weather", "parameters": {}},
        {"type": "custom", "name": "ticket"},
        {"type": "namespace", "name": "geo", "tools": [{"name": "lookup"}]},
        {"type": "mcp", "server_label": "docs", "_mcp_tools": [{"name": "fetch"}]},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "web_search"},
        {"type": "tool_search"},
    ]
    assert _declared_recipients({"tools": tools}) == (
        "functions.get_weather",
        "functions.ticket",
        "geo.lookup",
        "docs.fetch",
        "python",
        "browser.search",
        "browser.open",
        "browser.find",
        "functions.tool_search",
    )
    assert _declared_recipients({"tools": tools, "tool_choice": "none"}) == ()
    assert _declared_recipients({"tools": []}) is None and _declared_recipients({}) is None


def test_llamacpp_holds_a_headers_recipient_to_the_declared_ones() -> None:
    grammar = lazy_grammar(request(RECIPIENTS))
    assert grammar is not None and grammar["grammar_lazy"] is True
    analysis = "<|channel|>analysis<|message|>Look it up. I want to=see it.<|end|><|start|>assistant"
    # Free text, a final answer: nothing is held.
    assert held(grammar, analysis) is None
    assert held(grammar, analysis + "<|channel|>final<|message|>Sunny.") is None
    for header in (
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
        "<|channel|>commentary to=geo.lookup <|constrain|>json<|message|>",
        "<|channel|>analysis to=python code<|message|>",
        " to=browser.search<|channel|>analysis code<|message|>",  # the recipient in the role, first header
    ):
        text = held(grammar, analysis + header)
        assert text is not None and text.startswith(" to="), header
        assert accepts(grammar["grammar"], text + '{"q": "x < y"}'), header
        # llama.cpp may feed the grammar from the header's start instead: it reads that too.
        assert accepts(grammar["grammar"], header + "print(1)"), header
    for undeclared in ("functions.nonexistent", "functions.get_weather_v2", "geo.other", "browser.click", "pyth"):
        text = f"<|channel|>commentary to={undeclared} <|constrain|>json<|message|>{{}}"
        assert not accepts(grammar["grammar"], text), undeclared


def test_a_grammar_tools_arguments_are_held_after_its_recipient() -> None:
    grammar = lazy_grammar(request(("functions.ticket", "python"), tool_grammars=(TICKET,)))
    assert grammar is not None
    header = "<|channel|>commentary to=functions.ticket <|constrain|>json<|message|>"
    assert accepts(grammar["grammar"], header + '{"input": "AB-1"}')
    assert not accepts(grammar["grammar"], header + '{"input": "no"}')
    assert accepts(grammar["grammar"], "<|channel|>analysis to=python code<|message|>anything")


def test_a_prefilled_recipient_is_held_from_the_first_token() -> None:
    # tool_choice "required" with several targets: the prefill ends at "to=".
    grammar = lazy_grammar(request(RECIPIENTS, "<|channel|>commentary to="))
    assert grammar is not None and "grammar_lazy" not in grammar
    assert accepts(grammar["grammar"], "geo.lookup <|constrain|>json<|message|>{}")
    assert not accepts(grammar["grammar"], "functions.nonexistent <|constrain|>json<|message|>{}")
    # One namespace: "to=functions." is written; what is left of its functions' names.
    grammar = lazy_grammar(request(RECIPIENTS, "<|channel|>commentary to=functions."))
    assert grammar is not None
    assert accepts(grammar["grammar"], "get_weather <|constrain|>json<|message|>{}")
    assert not accepts(grammar["grammar"], "lookup <|constrain|>json<|message|>{}")


def test_tool_choice_none_lets_no_header_name_a_recipient() -> None:
    grammar = lazy_grammar(request(()))
    assert grammar is not None and "grammar_lazy" not in grammar  # the whole generation
    text = grammar["grammar"]
    assert accepts(text, "<|channel|>analysis<|message|>Hmm.<|end|><|start|>assistant<|channel|>final<|message|>Hi")
    assert accepts(text, "<|channel|>final <|constrain|>json<|message|>{}")
    assert not accepts(text, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}")
    assert not accepts(text, "<|channel|>commentary functions.get_weather<|message|>{}")
    assert not accepts(text, "<|channel|>commentary touming<|message|>{}")  # no word a " to" token begins
    assert not accepts(text, "<|channel|>analysis<|message|>Hmm.<|end|><|start|>assistant to=python<|channel|>x")


def test_no_tools_declared_holds_nothing() -> None:
    assert lazy_grammar(request(None)) is None
    assert structural_tag(request(None)) is None


def test_structural_tag_holds_a_headers_recipient() -> None:
    schema = {"type": "object"}
    tag = structural_tag(request(("functions.ticket", "python"), tool_grammars=(TICKET,), response_schema=schema))
    assert tag is not None
    fmt = tag["format"]
    assert fmt["type"] == "triggered_tags"
    assert fmt["triggers"] == [
        "<|channel|>analysis to=",
        "<|channel|>commentary to=",
        "<|channel|>final to=",
        "<|start|>assistant to=",
        "<|channel|>final<|message|>",
    ]
    for trigger, tag_ in zip(fmt["triggers"], fmt["tags"], strict=True):
        assert tag_["begin"] == trigger
    grammar = fmt["tags"][1]["content"]["grammar"]
    assert accepts(grammar, 'functions.ticket <|constrain|>json<|message|>{"input": "AB-1"}')
    assert not accepts(grammar, 'functions.ticket <|constrain|>json<|message|>{"input": "no"}')
    assert accepts(grammar, "python code<|message|>")  # the tag ends there: the code is free text
    assert not accepts(grammar, "functions.nonexistent <|constrain|>json<|message|>")
    assert fmt["tags"][-1]["content"] == {"type": "json_schema", "json_schema": schema}


def test_structural_tag_under_tool_choice_none() -> None:
    tag = structural_tag(request(()))
    assert tag is not None
    fmt = tag["format"]
    assert fmt["triggers"] == ["<|channel|>analysis", "<|channel|>commentary", "<|channel|>final"]
    header = fmt["tags"][1]["content"]
    assert header["end"] == "<|message|>"
    grammar = header["content"]["grammar"]
    assert accepts(grammar, "") and accepts(grammar, " <|constrain|>json") and accepts(grammar, " json")
    assert not accepts(grammar, " to=functions.get_weather")


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Oslo", "Rome"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
CUSTOM_TICKET = {
    "type": "custom",
    "name": "ticket",
    "format": {"type": "grammar", "syntax": "regex", "definition": r"^[A-Z]{2}-\d$"},
}
CALL = '<|channel|>commentary to=functions.ticket <|constrain|>json<|message|>{"input": "AB-1"}<|call|>'


def test_the_servers_default_holds_recipients_on_vllm() -> None:
    with stack("vllm", VLLMFake(Scenario(tokens=harmony(CALL)), Scenario(tokens=harmony("Hi")))) as s:
        response = s.post({"input": "Open one", "tools": [WEATHER, CUSTOM_TICKET]}).json()
        assert response["output"][-1]["input"] == "AB-1"
        none = s.post({"input": "Hi", "tools": [WEATHER, CUSTOM_TICKET], "tool_choice": "none"}).json()
        assert none["status"] == "completed"
        first, second = (orjson.loads(b["structured_outputs"]["structural_tag"]) for b in s.fake.requests)
    fmt = first["format"]
    assert "<|channel|>commentary to=" in fmt["triggers"]
    grammar = fmt["tags"][fmt["triggers"].index("<|channel|>commentary to=")]["content"]["grammar"]
    assert accepts(grammar, 'functions.ticket <|constrain|>json<|message|>{"input": "AB-1"}')
    assert not accepts(grammar, 'functions.ticket <|constrain|>json<|message|>{"input": "no"}')
    assert accepts(grammar, 'functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}')
    assert not accepts(grammar, 'functions.get_weather <|constrain|>json<|message|>{"city": 3}')
    assert not accepts(grammar, 'functions.nonexistent <|constrain|>json<|message|>{"city": "Oslo"}')
    assert second["format"]["triggers"] == ["<|channel|>analysis", "<|channel|>commentary", "<|channel|>final"]


def test_the_servers_default_holds_recipients_on_llamacpp() -> None:
    with stack("llamacpp", LlamaCppFake(Scenario(tokens=harmony(CALL)))) as s:
        assert s.post({"input": "Open one", "tools": [WEATHER, CUSTOM_TICKET]}).json()["output"][-1]["input"] == "AB-1"
        body = s.fake.requests[0]
    assert body["grammar_lazy"] is True
    header = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    assert accepts(body["grammar"], header + '{"city": "Oslo"}')
    assert not accepts(body["grammar"], header.replace("get_weather", "nonexistent") + '{"city": "Oslo"}')
