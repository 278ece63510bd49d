"""Tools with grammars, shared by the tiers that constrain a call's input and the adapters' unit tests."""

from __future__ import annotations

import re
from typing import Any

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
APPLY_PATCH: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_LARK},
}
TICKET_RE = r"[A-Z]{2,4}-[0-9]{1,6}"
TICKET: dict[str, Any] = {
    "type": "custom",
    "name": "ticket",
    "description": "Open a ticket.",
    "format": {"type": "grammar", "syntax": "regex", "definition": TICKET_RE},
}
# Add-file hunks only: enough to tell a patch the grammar allows.
ADD_ONLY_PATCH = re.compile(r"\*\*\* Begin Patch\n(\*\*\* Add File: .+\n(\+.*\n)+)+\*\*\* End Patch\n?")
# A patch the grammar allows, with what JSON must escape (quotes, a tab, a backslash) and an empty line.
PATCH = '*** Begin Patch\n*** Add File: docs/a "b".txt\n+Hello\tworld \\o/\n+\n*** End Patch\n'
# Its added line lacks the "+": the grammar allows only "+" there.
PATCH_WITHOUT_PLUS = "*** Begin Patch\n*** Add File: a.txt\nhello\n*** End Patch\n"


def call(name: str, payload: str, analysis: str = "Calling it.") -> str:
    """What the model writes for a call of ``functions.name`` with ``payload`` (its JSON), after an analysis."""
    return (
        f"<|channel|>analysis<|message|>{analysis}<|end|><|start|>assistant"
        f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{payload}<|call|>"
    )


# The one function the declared-recipients tests declare: a script calling get_weather names a recipient
# that ``functions.get`` begins but that is not declared.
GET = {
    "type": "function",
    "name": "get",
    "description": "Look a thing up.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
