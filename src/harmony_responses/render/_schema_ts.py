"""JSON Schema → Harmony's TypeScript-like tool declarations (``type f = (_: {...}) => any;``).

This module owns the text of every tool namespace we declare (function tools, Codex namespaces, MCP
servers). We render it ourselves instead of handing schemas to openai_harmony because harmony 0.0.8's
``json_schema_to_typescript`` is unfaithful on schemas real clients send:

- ``anyOf``, ``allOf``, ``$ref``/``$defs``, ``const`` become ``any`` (every Pydantic ``Optional[X]`` and
  nested model);
- enums are only rendered for ``type: "string"`` (integer enums and type-less enums become ``number``/
  ``any``), and a type array drops its enum;
- ``title`` is printed as ``// Title`` + ``//`` (Pydantic adds one to every property);
- an object's description is printed twice, once in the middle of the line (``a?:     // desc``), and
  a top-level one lands inside ``(_: // desc``;
- multi-line descriptions leave their second line uncommented;
- array items that are unions lose their precedence (``string | number[]``).

Everything harmony renders correctly is reproduced byte for byte (same layout, indentation and comment
placement; tests compare the two), so a schema harmony handles gives the tokens the gpt-oss reference and
vLLM give. The extensions follow the same style: ``anyOf`` renders like ``oneOf``, ``anyOf: [X, null]``
collapses to ``X | null``, ``$ref`` is inlined (a recursive reference is expanded at most
``MAX_REF_EXPANSIONS`` times, then ``any``), ``allOf`` is merged, ``const`` and non-string enums become
literals, ``title`` is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._text import compact_json, one_line, split_lines

__all__ = ["ToolSpec", "namespace_body", "schema_to_typescript"]

# How many times one $ref may be nested inside itself before we stop expanding it (recursive models).
MAX_REF_EXPANSIONS = 2
# Guards against schemas that explode when inlined (a $ref DAG doubling at each level) or nest absurdly.
MAX_NODES = 5000
MAX_DEPTH = 48

# Keys a referencing schema (or a parent of anyOf) keeps over the referenced one: annotations, not shape.
_ANNOTATIONS = ("description", "default", "examples", "title")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One declared tool: name, description and JSON Schema parameters (None: takes no arguments)."""

    name: str
    description: str
    parameters: Any = None


# --------------------------------------------------------------------------------------------------
# Normalisation: $ref, allOf, anyOf/oneOf → a schema the renderer reads without those keywords.
# --------------------------------------------------------------------------------------------------


class _Normalizer:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.nodes = 0

    def lookup(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return None  # remote references are never fetched
        node = self.root
        for raw in ref[1:].split("/"):
            if raw == "":
                continue
            key = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return None
        return node

    def norm(self, schema: Any, refs: tuple[str, ...], depth: int) -> Any:
        if not isinstance(schema, dict):
            return schema
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            return _annotations_only(schema)
        s = dict(schema)

        if "$ref" in s:
            ref = s.pop("$ref")
            target = None
            if isinstance(ref, str) and refs.count(ref) < MAX_REF_EXPANSIONS:
                target = self.lookup(ref)
            if not isinstance(target, dict):
                # Unresolvable, remote or too deeply recursive: keep the annotations, the type is `any`.
                return self.norm(s, refs, depth + 1) if s else {}
            merged = {**target, **s}
            return self.norm(merged, (*refs, ref), depth + 1)

        if isinstance(s.get("allOf"), list):
            parts = [self.norm(part, refs, depth + 1) for part in s.pop("allOf")]
            merged: dict[str, Any] = {}
            for part in [*parts, s]:
                if isinstance(part, dict):
                    _merge_into(merged, part)
            return self.norm(merged, refs, depth + 1)

        variants: list[Any] | None = None
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list):
                variants = (variants or []) + [self.norm(v, refs, depth + 1) for v in s.pop(key)]
        if variants is not None:
            non_null = [v for v in variants if not _is_null_schema(v)]
            has_null = len(non_null) < len(variants)
            if not non_null:
                return self.norm({**s, "type": "null"}, refs, depth + 1)
            if len(non_null) == 1:
                # Optional[X] (Pydantic) or a single-variant union: render X itself, plus `| null`.
                only = non_null[0] if isinstance(non_null[0], dict) else {}
                # The parent's annotations (its description, default) describe the property; they win.
                merged = {**only, **s}
                if has_null:
                    merged["nullable"] = True
                return self.norm(merged, refs, depth + 1)
            s["oneOf"] = non_null + ([{"type": "null"}] if has_null else [])

        props = s.get("properties")
        if isinstance(props, dict):
            s["properties"] = {k: self.norm(v, refs, depth + 1) for k, v in props.items()}
        items = s.get("items")
        if isinstance(items, dict):
            s["items"] = self.norm(items, refs, depth + 1)
        elif isinstance(items, list):
            # Tuple form: we cannot express positions in harmony's syntax; a union of the members is honest.
            s["items"] = self.norm({"anyOf": items}, refs, depth + 1) if items else {}
        extra = s.get("additionalProperties")
        if isinstance(extra, dict):
            s["additionalProperties"] = self.norm(extra, refs, depth + 1)
        return s


