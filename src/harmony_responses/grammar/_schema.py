"""A strict function's JSON schema as an engine grammar over the arguments the model writes.

``schema_grammar`` writes the schema in the EBNF subset ``_input.py`` uses (xgrammar for vLLM and SGLang
and llama.cpp's GBNF both read it), so that one grammar goes to every engine and what is refused is the
same everywhere. ``schema_problem`` says what the grammar cannot express, for the request's validation to
refuse with a 400 (never silently loosened): the API's strict mode, and of its keywords those a grammar
holds exactly.

Expressed: ``type`` (one or a list), ``properties`` of a strict object (every property required, in
declared order, ``additionalProperties: false``: the order the API's strict mode writes too), ``items``
with ``minItems``/``maxItems``, ``enum``, ``const``, ``anyOf``, ``$ref`` into ``$defs``/``definitions``
or ``#`` (recursion is a rule), strings' ``pattern`` (Python's regex parser, as custom tools' regexes),
``minLength``/``maxLength`` and the ``format`` values listed in ``_FORMATS``; annotations (``title``,
``description``, ``default``, ...) are ignored. Not expressed, so refused: numeric bounds (``minimum``,
``maximum``, their exclusive forms, ``multipleOf``), ``allOf``, ``oneOf``, ``not``, conditionals,
``patternProperties`` and the other keywords strict mode does not list.

Whitespace between tokens is what llama.cpp's own schema grammars allow (nothing, a space, or a newline and
up to 20 spaces or tabs), so pretty-printed arguments pass and a sampler cannot pad forever.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import orjson

from ._input import UnsupportedGrammar, _literal, _regex_ebnf

__all__ = ["object_grammar", "schema_grammar", "schema_problem"]

_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly"}
)
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
# Strings' ``format`` values the API's strict mode lists, as regexes over the decoded text.
_FORMATS = {
    "date": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    "time": r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "date-time": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "duration": r"P([0-9]+Y)?([0-9]+M)?([0-9]+W)?([0-9]+D)?(T([0-9]+H)?([0-9]+M)?([0-9]+(\.[0-9]+)?S)?)?",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "ipv4": r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
    "email": r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*",
    "hostname": r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
}
_MAX_REPEAT = 4096  # the most a {m,n} bound may say (engines unroll repetition)

_BASE = {
    "ws": '("" | " " | "\\n" [ \\t]{0,20})',
    "char": '[^\\u0022\\u005C\\u0000-\\u001F] | "\\u005C" ([\\u0022\\u005C/bfnrt] | "u" [0-9a-fA-F]{4})',
    "string": '"\\u0022" char* "\\u0022"',
    "integer": '"-"? ("0" | [1-9] [0-9]{0,15})',
    "number": 'integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}"',
    "array": '"[" ws (value ws ("," ws value ws)*)? "]"',
}


class _Writer:
    def __init__(self, root: dict[str, Any], prefix: str, optional: bool = False) -> None:
        self.root = root
        self.prefix = prefix
        # Properties outside ``required`` may be left out (in declared order): MCP input schemas and
        # ``--constrain-function-arguments schema``, not the API's strict mode, which requires every one.
        self.optional = optional
        self.rules: dict[str, str] = {}
        self.refs: dict[str, str] = {}
        self.used_base: set[str] = set()

    def base(self, name: str) -> str:
        self.used_base.add(name)
        return self.prefix + name

    def new_rule(self, body: str) -> str:
        name = f"{self.prefix}s{len(self.rules)}"
        self.rules[name] = body
        return name

    def ref(self, ref: Any, path: tuple[str | int, ...]) -> str:
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith(("#/$defs/", "#/definitions/"))):
            raise UnsupportedGrammar(f"In context={path!r}, '$ref' must point into '$defs', got {ref!r}.")
        if ref not in self.refs:
            target: Any = self.root
            target_path: tuple[str | int, ...] = ()
            for part in ref[2:].split("/") if ref != "#" else ():
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, dict) else None
                target_path = (*target_path, part)
            if not isinstance(target, dict):
                raise UnsupportedGrammar(f"In context={path!r}, '$ref' {ref!r} points at nothing.")
            name = f"{self.prefix}s{len(self.rules)}"
            self.refs[ref] = name
            self.rules[name] = '""'  # reserved: a recursive reference finds the name before the body exists
            self.rules[name] = self.node(target, target_path)
        return self.refs[ref]

    def node(self, schema: Any, path: tuple[str | int, ...]) -> str:
        """An EBNF expression for one JSON value matching ``schema``."""
        if schema is True or schema == {}:
            return self.base("value")
        if not isinstance(schema, dict):
            raise UnsupportedGrammar(f"In context={path!r}, a schema must be an object.")
        for key in schema:
            if key not in _KNOWN and key not in _ANNOTATIONS:
                raise UnsupportedGrammar(
                    f"In context={path!r}, '{key}' is not supported by the grammar that constrains the arguments."
                )
        if "$ref" in schema:
            if set(schema) - _ANNOTATIONS - {"$ref", "$defs", "definitions"}:
                raise UnsupportedGrammar(f"In context={path!r}, '$ref' cannot be combined with other keywords.")
            return self.ref(schema["$ref"], path)
        if "const" in schema:
            return _json_literal(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise UnsupportedGrammar(f"In context={path!r}, 'enum' must be a non-empty array.")
            return "(" + " | ".join(_json_literal(v) for v in values) + ")"
        if "anyOf" in schema:
            options = schema["anyOf"]
            if not isinstance(options, list) or not options:
                raise UnsupportedGrammar(f"In context={path!r}, 'anyOf' must be a non-empty array.")
            return "(" + " | ".join(self.node(o, (*path, "anyOf", i)) for i, o in enumerate(options)) + ")"
        kind = schema.get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        if kind is None:
            if "properties" in schema:
                kinds = ["object"]
            elif "items" in schema:
                kinds = ["array"]
            else:
                return self.base("value")
        for k in kinds:
            if k not in _TYPES:
                raise UnsupportedGrammar(f"In context={path!r}, 'type' {k!r} is not a JSON Schema type.")
        alternatives = [self.typed(k, schema, path) for k in kinds]
        return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"

    def typed(self, kind: str, schema: dict[str, Any], path: tuple[str | int, ...]) -> str:
        if kind == "object":
            return self.object(schema, path)
        if kind == "array":
            return self.array(schema, path)
        if kind == "string":
            return self.string(schema, path)
        return self.base(kind)

    def object(self, schema: dict[str, Any], path: tuple[str | int, ...]) -> str:
        properties = schema.get("properties") or {}
        if not isinstance(properties, dict):
            raise UnsupportedGrammar(f"In context={path!r}, 'properties' must be an object.")
        required = schema.get("required") or []
        if schema.get("additionalProperties") is not False:
            raise UnsupportedGrammar(f"In context={path!r}, 'additionalProperties' is required to be false.")
        missing = [k for k in properties if k not in required]
        if missing and not self.optional:
            raise UnsupportedGrammar(f"In context={path!r}, every property must be required: '{missing[0]}' is not.")
        ws = self.base("ws")
        members = [
            f'{_json_literal(name)} {ws} ":" {ws} {self.node(sub, (*path, "properties", name))} {ws}'
            for name, sub in properties.items()
        ]
        if not members:
            return self.new_rule(f'"{{" {ws} "}}"')
        if not missing:
            return self.new_rule(f'"{{" {ws} ' + f' "," {ws} '.join(members) + ' "}"')
        return self.new_rule(f'"{{" {ws} {self.members(members, [k in required for k in properties])} "}}"')

    def members(self, members: list[str], required: list[bool]) -> str:
        """The members of an object whose optional ones may be left out, in declared order, commas between.

        ``first[i]`` writes at least one member from ``i`` on (skipping only optional ones), then every
        later required member and any later optional one: linear in rules, never an empty rule."""
        ws = self.base("ws")
        n = len(members)
        tails = ["" for _ in range(n + 1)]
        for i in range(n - 1, -1, -1):
            piece = f'"," {ws} {members[i]}'
            tails[i] = (piece if required[i] else f"({piece})?") + (" " + tails[i + 1] if tails[i + 1] else "")
        first = ""
        for i in range(n - 1, -1, -1):
            this = f"{members[i]} {tails[i + 1]}".strip()
            first = self.new_rule(this if required[i] or not first else f"{this} | {first}")
        return first if any(required) else f"({first})?"

    def array(self, schema: dict[str, Any], path: tuple[str | int, ...]) -> str:
        item = self.node(schema.get("items", True), (*path, "items"))
        low, high = _bounds(schema, "minItems", "maxItems", path)
        ws = self.base("ws")
        one = f"{item} {ws}"
        if high == 0:
            return self.new_rule(f'"[" {ws} "]"')
        more = _repeat(max(low - 1, 0), None if high is None else high - 1)
        body = f'"[" {ws} {one} ("," {ws} {one}){more} "]"'
        if low == 0:
            body = f'"[" {ws} ({one} ("," {ws} {one}){more})? "]"'
        return self.new_rule(body)

    def string(self, schema: dict[str, Any], path: tuple[str | int, ...]) -> str:
        pattern, fmt = schema.get("pattern"), schema.get("format")
        low, high = _bounds(schema, "minLength", "maxLength", path)
        if pattern is not None or fmt is not None:
            if (low, high) != (0, None) or (pattern is not None and fmt is not None):
                raise UnsupportedGrammar(
                    f"In context={path!r}, 'pattern', 'format' and a length bound cannot be combined."
                )
            if fmt is not None and fmt not in _FORMATS:
                raise UnsupportedGrammar(f"In context={path!r}, 'format' {fmt!r} is not supported.")
            regex = _FORMATS[fmt] if fmt is not None else _unanchored(pattern, path)
            try:
                body = _regex_body(regex)
            except UnsupportedGrammar as exc:
                raise UnsupportedGrammar(f"In context={path!r}, 'pattern' cannot be constrained: {exc}") from None
            return self.new_rule(f'"\\u0022" {body} "\\u0022"')
        if (low, high) == (0, None):
            return self.base("string")
        return self.new_rule(f'"\\u0022" {self.base("char")}{_repeat(low, high)} "\\u0022"')

    def grammar(self, any_object: bool = False) -> str:
        # The root by reference, so that a "$ref": "#" inside is the same rule.
        root = self.base("object") if any_object else self.ref("#", ())
        lines = [f"{self.prefix}root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        # The generic rules refer to one another (value → object → string ...): include what is reachable.
        needed = set(self.used_base)
        if needed & {"value", "object", "array"}:
            needed |= {"value", "object", "array", "string", "number", "integer", "boolean", "null", "ws", "char"}
        if "string" in needed:
            needed.add("char")
        if "number" in needed:
            needed.add("integer")
        base = _prefixed_base(self.prefix)
        lines += [f"{self.prefix}{name} ::= {base[name]}" for name in _BASE if name in needed]
        return "\n".join(lines) + "\n"


_KNOWN = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
        "pattern",
        "format",
        "minLength",
        "maxLength",
    }
)


@functools.lru_cache(maxsize=1024)
def _regex_body(regex: str) -> str:
    # The same formats and patterns recur across a request's tools (and requests): written out once.
    return _regex_ebnf(regex)


@functools.lru_cache(maxsize=256)
def _prefixed_base(prefix: str) -> dict[str, str]:
    """The generic rules' bodies with every rule they use under ``prefix`` (once per prefix)."""
    out = {}
    for name, body in _BASE.items():
        for other in _BASE:
            body = _rename(body, other, prefix + other)
        out[name] = body
    return out


