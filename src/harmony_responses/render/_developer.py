"""The Harmony developer message: ``# Instructions``, ``# Tools`` (functions and namespaces), ``# Response Formats``.

Instructions are the request's ``instructions`` followed by the text of every ``system``/``developer``
input message, in order, separated by a blank line; they render whether or not tools exist (pitfalls
E.50). ``# Response Formats`` (text.format json_schema / json_object) follows ``# Tools``; harmony has no
builder for it, so it is a text content after the DeveloperContent. The message is omitted when empty.
"""

from __future__ import annotations

import re
from typing import Any

from openai_harmony import Author, Content, DeveloperContent, Message, Role, TextContent, ToolNamespaceConfig

from ._errors import RenderError
from ._history import message_text
from ._schema_ts import namespace_body
from ._text import compact_json, split_lines
from ._tools import ToolSet

__all__ = ["build_developer_message", "instructions_text"]

_FORMAT_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# json_object mode has no schema; this one says "some JSON object" in the same section layout.
_JSON_OBJECT_SECTION = "## json_object\n\n// Respond with a single JSON object.\n" + compact_json({"type": "object"})


def instructions_text(instructions: Any) -> str:
    """The ``instructions`` field as text: a string, or the text of a list of input messages."""
    if instructions is None:
        return ""
    if isinstance(instructions, str):
        return instructions
    if not isinstance(instructions, list):
        raise RenderError(
            "Invalid type for 'instructions': expected a string or an array of input items.",
            param="instructions",
            code="invalid_type",
        )
    texts: list[str] = []
    for i, item in enumerate(instructions):
        where = f"instructions[{i}]"
        if not isinstance(item, dict) or item.get("type", "message") != "message" or "content" not in item:
            raise RenderError(f"Invalid value for '{where}': instructions items must be messages.", param=where)
        text = message_text(item.get("content"), where, role=item.get("role"))
        if text:
            texts.append(text)
    return "\n\n".join(texts)


def _response_format_section(text: Any) -> str:
    if text is None:
        return ""
    if not isinstance(text, dict):
        raise RenderError("Invalid type for 'text': expected an object.", param="text", code="invalid_type")
    fmt = text.get("format")
    if fmt is None:
        return ""
    if not isinstance(fmt, dict):
        raise RenderError(
            "Invalid type for 'text.format': expected an object.", param="text.format", code="invalid_type"
        )
    kind = fmt.get("type")
    if kind == "text":
        return ""
    if kind == "json_object":
        return _JSON_OBJECT_SECTION
    if kind == "json_schema":
        name = fmt.get("name")
        if name is None:
            raise RenderError(
                "Missing required parameter: 'text.format.name'.",
                param="text.format.name",
                code="missing_required_parameter",
            )
        if not isinstance(name, str) or not _FORMAT_NAME.match(name):
            raise RenderError(
                "Invalid 'text.format.name': string does not match pattern. Expected a string that matches the "
                "pattern '^[a-zA-Z0-9_-]{1,64}$'.",
                param="text.format.name",
            )
        schema = fmt.get("schema")
        if schema is None:
            raise RenderError(
                "Missing required parameter: 'text.format.schema'.",
                param="text.format.schema",
                code="missing_required_parameter",
            )
        if not isinstance(schema, dict):
            raise RenderError(
                "Invalid type for 'text.format.schema': expected a JSON Schema object.",
                param="text.format.schema",
                code="invalid_type",
            )
        description = fmt.get("description")
        comment = ""
        if isinstance(description, str) and description:
            comment = "".join(f"// {line}\n" for line in split_lines(description))
        return f"## {name}\n\n{comment}{compact_json(schema)}"
    raise RenderError(
        f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and 'json_schema'.",
        param="text.format.type",
    )


def build_developer_message(*, instructions: str, tools: ToolSet, text: Any) -> Message | None:
    formats = _response_format_section(text)
    content = DeveloperContent.new()
    if instructions:
        content = content.with_instructions(instructions)
    namespaces: list[ToolNamespaceConfig] = []
    if tools.functions:
        namespaces.append(
            ToolNamespaceConfig(
                name="functions", description=namespace_body("functions", None, tools.functions), tools=[]
            )
        )
    for name, (description, specs) in tools.namespaces.items():
        namespaces.append(
            ToolNamespaceConfig(name=name, description=namespace_body(name, description, specs), tools=[])
        )
    for namespace in namespaces:
        # Pre-rendered bodies (see namespace_body): harmony adds the `# Tools` / `## name` framing and sorts.
        content = content.with_tools(namespace)
    contents: list[Content] = []
    if instructions or namespaces:
        contents.append(content)
    if formats:
        prefix = "\n\n" if contents else ""
        contents.append(TextContent(text=f"{prefix}# Response Formats\n\n{formats}"))
    if not contents:
        return None
    return Message(author=Author(role=Role.DEVELOPER), content=contents)
