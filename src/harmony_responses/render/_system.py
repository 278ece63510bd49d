"""The Harmony system message: identity, knowledge cutoff, date, reasoning effort, built-in tool namespaces.

Reasoning effort mapping (Harmony knows only low/medium/high; the API accepts more):
``none``/``minimal``/``low`` → low, ``medium`` → medium, ``high``/``xhigh``/``max`` → high; absent or null
``reasoning``/``effort`` → medium (harmony's default). gpt-oss always reasons, so ``none`` cannot switch
reasoning off; low is the closest the model offers.

All three channels stay declared even without tools: dropping ``commentary`` changed the model's rate of
malformed output (pitfalls E.64), and it carries preambles.
"""

from __future__ import annotations

import functools
from typing import Any

from openai_harmony import Message, ReasoningEffort, Role, SystemContent, ToolNamespaceConfig

from ._errors import RenderError
from ._file_search import FILE_SEARCH_NAMESPACE, file_search_namespace
from ._schema_ts import namespace_body
from ._tools import ToolSet

__all__ = ["DEFAULT_PYTHON_DESCRIPTION", "build_system_message", "reasoning_effort"]

_EFFORTS: dict[str, ReasoningEffort] = {
    "none": ReasoningEffort.LOW,
    "minimal": ReasoningEffort.LOW,
    "low": ReasoningEffort.LOW,
    "medium": ReasoningEffort.MEDIUM,
    "high": ReasoningEffort.HIGH,
    "xhigh": ReasoningEffort.HIGH,
    "max": ReasoningEffort.HIGH,
}

# Based on harmony's ToolNamespaceConfig.python() text, minus its claims we cannot make for every sandbox
# (a stateful Jupyter kernel, a 120 s timeout, /mnt/data, "Internet access ... UNKNOWN"). The server that
# runs the code knows those facts and can pass its own description to render_request.
DEFAULT_PYTHON_DESCRIPTION = (
    "Use this tool to execute Python code in your chain of thought. The code will not be shown to the user. "
    "This tool should be used for internal reasoning, but not for code that is intended to be visible to the "
    "user (e.g. when creating plots, tables, or files).\n"
    "\n"
    "When you send a message containing Python code to python, it will be executed in a sandbox, and python "
    "will respond with the output of the execution or time out. Use print statements to see values. Whether "
    "variables and files persist from one call to the next is decided by the server running the sandbox; "
    "unless earlier outputs in this conversation show that they persist, include all the code you need in "
    "every call. Do not assume internet access."
)


def reasoning_effort(reasoning: Any) -> ReasoningEffort:
    if reasoning is None:
        return ReasoningEffort.MEDIUM
    if not isinstance(reasoning, dict):
        raise RenderError("Invalid type for 'reasoning': expected an object.", param="reasoning", code="invalid_type")
    effort = reasoning.get("effort")
    if effort is None:
        return ReasoningEffort.MEDIUM
    if not isinstance(effort, str) or effort not in _EFFORTS:
        supported = ", ".join(f"'{e}'" for e in _EFFORTS)
        raise RenderError(f"Invalid value: '{effort}'. Supported values are: {supported}.", param="reasoning.effort")
    return _EFFORTS[effort]


@functools.cache
def _browser_namespace() -> ToolNamespaceConfig:
    return ToolNamespaceConfig.browser()


def build_system_message(
    *,
    effort: ReasoningEffort,
    tools: ToolSet,
    current_date: str,
    knowledge_cutoff: str,
    python_description: str | None,
) -> Message:
    content = (
        SystemContent.new()
        .with_reasoning_effort(effort)
        .with_knowledge_cutoff(knowledge_cutoff)
        .with_conversation_start_date(current_date)
    )
    if tools.browser:
        content = content.with_tools(_browser_namespace().model_copy(deep=True))
    if tools.python:
        content = content.with_tools(
            ToolNamespaceConfig(name="python", description=python_description or DEFAULT_PYTHON_DESCRIPTION, tools=[])
        )
    if tools.file_search:
        # Pre-rendered like an MCP server's namespace (namespace_body): a tool-less namespace prints it verbatim.
        content = content.with_tools(
            ToolNamespaceConfig(name=FILE_SEARCH_NAMESPACE, description=file_search_namespace(), tools=[])
        )
    for server in tools.mcp:
        if server.tools:
            # Pre-rendered: harmony prints a tool-less namespace's description verbatim (see namespace_body).
            description: str | None = namespace_body(server.label, server.description, server.tools)
        else:
            description = server.description
        content = content.with_tools(ToolNamespaceConfig(name=server.label, description=description, tools=[]))
    return Message.from_role_and_content(Role.SYSTEM, content)