def _annotations_only(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: schema[k] for k in _ANNOTATIONS if k in schema}


def _merge_into(target: dict[str, Any], part: dict[str, Any]) -> None:
    for key, value in part.items():
        if key == "properties" and isinstance(value, dict) and isinstance(target.get(key), dict):
            target[key] = {**target[key], **value}
        elif key == "required" and isinstance(value, list) and isinstance(target.get(key), list):
            target[key] = target[key] + [r for r in value if r not in target[key]]
        else:
            target[key] = value


def _is_null_schema(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "null":
        return True
    if "const" in schema and schema["const"] is None:
        return True
    return schema.get("enum") == [None]


def normalize_schema(schema: Any) -> Any:
    """``schema`` with $refs inlined, allOf merged and anyOf/oneOf simplified (see the module docstring)."""
    return _Normalizer(schema).norm(schema, (), 0)


# --------------------------------------------------------------------------------------------------
# Rendering (mirrors harmony's json_schema_to_typescript layout).
# --------------------------------------------------------------------------------------------------


def _literal(value: Any) -> str:
    return compact_json(value)


def _is_enum(schema: dict[str, Any]) -> bool:
    enum = schema.get("enum")
    return isinstance(enum, list) and len(enum) > 0


def _default_text(schema: dict[str, Any]) -> str:
    default = schema["default"]
    # Harmony prints a string default of an enum bare (`default: celsius`) and other strings quoted.
    if isinstance(default, str) and _is_enum(schema):
        return one_line(default) or default
    return compact_json(default)


def _comment_lines(text: str, indent: str) -> str:
    return "".join(f"{indent}// {line}\n" for line in split_lines(text))


def _render(schema: Any, indent: str) -> tuple[str, bool]:
    """(TypeScript text, whether it is a top-level ``A | B`` union that needs parentheses in ``[]``)."""
    if schema is False:
        return "never", False
    if not isinstance(schema, dict):
        return "any", False
    if isinstance(schema.get("oneOf"), list):
        return _union_block(schema, indent), False
    text, is_union, has_null = _render_base(schema, indent)
    if schema.get("nullable") is True and not has_null:
        return f"{text} | null", True
    return text, is_union


def _render_base(schema: dict[str, Any], indent: str) -> tuple[str, bool, bool]:
    """(text, is a union, already includes null)."""
    if "const" in schema:
        return _literal(schema["const"]), False, schema["const"] is None
    if _is_enum(schema):
        values = schema["enum"]
        return " | ".join(_literal(v) for v in values), len(values) > 1, None in values
    kind = schema.get("type")
    if isinstance(kind, list):
        parts: list[str] = []
        for member in kind:
            if isinstance(member, str):
                text = _render_single(schema, member, indent)
                if text not in parts:
                    parts.append(text)
        if parts:
            return " | ".join(parts), len(parts) > 1, "null" in parts
        return "any", False, False
    if isinstance(kind, str):
        return _render_single(schema, kind, indent), False, kind == "null"
    if isinstance(schema.get("properties"), dict):
        return _render_object(schema, indent), False, False
    if "items" in schema:
        return _render_array(schema, indent), False, False
    return "any", False, False


def _render_single(schema: dict[str, Any], kind: str, indent: str) -> str:
    if kind == "object":
        return _render_object(schema, indent)
    if kind == "array":
        return _render_array(schema, indent)
    if kind in ("number", "integer"):
        return "number"
    if kind in ("string", "boolean", "null"):
        return kind
    return "any"


def _render_array(schema: dict[str, Any], indent: str) -> str:
    items = schema.get("items")
    if not isinstance(items, dict | bool):
        return "Array<any>"
    text, is_union = _render(items, indent)
    if text.startswith("\n"):
        return f"Array<{text}>"
    if is_union:
        return f"({text})[]"
    return f"{text}[]"


def _render_object(schema: dict[str, Any], indent: str) -> str:
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    if not props and isinstance(extra, dict):
        value, _ = _render(extra, indent)
        return f"Record<string, {value}>"
    out = ["{\n"]
    if isinstance(props, dict):
        required_raw = schema.get("required")
        required = {r for r in required_raw if isinstance(r, str)} if isinstance(required_raw, list) else set()
        for key, value in props.items():
            out.append(_render_property(str(key), value, key in required, indent))
    out.append(f"{indent}}}")
    return "".join(out)


def _render_property(key: str, schema: Any, required: bool, indent: str) -> str:
    mark = "" if required else "?"
    if not isinstance(schema, dict):
        text, _ = _render(schema, indent + "    ")
        return f"{indent}{key}{mark}: {text},\n"
    out: list[str] = []
    description = schema.get("description") if isinstance(schema.get("description"), str) else None
    variants = schema.get("oneOf") if isinstance(schema.get("oneOf"), list) else None
    if variants is None and description:
        out.append(_comment_lines(description, indent))
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        out.append(f"{indent}// Examples:\n")
        out.extend(f"{indent}// - {one_line(compact_json(example))}\n" for example in examples)
    if variants is not None:
        out.append(_render_union_property(key, mark, schema, variants, description, indent))
        return "".join(out)
    text, _ = _render(schema, indent + "    ")
    line = f"{indent}{key}{mark}: {text},"
    if "default" in schema:
        line += f" // default: {_default_text(schema)}"
    out.append(line + "\n")
    return "".join(out)


def _variant_comment(variant: Any, skip_description: bool, property_description: str | None) -> str:
    if not isinstance(variant, dict):
        return ""
    comments: list[str] = []
    description = variant.get("description")
    if not skip_description and isinstance(description, str) and description != property_description:
        comments.append(one_line(description))
    if "default" in variant:
        comments.append(f"default: {_default_text(variant)}")
    comments = [c for c in comments if c]
    return f" // {' '.join(comments)}" if comments else ""


def _render_union_property(
    key: str, mark: str, schema: dict[str, Any], variants: list[Any], description: str | None, indent: str
) -> str:
    out: list[str] = []
    first = variants[0] if variants else None
    first_description = first.get("description") if isinstance(first, dict) else None
    # Harmony's dedupe: a property description equal to the first variant's is printed once, never above.
    above = bool(description) and description != first_description
    if above and description:
        out.append(_comment_lines(description, indent))
    if "default" in schema:
        out.append(f"{indent}// default: {_default_text(schema)}\n")
    out.append(f"{indent}{key}{mark}:\n")
    for i, variant in enumerate(variants):
        text, _ = _render(variant, indent + "   ")
        out.append(f"{indent} | {text}{_variant_comment(variant, i == 0 and above, description)}\n")
    if schema.get("nullable") is True and not any(_is_null_schema(v) for v in variants):
        out.append(f"{indent} | null\n")
    out.append(f"{indent},\n")
    return "".join(out)


def _union_block(schema: dict[str, Any], indent: str) -> str:
    """A union outside a property (top level, array items, nested variant): harmony's ``\\n | A`` lines."""
    out: list[str] = []
    variants: list[Any] = schema["oneOf"]
    for variant in variants:
        text, _ = _render(variant, indent + "   ")
        out.append(f"\n{indent} | {text}{_variant_comment(variant, False, None)}")
    if schema.get("nullable") is True and not any(_is_null_schema(v) for v in variants):
        out.append(f"\n{indent} | null")
    return "".join(out)


def schema_to_typescript(schema: Any) -> str:
    """The parameter type of a tool, as in ``type f = (_: <this>) => any;``."""
    text, _ = _render(normalize_schema(schema), "")
    return text


def tool_declaration(tool: ToolSpec) -> list[str]:
    """The lines declaring one tool inside a namespace (description comments, then the type)."""
    lines = [f"// {line}" for line in split_lines(tool.description)]
    if tool.parameters is None:
        lines.append(f"type {tool.name} = () => any;")
    else:
        lines.extend(split_lines(f"type {tool.name} = (_: {schema_to_typescript(tool.parameters)}) => any;"))
    return lines


def namespace_body(name: str, description: str | None, tools: Sequence[ToolSpec]) -> str:
    """What harmony prints under ``## {name}`` for a namespace with tools, ready to pass as a description.

    A harmony namespace without tools prints its description verbatim, line by line; passing this text as
    the description of a tool-less ``ToolNamespaceConfig`` yields exactly harmony's layout for a
    namespace with tools, with our TypeScript inside.
    """
    lines = [f"// {line}" for line in split_lines(description or "")]
    lines.append(f"namespace {name} {{")
    lines.append("")
    for tool in tools:
        lines.extend(tool_declaration(tool))
        lines.append("")
    lines.append(f"}} // namespace {name}")
    return "\n".join(lines)
