"""``api.schema``: strict-mode rules, answer checking, and the fallback checker agreeing with jsonschema."""

from __future__ import annotations

from typing import Any

import pytest

from harmony_responses.request import schema as schema_module
from harmony_responses.request.schema import check_json_schema, instance_problem, strict_schema_problem

PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "pet": {"anyOf": [{"$ref": "#/$defs/pet"}, {"type": "null"}]},
        "kind": {"const": "person"},
    },
    "required": ["name", "age", "tags", "pet", "kind"],
    "additionalProperties": False,
    "$defs": {
        "pet": {
            "type": "object",
            "properties": {"species": {"type": "string"}},
            "required": ["species"],
            "additionalProperties": False,
        }
    },
}
VALID = {"name": "Ann", "age": 3, "tags": ["a"], "pet": {"species": "cat"}, "kind": "person"}
INSTANCES: list[Any] = [
    VALID,
    {**VALID, "pet": None},
    {**VALID, "age": 3.0},  # JSON Schema: 3.0 is an integer
    {**VALID, "age": "3"},
    {**VALID, "age": True},
    {**VALID, "tags": ["c"]},
    {**VALID, "pet": {"species": 1}},
    {**VALID, "pet": {}},
    {**VALID, "extra": 1},
    {k: v for k, v in VALID.items() if k != "name"},
    {**VALID, "kind": "robot"},
    [],
    "text",
]


def test_strict_schema_accepts_a_compliant_schema() -> None:
    assert check_json_schema(PERSON) is None
    assert strict_schema_problem(PERSON) is None


def test_strict_schema_finds_problems_in_defs_and_any_of() -> None:
    loose_def = {**PERSON, "$defs": {"pet": {"type": "object", "properties": {"species": {"type": "string"}}}}}
    assert strict_schema_problem(loose_def) == (
        "In context=('$defs', 'pet'), 'additionalProperties' is required to be supplied and to be false."
    )
    loose_any = {
        **PERSON,
        "properties": {**PERSON["properties"], "pet": {"anyOf": [{"type": "object", "properties": {}}]}},
    }
    assert strict_schema_problem(loose_any) == (
        "In context=('properties', 'pet', 'anyOf', 0), 'additionalProperties' is required to be supplied and to be "
        "false."
    )


@pytest.mark.parametrize("instance", INSTANCES)
def test_fallback_agrees_with_jsonschema(instance: Any) -> None:
    with_jsonschema = instance_problem(instance, PERSON)
    fallback = schema_module._fallback_problem(instance, PERSON, PERSON, "")
    assert (with_jsonschema is None) == (fallback is None), (with_jsonschema, fallback)


def test_without_jsonschema(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_module, "jsonschema", None)
    schema_module._check_cached.cache_clear()
    try:
        assert check_json_schema({"type": "objekt"}) is None  # no metaschema check without jsonschema
        assert instance_problem(VALID, PERSON) is None
        assert instance_problem({**VALID, "extra": 1}, PERSON) == (
            "Additional properties are not allowed ('extra' was unexpected)"
        )
        assert instance_problem({**VALID, "pet": {"species": 1}}, PERSON) is not None
    finally:
        schema_module._check_cached.cache_clear()


def test_deep_values_are_refused_not_crashed_on() -> None:
    deep: Any = {}
    for _ in range(2000):
        deep = {"items": deep}
    assert "nested more than" in (check_json_schema(deep) or "")
    value: Any = []
    for _ in range(2000):
        value = [value]
    assert "nested more than" in (instance_problem(value, {"type": "array"}) or "")


@pytest.mark.usefixtures("no_re_in_jsonschema")
@pytest.mark.parametrize("pattern", [r"^(a|aa)+$", r"^(a|a)*$"])
def test_a_pattern_that_backtracks_for_ever_is_given_up_on_not_waited_for(pattern: str) -> None:
    """With ``re`` (jsonschema's own matcher) 40 characters that nearly match took hours, holding every other
    request: an engine that does not constrain a strict function's arguments (trtllm, transformers) has them
    checked after generation. The check gives up once, at ``PATTERN_TIMEOUT``, and says so; matching and
    plainly failing strings are answered as before."""
    string = {"type": "string", "pattern": pattern}
    schema = {"type": "object", "properties": {"q": {"type": "array", "items": string}}, "required": ["q"]}
    problem = instance_problem({"q": ["a" * 40 + "!"] * 50}, schema)
    assert problem is not None and "could not be checked against" in problem
    assert instance_problem({"q": ["aaa"]}, schema) is None
    assert "does not match" in (instance_problem({"q": ["b"]}, schema) or "")


class _NoBacktrackingRe:
    """Stands in for ``re`` in jsonschema's modules: a client's pattern must never reach it."""

    def search(self, pattern: str, string: str) -> None:
        raise AssertionError(f"jsonschema matched {pattern!r} with re")


@pytest.fixture
def no_re_in_jsonschema(monkeypatch: pytest.MonkeyPatch) -> None:
    import jsonschema._keywords
    import jsonschema._utils

    for module in (jsonschema._keywords, jsonschema._utils):
        monkeypatch.setattr(module, "re", _NoBacktrackingRe())


@pytest.mark.usefixtures("no_re_in_jsonschema")
@pytest.mark.parametrize("additional", [None, False, {"type": "string"}])
def test_pattern_properties_are_matched_in_bounded_time_too(additional: Any) -> None:
    schema: dict[str, Any] = {"type": "object"}
    if additional is not None:
        # First, so that it is checked first: which keys are additional is told by the patterns too.
        schema["additionalProperties"] = additional
    schema["patternProperties"] = {r"^(a|aa)+$": {"type": "integer"}}
    assert "could not be checked against" in (instance_problem({"a" * 40 + "!": 1}, schema) or "")
    assert instance_problem({"aaa": 1}, schema) is None
    assert "is not of type 'integer'" in (instance_problem({"aaa": "x"}, schema) or "")
    others = instance_problem({"aaa": 1, "b": 2}, schema)
    assert others is None if additional is None else others is not None