def _rename(body: str, name: str, new: str) -> str:
    """``body`` with the rule ``name`` referred to as ``new`` (outside literals and classes)."""
    if name == new:
        return body
    out = []
    for piece in re.split(r'("(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\])', body):
        if piece.startswith(('"', "[")):
            out.append(piece)
        else:
            out.append(re.sub(rf"(?<![A-Za-z0-9\-]){re.escape(name)}(?![A-Za-z0-9\-])", new, piece))
    return "".join(out)


def _json_literal(value: Any) -> str:
    return _literal(orjson.dumps(value).decode())


def _bounds(schema: dict[str, Any], low_key: str, high_key: str, path: tuple[str | int, ...]) -> tuple[int, int | None]:
    low, high = schema.get(low_key, 0), schema.get(high_key)
    for key, value in ((low_key, low), (high_key, high)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise UnsupportedGrammar(f"In context={path!r}, '{key}' must be a non-negative integer.")
        if value is not None and value > _MAX_REPEAT:
            raise UnsupportedGrammar(f"In context={path!r}, '{key}' above {_MAX_REPEAT} cannot be constrained.")
    if high is not None and high < low:
        raise UnsupportedGrammar(f"In context={path!r}, '{high_key}' is below '{low_key}'.")
    return low, high


def _repeat(low: int, high: int | None) -> str:
    if high is None:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def _unanchored(pattern: Any, path: tuple[str | int, ...]) -> str:
    """A JSON Schema ``pattern`` (a search, not a full match) as a regex the whole string must match."""
    if not isinstance(pattern, str):
        raise UnsupportedGrammar(f"In context={path!r}, 'pattern' must be a string.")
    body = pattern
    start = body.startswith("^")
    end = body.endswith("$") and not body.endswith("\\$")
    body = body[1 if start else 0 : -1 if end else None]
    return ("" if start else "(?s:.)*") + f"(?:{body})" + ("" if end else "(?s:.)*")


@functools.lru_cache(maxsize=256)
def _cached(encoded: str, prefix: str, optional: bool = False) -> str:
    return _Writer(orjson.loads(encoded), prefix, optional).grammar()


def schema_grammar(encoded: str, prefix: str = "", *, optional: bool = False) -> str:
    """EBNF (rule ``{prefix}root``) for a JSON value matching the schema ``encoded`` (its JSON text); with
    ``optional``, properties outside ``required`` may be left out (else the schema must require them all).

    Raises ``UnsupportedGrammar`` (the message names where) for what the grammar cannot express."""
    try:
        return _cached(encoded, prefix, optional)
    except RecursionError:
        raise UnsupportedGrammar("the schema nests too deeply to be constrained.") from None


@functools.lru_cache(maxsize=16)
def object_grammar(prefix: str = "") -> str:
    """EBNF (rule ``{prefix}root``) for any one JSON object: what ``--constrain-function-arguments json``
    holds a function's arguments to."""
    return _Writer({}, prefix).grammar(any_object=True)


def schema_problem(schema: dict[str, Any], *, optional: bool = False) -> str | None:
    """Why ``schema`` cannot be held to a grammar (``optional`` as ``schema_grammar`` says), or None."""
    try:
        schema_grammar(orjson.dumps(schema).decode(), optional=optional)
    except UnsupportedGrammar as exc:
        return str(exc)
    return None
