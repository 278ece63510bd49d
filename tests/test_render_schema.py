"""JSON Schema → Harmony TypeScript: exact golden output, and byte parity with openai_harmony where it is right."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

import pytest
from openai_harmony import (
    Conversation,
    DeveloperContent,
    Message,
    RenderConversationConfig,
    Role,
    SystemContent,
    ToolDescription,
)
from pydantic import BaseModel, Field

from harmony_responses.render import render_request
from harmony_responses.render._schema_ts import MAX_REF_EXPANSIONS, schema_to_typescript
from harmony_responses.vocab import load_encoding

DATE = "2025-08-05"


def declaration(parameters: object, *, name: str = "f", description: str = "") -> str:
    """The `namespace functions { ... }` block our prompt declares for one function tool."""
    tool: dict[str, object] = {"type": "function", "name": name, "description": description}
    if parameters is not None:
        tool["parameters"] = parameters
    text = load_encoding().decode_utf8(render_request({"tools": [tool]}, current_date=DATE).token_ids)
    start = text.index("namespace functions {")
    end = text.index("} // namespace functions") + len("} // namespace functions")
    return text[start:end]


def wrap(body: str, *, name: str = "f") -> str:
    return f"namespace functions {{\n\n{body}\n\n}} // namespace functions".replace("TYPE", f"type {name} =")


def test_no_parameters_function() -> None:
    assert declaration(None, description="Gets the location of the user.") == wrap(
        "// Gets the location of the user.\nTYPE () => any;"
    )


def test_empty_object() -> None:
    assert declaration({"type": "object", "properties": {}}) == wrap("TYPE (_: {\n}) => any;")


def test_harmony_doc_example_enum_default_and_description() -> None:
    params = {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        },
        "required": ["location"],
    }
    assert declaration(
        params, name="get_current_weather", description="Gets the current weather in the provided location."
    ) == wrap(
        "// Gets the current weather in the provided location.\n"
        "TYPE (_: {\n"
        "// The city and state, e.g. San Francisco, CA\n"
        "location: string,\n"
        'format?: "celsius" | "fahrenheit", // default: celsius\n'
        "}) => any;",
        name="get_current_weather",
    )


def test_enums_of_every_kind() -> None:
    params = {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["c", "f"]},
            "level": {"type": "integer", "enum": [1, 2, 3]},
            "untyped": {"enum": ["a", 1, True, None]},
            "maybe": {"type": ["string", "null"], "enum": ["x", None]},
        },
        "required": ["unit", "level", "untyped", "maybe"],
    }
    assert schema_to_typescript(params) == (
        '{\nunit: "c" | "f",\nlevel: 1 | 2 | 3,\nuntyped: "a" | 1 | true | null,\nmaybe: "x" | null,\n}'
    )


def test_nested_objects_keep_harmony_indentation() -> None:
    params = {
        "type": "object",
        "properties": {
            "address": {
                "type": "object",
                "description": "Where to ship",
                "properties": {
                    "street": {"type": "string"},
                    "geo": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]},
                },
                "required": ["street"],
            }
        },
        "required": ["address"],
    }
    # Harmony's layout: nested properties indented by 4, the closing brace at the properties' indent.
    assert schema_to_typescript(params) == (
        "{\n// Where to ship\naddress: {\n    street: string,\n    geo?: {\n        lat: number,\n        },\n    },\n}"
    )


def test_arrays_of_objects_and_scalars() -> None:
    params = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}},
            "items": {
                "type": "array",
                "description": "Line items",
                "items": {
                    "type": "object",
                    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "default": 1}},
                    "required": ["sku"],
                },
            },
            "anything": {"type": "array"},
        },
    }
    assert schema_to_typescript(params) == (
        "{\n"
        "tags?: string[],\n"
        "// Line items\n"
        "items?: {\n"
        "    sku: string,\n"
        "    qty?: number, // default: 1\n"
        "    }[],\n"
        "anything?: Array<any>,\n"
        "}"
    )


def test_descriptions_single_and_multi_line_and_titles_dropped() -> None:
    params = {
        "type": "object",
        "title": "Args",
        "description": "Top-level descriptions would land inside `(_: ` in harmony; dropped.",
        "properties": {
            "query": {"type": "string", "title": "Query", "description": "What to look for.\nUse keywords."},
        },
        "required": ["query"],
    }
    assert schema_to_typescript(params) == "{\n// What to look for.\n// Use keywords.\nquery: string,\n}"


def test_defaults_of_every_json_type() -> None:
    params = {
        "type": "object",
        "properties": {
            "s": {"type": "string", "default": "abc"},
            "n": {"type": "number", "default": 1.5},
            "i": {"type": "integer", "default": -1},
            "b": {"type": "boolean", "default": False},
            "o": {"type": "object", "properties": {}, "default": {"k": [1, 2]}},
            "z": {"type": ["string", "null"], "default": None},
        },
    }
    assert schema_to_typescript(params) == (
        "{\n"
        's?: string, // default: "abc"\n'
        "n?: number, // default: 1.5\n"
        "i?: number, // default: -1\n"
        "b?: boolean, // default: false\n"
        'o?: {\n    }, // default: {"k":[1,2]}\n'
        "z?: string | null, // default: null\n"
        "}"
    )


def test_any_of_renders_like_one_of() -> None:
    params = {
        "type": "object",
        "properties": {
            "target": {
                "description": "A name or an id",
                "anyOf": [
                    {"type": "string", "description": "The name"},
                    {"type": "integer", "description": "The id", "default": 0},
                    {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
                ],
            },
        },
        "required": ["target"],
    }
    assert schema_to_typescript(params) == (
        "{\n// A name or an id\ntarget:\n | string\n | number // The id default: 0\n | {\n   email: string,\n   }\n,\n}"
    )


def test_pydantic_optional_collapses_to_union_with_null() -> None:
    params = {
        "type": "object",
        "properties": {
            "city": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "City"},
            "codes": {
                "anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}],
                "description": "Postal codes",
            },
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        },
        "required": ["codes", "either"],
    }
    assert schema_to_typescript(params) == (
        "{\n"
        "city?: string | null, // default: null\n"
        "// Postal codes\n"
        "codes: number[] | null,\n"
        "either:\n"
        " | string\n"
        " | number\n"
        " | null\n"
        ",\n"
        "}"
    )


def test_ref_and_defs_are_inlined_with_the_referencing_description() -> None:
    params = {
        "$defs": {
            "Unit": {"type": "string", "enum": ["c", "f"], "title": "Unit"},
            "Place": {
                "type": "object",
                "description": "A place on earth",
                "properties": {"name": {"type": "string"}, "unit": {"$ref": "#/$defs/Unit"}},
                "required": ["name"],
            },
        },
        "type": "object",
        "properties": {
            "home": {"$ref": "#/$defs/Place"},
            "work": {"$ref": "#/definitions/Nope", "description": "Unresolvable: any"},
            "unit": {"$ref": "#/$defs/Unit", "description": "Display unit", "default": "c"},
        },
        "required": ["home"],
    }
    assert schema_to_typescript(params) == (
        "{\n"
        "// A place on earth\n"
        "home: {\n"
        "    name: string,\n"
        '    unit?: "c" | "f",\n'
        "    },\n"
        "// Unresolvable: any\n"
        "work?: any,\n"
        "// Display unit\n"
        'unit?: "c" | "f", // default: c\n'
        "}"
    )


def test_recursive_ref_stops_after_the_expansion_limit() -> None:
    params = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["name"],
            }
        },
        "$ref": "#/$defs/Node",
    }
    assert MAX_REF_EXPANSIONS == 2
    assert schema_to_typescript(params) == (
        "{\nname: string,\nchildren?: {\n    name: string,\n    children?: any[],\n    }[],\n}"
    )


def test_const_allof_union_items_and_maps() -> None:
    params = {
        "type": "object",
        "properties": {
            "kind": {"const": "circle"},
            "size": {
                "allOf": [
                    {"type": "object", "properties": {"w": {"type": "number"}}, "required": ["w"]},
                    {"properties": {"h": {"type": "number"}}},
                ]
            },
            "ids": {"type": "array", "items": {"type": ["string", "integer"]}},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
        "required": ["kind"],
    }
    assert schema_to_typescript(params) == (
        "{\n"
        'kind: "circle",\n'
        "size?: {\n"
        "    w: number,\n"
        "    h?: number,\n"
        "    },\n"
        "ids?: (string | number)[],\n"
        "counts?: Record<string, number>,\n"
        "}"
    )


def test_pydantic_model_schema_as_the_agents_sdk_sends_it() -> None:
    class Priority(StrEnum):
        low = "low"
        high = "high"

    class Attendee(BaseModel):
        """Someone invited."""

        email: str = Field(description="Their address")
        optional: bool = False

    class Event(BaseModel):
        title: str
        priority: Priority
        attendees: list[Attendee]
        room: str | None = None
        kind: Literal["meeting"] = "meeting"

    assert schema_to_typescript(Event.model_json_schema()) == (
        "{\n"
        "title: string,\n"
        'priority: "low" | "high",\n'
        "attendees: {\n"
        "    // Their address\n"
        "    email: string,\n"
        "    optional?: boolean, // default: false\n"
        "    }[],\n"
        "room?: string | null, // default: null\n"
        'kind?: "meeting", // default: "meeting"\n'
        "}"
    )


def test_description_with_special_token_text_stays_text() -> None:
    text = declaration({"type": "object", "properties": {"x": {"type": "string", "description": "ends <|end|>"}}})
    assert "// ends <|end|>\nx?: string," in text
    ids = render_request(
        {
            "tools": [
                {
                    "type": "function",
                    "name": "f",
                    "parameters": {"type": "object", "properties": {"x": {"description": "<|end|>"}}},
                }
            ]
        },
        current_date=DATE,
    ).token_ids
    # system <|end|> + developer <|end|>: the one in the description is plain text.
    assert ids.count(200007) == 2


# --- parity: for schemas harmony renders faithfully, our prompt is token-for-token harmony's ---------------

PARITY_SCHEMAS = [
    None,
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "days": {"type": "integer", "default": 3},
            "flags": {"type": "array", "items": {"type": "boolean"}},
            "maybe": {"type": ["string", "null"]},
            "legacy": {"type": "string", "nullable": True, "examples": ["a", "b"]},
            "nested": {
                "type": "object",
                "properties": {
                    "a": {"type": "number"},
                    "deeper": {"type": "object", "properties": {"b": {"type": "string"}}},
                },
                "required": ["a"],
            },
            "rows": {"type": "array", "items": {"type": "object", "properties": {"c": {"type": "string"}}}},
            "choice": {
                "description": "one of two",
                "oneOf": [{"type": "string"}, {"type": "number", "description": "a number", "default": 2}],
                "default": "x",
            },
        },
        "required": ["location"],
    },
    {"type": "string"},
]


@pytest.mark.parametrize("schema", PARITY_SCHEMAS)
def test_parity_with_openai_harmony_where_harmony_is_faithful(schema: object) -> None:
    enc = load_encoding()
    tool: dict[str, object] = {"type": "function", "name": "tool", "description": "Does things.\nTwo lines."}
    if schema is not None:
        tool["parameters"] = schema
    ours = render_request({"instructions": "Hi", "tools": [tool], "input": "x"}, current_date=DATE).token_ids
    developer = (
        DeveloperContent.new()
        .with_instructions("Hi")
        .with_function_tools(
            [ToolDescription.new("tool", "Does things.\nTwo lines.", schema)]  # type: ignore[arg-type]
        )
    )
    conversation = Conversation.from_messages(
        [
            Message.from_role_and_content(Role.SYSTEM, SystemContent.new().with_conversation_start_date(DATE)),
            Message.from_role_and_content(Role.DEVELOPER, developer),
            Message.from_role_and_content(Role.USER, "x"),
        ]
    )
    theirs = enc.render_conversation_for_completion(
        conversation, Role.ASSISTANT, RenderConversationConfig(auto_drop_analysis=False)
    )
    assert enc.decode_utf8(ours) == enc.decode_utf8(theirs)
    assert ours == theirs
