"""JSON Schema checks: is a schema valid, does it meet strict mode's rules, does an answer match it.

Strict mode (``strict: true`` on a function tool or a ``json_schema`` format) has the API's extra rules:
the root is an object, and every object says ``additionalProperties: false`` and lists every property in
``required``. The wording copies the API's (responses-protocol.md §7.4), e.g. ``In context=('properties',
'address'), 'additionalProperties' is required to be supplied and to be false.``

``jsonschema`` does the general work when it is installed; without it a small checker covers the keywords
strict schemas use (type, properties, required, additionalProperties, items, enum, const, anyOf, $ref into
$defs/definitions) and skips the rest, so that a missing optional dependency never rejects a valid answer.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["SchemaProblem", "check_json_schema", "instance_problem", "strict_schema_problem"]

SchemaProblem = str

# Deeper schemas are refused before any recursive walk: Python's recursion limit must never turn a
# client's schema into a 500. The API's own limit for strict schemas is 10 levels of nesting.
MAX_SCHEMA_DEPTH = 64

try:
    import jsonschema
    import jsonschema.exceptions
    import jsonschema.validators
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    jsonschema = None  # type: ignore[assignment]


def _depth(value: Any) -> int:
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if deepest > MAX_SCHEMA_DEPTH:
                return deepest
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return deepest


@functools.lru_cache(maxsize=512)
def _check_cached(encoded: bytes) -> SchemaProblem | None:
    # Clients resend the same tool schemas on every request (Codex: a dozen per turn); checking a schema
    # against its metaschema costs milliseconds, so the verdict is cached by the schema's bytes.
    if jsonschema is None:
        return None
    schema = orjson.loads(encoded)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        return f"{exc.message}" + (f" (at '{where}')" if where else "")
    return None


def check_json_schema(schema: dict[str, Any]) -> SchemaProblem | None:
    """Why ``schema`` is not a valid JSON Schema, or None."""
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        return f"schema is nested more than {MAX_SCHEMA_DEPTH} levels deep."
    return _check_cached(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))


def _is_object_schema(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def strict_schema_problem(schema: dict[str, Any]) -> SchemaProblem | None:
    """Why ``schema`` breaks strict mode's rules, or None (call ``check_json_schema`` first)."""
    kind = schema.get("type")
    if kind != "object":
        shown = f'type: "{kind}"' if isinstance(kind, str) else "no 'type'"
        return f"schema must be a JSON Schema of 'type: \"object\"', got '{shown}'."
    stack: list[tuple[dict[str, Any], tuple[str | int, ...]]] = [(schema, ())]
    while stack:
        node, path = stack.pop()
        context = f"In context={path!r}"
        if _is_object_schema(node):
            if node.get("additionalProperties") is not False:
                return f"{context}, 'additionalProperties' is required to be supplied and to be false."
            properties = node.get("properties") or {}
            required = node.get("required")
            missing = [k for k in properties if not isinstance(required, list) or k not in required]
            if missing:
                return (
                    f"{context}, 'required' is required to be supplied and to be an array including every key "
                    f"in properties. Missing '{missing[0]}'."
                )
        children: list[tuple[Any, tuple[str | int, ...]]] = []
        for key in ("properties", "$defs", "definitions"):
            mapping = node.get(key)
            if isinstance(mapping, dict):
                children.extend((sub, (*path, key, name)) for name, sub in mapping.items())
        if isinstance(node.get("items"), dict):
            children.append((node["items"], (*path, "items")))
        for key in ("anyOf",):
            options = node.get(key)
            if isinstance(options, list):
                children.extend((sub, (*path, key, i)) for i, sub in enumerate(options))
        # Reverse so that problems are reported in document order (the stack pops the last child first).
        stack.extend((sub, p) for sub, p in reversed(children) if isinstance(sub, dict))
    return None


def instance_problem(instance: Any, schema: dict[str, Any]) -> SchemaProblem | None:
    """Why ``instance`` does not match ``schema`` (a valid schema), or None."""
    if _depth(instance) > MAX_SCHEMA_DEPTH:
        return f"the answer is nested more than {MAX_SCHEMA_DEPTH} levels deep."
    if jsonschema is not None:
        cls = _bounded(jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator))
        try:
            error = jsonschema.exceptions.best_match(cls(schema).iter_errors(instance))
        except RecursionError:  # a self-referencing $ref that never bottoms out
            return "the schema's references recurse too deeply to check the answer."
        except _TooSlow as exc:
            return str(exc)
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path)
        return error.message + (f" (at '/{where}')" if where else "")
    return _fallback_problem(instance, schema, schema, "")


