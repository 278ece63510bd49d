"""Strict functions' schemas reach the engines that constrain a call, as grammars over the arguments.

Through our real server and each adapter's fake: the grammar the engine receives is read back as a regex
(tests/engine/ebnf.py) and judged on arguments the model might write, so that a test fails when valid
arguments would be refused or invalid ones let through. The real engines enforcing them:
tests/real_engines/*/test_strict_functions.py.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from harmony_responses.grammar import UnsupportedGrammar, schema_grammar

from .ebnf import accepts
from .fakes import LlamaCppFake, Scenario, SGLangFake, VLLMFake, harmony
from .helpers import per_tool_stack, stack

PLACE = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "zip": {"anyOf": [{"type": "string", "pattern": "^[0-9]{5}$"}, {"type": "null"}]},
    },
    "required": ["name", "zip"],
    "additionalProperties": False,
}
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome"]},
        "days": {"type": "integer"},
        "units": {"type": ["string", "null"], "maxLength": 3},
        "stops": {"type": "array", "items": {"$ref": "#/$defs/place"}, "maxItems": 2},
        "when": {"type": "string", "format": "date"},
    },
    "required": ["city", "days", "units", "stops", "when"],
    "additionalProperties": False,
    "$defs": {"place": PLACE},
}
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather.", "parameters": SCHEMA, "strict": True}
NAMESPACED = {"type": "namespace", "name": "geo", "description": "Places.", "tools": [{**WEATHER, "name": "find"}]}
VALID = [
    {"city": "Paris", "days": 3, "units": "C", "stops": [], "when": "2026-12-02"},
    {"city": "Rome", "days": -1, "units": None, "stops": [{"name": 'a "b"', "zip": "75001"}], "when": "2026-01-31"},
]
INVALID = [
    {"city": "Lyon", "days": 3, "units": "C", "stops": [], "when": "2026-12-02"},  # outside the enum
    {"city": "Paris", "days": "3", "units": "C", "stops": [], "when": "2026-12-02"},  # wrong type
    {"city": "Paris", "days": 3, "units": "C", "stops": []},  # a required property missing
    {"city": "Paris", "days": 3, "units": "C", "stops": [], "when": "2026-12-02", "x": 1},  # an extra one
    {"city": "Paris", "days": 3, "units": "CCCC", "stops": [], "when": "2026-12-02"},  # too long
    {"city": "Paris", "days": 3, "units": "C", "stops": [{"name": "a", "zip": "7500"}], "when": "2026-12-02"},
    {"city": "Paris", "days": 3, "units": "C", "stops": [], "when": "tomorrow"},  # not a date
]
CALL = harmony(
    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + json.dumps(VALID[0]) + "<|call|>"
)
FAKES = {"vllm": VLLMFake, "sglang": SGLangFake, "llamacpp": LlamaCppFake}


def judge(grammar: str, root: str = "root") -> None:
    for arguments in VALID:
        assert accepts(grammar, json.dumps(arguments), root), arguments
        assert accepts(grammar, json.dumps(arguments, separators=(",", ":"), ensure_ascii=False), root)
        assert accepts(grammar, json.dumps(arguments, indent=2), root)
    for arguments in INVALID:
        assert not accepts(grammar, json.dumps(arguments), root), arguments
    assert not accepts(grammar, json.dumps(VALID[0])[:-1], root)  # unterminated


def tag_of(body: dict[str, Any], kind: str) -> dict[str, Any]:
    raw = body["structured_outputs"]["structural_tag"] if kind == "vllm" else body["sampling_params"]["structural_tag"]
    return orjson.loads(raw)  # type: ignore[no-any-return]


def test_the_grammar_holds_arguments_to_the_schema() -> None:
    # Recursive $defs are rules; the regex reader cannot inline them, so this one is checked for shape only.
    judge(schema_grammar(orjson.dumps(SCHEMA).decode()))
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    tree |= {"required": ["kids"], "additionalProperties": False}
    assert "root ::= s0" in schema_grammar(orjson.dumps(tree).decode())


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_structural_tag_holds_a_strict_function_and_a_namespace_function(kind: str) -> None:
    loose = {**WEATHER, "name": "loose", "strict": False}
    with per_tool_stack(kind, FAKES[kind](Scenario(tokens=CALL))) as s:
        response = s.post({"input": "Weather?", "tools": [WEATHER, NAMESPACED, loose]}).json()
        assert response["output"][-1]["arguments"] == json.dumps(VALID[0])
        tags = {t["begin"]: t for t in tag_of(s.fake.requests[0], kind)["format"]["tags"]}
    assert {begin.rstrip() for begin in tags if begin.endswith(" ")} == {
        "to=functions.get_weather",
        "to=geo.find",
        "to=functions.loose",
    }
    for begin in ("to=functions.get_weather<|message|>", "to=geo.find<|message|>"):
        content = tags[begin]["content"]
        assert content["type"] == "grammar"
        judge(content["grammar"])
    # --constrain-function-arguments json (the default): a non-strict function's arguments are one JSON object.
    any_object = tags["to=functions.loose<|message|>"]["content"]["grammar"]
    assert "root ::= object" in any_object and "value ::=" in any_object


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
@pytest.mark.parametrize("mode", ["schema", "off"])
def test_constrain_function_arguments_schema_and_off(kind: str, mode: str) -> None:
    loose = {**WEATHER, "name": "loose", "strict": False}
    optional = {**loose, "name": "optional", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}
    with per_tool_stack(kind, FAKES[kind](Scenario(tokens=CALL)), constrain_function_arguments=mode) as s:
        s.post({"input": "Weather?", "tools": [WEATHER, loose, optional]})
        tags = {t["begin"]: t for t in tag_of(s.fake.requests[0], kind)["format"]["tags"]}
    strict = tags["to=functions.get_weather<|message|>"]["content"]["grammar"]
    judge(strict)  # strict functions are held to their schema in every mode
    if mode == "off":
        assert "to=functions.loose " not in tags and "to=functions.optional " not in tags
        return
    # schema: a non-strict schema a grammar can hold is held to it, closed to its properties; an optional
    # property may be left out.
    judge(tags["to=functions.loose<|message|>"]["content"]["grammar"])
    optional_grammar = tags["to=functions.optional<|message|>"]["content"]["grammar"]
    assert "root ::= object" not in optional_grammar
    assert accepts(optional_grammar, "{}") and accepts(optional_grammar, '{"a": "x"}')
    assert not accepts(optional_grammar, '{"b": "x"}') and not accepts(optional_grammar, "[]")


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_a_forced_strict_function_is_held_from_the_first_token(kind: str) -> None:
    forced = harmony(json.dumps(VALID[1]) + "<|call|>")
    with stack(kind, FAKES[kind](Scenario(tokens=forced))) as s:
        choice = {"type": "function", "name": "find", "namespace": "geo"}
        response = s.post({"input": "Weather?", "tools": [WEATHER, NAMESPACED], "tool_choice": choice}).json()
        assert json.loads(response["output"][-1]["arguments"]) == VALID[1]
        grammar, rest = tag_of(s.fake.requests[0], kind)["format"]["elements"]
    assert rest == {"type": "any_text"}
    judge(grammar["grammar"])


def test_llamacpp_lazy_grammar_holds_a_strict_function() -> None:
    with per_tool_stack("llamacpp", LlamaCppFake(Scenario(tokens=CALL))) as s:
        s.post({"input": "Weather?", "tools": [WEATHER, NAMESPACED]})
        sent = s.fake.requests[0]
    assert sent["grammar_lazy"] is True
    assert [t["value"].split("(?:")[0] for t in sent["grammar_triggers"]] == [
        "(to=functions\\.get_weather)",
        "(to=geo\\.find)",
    ]
    judge(sent["grammar"], "t0-root")
    header = "to=functions.get_weather <|constrain|>json<|message|>"
    assert accepts(sent["grammar"], header + json.dumps(VALID[0]))
    assert not accepts(sent["grammar"], header + json.dumps(INVALID[0]))


@pytest.mark.parametrize("kind", ["vllm", "sglang", "llamacpp"])
def test_non_strict_functions_under_off_and_tool_choice_none_are_not_constrained(kind: str) -> None:
    answer = harmony("<|channel|>final<|message|>Done.<|return|>")
    fake = FAKES[kind](Scenario(tokens=answer), Scenario(tokens=answer))
    with per_tool_stack(kind, fake, constrain_function_arguments="off") as s:
        assert s.post({"input": "Hi", "tools": [{**WEATHER, "strict": False}]}).json()["status"] == "completed"
        assert s.post({"input": "Hi", "tools": [WEATHER], "tool_choice": "none"}).json()["status"] == "completed"
        for sent in s.fake.requests:
            sampling = sent.get("sampling_params", sent)
            assert "structured_outputs" not in sampling and "structural_tag" not in sampling and "grammar" not in sent


def test_an_optional_property_may_be_left_out_in_an_mcp_or_schema_mode_grammar() -> None:
    # An MCP tool's inputSchema (closed to its properties): "q" required, "limit" and "lang" optional.
    schema = {
        "type": "object",
        "properties": {"limit": {"type": "integer"}, "q": {"type": "string"}, "lang": {"enum": ["en", "fr"]}},
        "required": ["q"],
        "additionalProperties": False,
    }
    grammar = schema_grammar(orjson.dumps(schema).decode(), optional=True)
    for arguments in (
        {"q": "a"},
        {"limit": 3, "q": "a"},
        {"q": "a", "lang": "fr"},
        {"limit": 1, "q": "", "lang": "en"},
    ):
        assert accepts(grammar, json.dumps(arguments)), arguments
        assert accepts(grammar, json.dumps(arguments, indent=2)), arguments
    for arguments in ({}, {"limit": 3}, {"q": 1}, {"q": "a", "x": 1}, {"q": "a", "lang": "de"}):
        assert not accepts(grammar, json.dumps(arguments)), arguments
    assert not accepts(grammar, '{"q": "a",}') and not accepts(grammar, '{, "q": "a"}')
    # Every property optional: the empty object too, and no stray comma.
    loose = {**schema, "required": []}
    grammar = schema_grammar(orjson.dumps(loose).decode(), optional=True)
    for arguments in ({}, {"lang": "en"}, {"limit": 2, "lang": "en"}):
        assert accepts(grammar, json.dumps(arguments)), arguments
    assert not accepts(grammar, '{"limit": 2,}')
    # The API's strict mode requires every property: the same schema is refused without ``optional``.
    with pytest.raises(UnsupportedGrammar, match="every property must be required"):
        schema_grammar(orjson.dumps(schema).decode())