# ---------------------------------------------------------------------------------------- patterns

# Seconds a schema's pattern may take on one string. jsonschema matches ``pattern`` with ``re``, whose
# backtracking is exponential on patterns like ``^(a|aa)+$`` (many e-mail patterns are such): the model's
# arguments for a strict function on an engine that does not constrain them (trtllm, transformers) are checked
# after generation, and 40 characters that nearly match would hold the GIL, and every other request, for hours.
# ``regex`` (the same syntax) gives up at a timeout, and gets through most such patterns quickly anyway.
PATTERN_TIMEOUT = 0.2  # far above any sane pattern on any sane string, even on a busy machine


def _search(pattern: str, text: str) -> bool:
    import regex

    return regex.search(pattern, text, timeout=PATTERN_TIMEOUT) is not None


class _TooSlow(Exception):
    """A pattern took longer than ``PATTERN_TIMEOUT``: the check stops there (one timeout per answer at most)."""


def _matches(pattern: str, text: str) -> bool:
    try:
        return _search(pattern, text)
    except TimeoutError:
        shown = text if len(text) <= 100 else text[:100] + "…"
        raise _TooSlow(f"{shown!r} could not be checked against {pattern!r} within {PATTERN_TIMEOUT:g} s.") from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Any:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield jsonschema.exceptions.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(original: Any) -> Any:
    """``additionalProperties`` telling the keys ``patternProperties`` covers with ``_matches`` (jsonschema's own
    joins the patterns for ``re``), then ``original`` on the rest, as if there were no patterns."""

    def check(validator: Any, additional: Any, instance: Any, schema: dict[str, Any]) -> Any:
        patterns = schema.get("patternProperties")
        if patterns and validator.is_type(instance, "object") and validator.is_type(patterns, "object"):
            instance = {key: value for key, value in instance.items() if not any(_matches(p, key) for p in patterns)}
            schema = {key: value for key, value in schema.items() if key != "patternProperties"}
        yield from original(validator, additional, instance, schema)

    return check


@functools.cache
def _bounded(cls: Any) -> Any:
    """``cls`` with ``pattern``, ``patternProperties`` and the patterns ``additionalProperties`` consults matched in
    bounded time (``unevaluatedProperties`` still consults them with ``re``: no strict schema has it)."""
    additional = _additional_properties(cls.VALIDATORS["additionalProperties"])
    keywords = {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": additional}
    return jsonschema.validators.extend(cls, keywords)


# ---------------------------------------------------------------------------------------- fallback

_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _resolve(ref: str, root: dict[str, Any]) -> Any:
    node: Any = root
    if not ref.startswith("#"):
        return None
    for part in ref[1:].split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _fallback_problem(value: Any, schema: Any, root: dict[str, Any], at: str, depth: int = 0) -> str | None:
    if not isinstance(schema, dict) or depth > MAX_SCHEMA_DEPTH:
        return None
    where = f" (at '{at}')" if at else ""
    if isinstance(schema.get("$ref"), str):
        return _fallback_problem(value, _resolve(schema["$ref"], root), root, at, depth + 1)
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else None
    if kinds and not any(_TYPES.get(k, lambda v: True)(value) for k in kinds):
        return f"{orjson.dumps(value).decode()[:80]} is not of type {', '.join(repr(k) for k in kinds)}{where}"
    if "const" in schema and value != schema["const"]:
        return f"{schema['const']!r} was expected{where}"
    if isinstance(schema.get("enum"), list) and value not in schema["enum"]:
        return f"{orjson.dumps(value).decode()[:80]} is not one of {schema['enum']!r}{where}"
    if isinstance(schema.get("anyOf"), list):
        if all(_fallback_problem(value, s, root, at, depth + 1) for s in schema["anyOf"]):
            return f"{orjson.dumps(value).decode()[:80]} is not valid under any of the given schemas{where}"
    if isinstance(value, dict):
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        for name in schema.get("required") or ():
            if name not in value:
                return f"'{name}' is a required property{where}"
        for name, item in value.items():
            if name in properties:
                problem = _fallback_problem(item, properties[name], root, f"{at}/{name}", depth + 1)
                if problem:
                    return problem
            elif schema.get("additionalProperties") is False:
                return f"Additional properties are not allowed ('{name}' was unexpected){where}"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problem = _fallback_problem(item, schema["items"], root, f"{at}/{i}", depth + 1)
            if problem:
                return problem
    return None
