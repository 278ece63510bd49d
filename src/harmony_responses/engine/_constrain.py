"""What an engine is sent to constrain a generation: the final answer's schema, tools' argument grammars.

Only parts of a completion are constrained, never the Harmony headers, the analysis or other tools' calls:

- the ``text.format`` JSON schema from the final channel's header on (engines.md §2.1);
- a custom tool's input (``ToolGrammar``) from the header of a call of that tool on: the model writes
  ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{"input": "…"}<|call|>`` (or the
  recipient before the channel), and what follows ``<|message|>`` is held to ``_grammar.input_grammar``;
- a strict function's arguments (``syntax="json_schema"``, in ``functions`` or a namespace ``N``: the call
  is ``to=N.NAME``) the same way, held to ``grammar.schema_grammar`` of its parameters; another
  function's (``syntax="json_object"``, ``--constrain-function-arguments json``) to one JSON object; an
  MCP tool's (or, under ``--constrain-function-arguments schema``, a non-strict function's) schema whose
  optional properties may be left out (``syntax="json_schema_optional"``).

A call is recognised by ``to=NAMESPACE.NAME`` followed by what may follow a recipient in a header (a
space, ``<|channel|>``, ``<|constrain|>``, ``<|message|>``), so that a tool whose name begins another's is
not mistaken for it. A prompt that ends inside an assistant header (a forced ``tool_choice``: render's
prefill) has written part of that already: what is left is looked for, and a prefill that ends at
``<|message|>`` of a grammar tool's call constrains from the first generated token.

Declared recipients (``GenerateRequest.recipients``): when tools are declared, the ``to=`` of a header the
generation writes (after a channel's name, or after the role of a header it begins) is held to the declared
recipients followed by what may follow a recipient, and a grammar tool's arguments after it as above: one
grammar from ``to=`` on (``_recipient_calls``) replaces the per-tool triggers. Under ``tool_choice: "none"``
(``recipients == ()``) a header holds no ``to=`` at all. Not held: a recipient written without ``to=`` (a
bare ``functions.x`` word), and on vLLM/SGLang one in the role part of the generation's first header (the
prompt wrote the role; xgrammar's triggers cannot see it) and, under ``"none"`` with a ``text.format``
schema, the final channel's header (its own tag starts there).

``structural_tag`` is xgrammar's structural tag (vLLM's ``structured_outputs.structural_tag``, SGLang's
``sampling_params.structural_tag``; xgrammar 0.2.7/0.2.8): a ``triggered_tags`` format whose tags end
with ``""`` (see ``final_channel_tag``: xgrammar matches ``end`` as text), after which the text is free
again until the next trigger; ``<|call|>`` and ``<|return|>`` still end generation as stop tokens.
``lazy_grammar`` is llama.cpp's: one GBNF grammar, lazy, triggered by a pattern at the call's recipient;
once triggered it holds the rest of the generation, which ends with the call anyway.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from ..grammar import UnsupportedGrammar, input_grammar, object_grammar, schema_grammar
from ..vocab import load_vocabulary
from ._base import GenerateRequest, ToolGrammar

__all__ = ["final_channel_tag", "lazy_grammar", "structural_tag"]

_START = 200006
_AFTER_RECIPIENT = (" ", "<|channel|>", "<|constrain|>", "<|message|>")
_MESSAGE = "<|message|>"
# A recipient that the prompt's prefill has begun: " to=" or " to=functions." at its end.
_PARTIAL_RECIPIENT = re.compile(r"(?:^|[ >])(to=[A-Za-z0-9_.\-]*)$")
# llama-server reads a trigger's type as its enum's number (common_grammar_trigger_type): 2 is a regex.
_PATTERN = 2
_RECIPIENT_IN_HEADER = re.compile(r"to=([A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+)")
# Where a generated header names its recipient: after a channel's name, or after the role of a header (the
# generation's first header continues the prompt's "<|start|>assistant": llama.cpp's ^). xgrammar's triggers
# are strings: the channels' names spelled out.
_HEADER_STARTS = ("<|channel|>analysis", "<|channel|>commentary", "<|channel|>final", "<|start|>assistant")
_TO = " to="
_RECIPIENT_TRIGGER = r"(?:^|<\|channel\|>[A-Za-z]+|<\|start\|>assistant)( to=)"
# What follows a recipient up to <|message|>: nothing, or a space or a header token and then no other token
# (in xgrammar and GBNF alike: no empty literal).
_HEADER_RULES = (
    'header ::= ((" " | "<|channel|>" | "<|constrain|>") header-more*)?',
    'header-more ::= [^<] | "<|channel|>" | "<|constrain|>"',
)
# A header without a recipient (tool_choice "none"): content types after a space or <|constrain|>, none with
# "=" or "." and none beginning with "to" (so that " to", the recipient's first token, is masked outright).
_PLAIN_HEADER_RULES = (
    "plain-header ::= plain-more*",
    'plain-more ::= " " plain-word | " "? "<|constrain|>" [A-Za-z0-9_-]*',
    'plain-word ::= ([A-Za-su-z0-9_-] | "t" [A-Za-np-z0-9_-]) [A-Za-z0-9_-]*',
)
# A message body no grammar holds, up to the token that ends it (<|end|>, <|call|>: "<|" is no text).
_FREE_BODY = 'free-body ::= ([^<] | "<" [^|])*'


def final_channel_tag(schema: dict[str, Any]) -> dict[str, Any]:
    """A structural tag constraining only the final answer to ``schema`` (engines.md §2.1).

    Constraining the whole completion would also constrain the Harmony headers and the analysis; the
    tag starts at the final channel's header. Its ``end`` is empty: the grammar backends (xgrammar in
    vLLM and SGLang) match ``end`` as text, so ``"<|return|>"`` there made a grammar-following sampler
    spell those ten characters before it could stop; with no ``end`` the structure closes with the JSON
    value and the stop token ``<|return|>`` ends generation as usual.
    """
    return {
        "type": "structural_tag",
        "structures": [{"begin": "<|channel|>final<|message|>", "schema": schema, "end": ""}],
        "triggers": ["<|channel|>final"],
    }


@dataclass(frozen=True, slots=True)
class _Call:
    """A grammar tool's call as the generation may write it: ``rest`` (the recipient less what the prompt
    wrote), then a header up to ``<|message|>``, then the JSON ``grammar`` (its rules under ``prefix``)."""

    rest: str
    grammar: str
    prefix: str


@functools.lru_cache(maxsize=256)
def _tail(prompt_end: tuple[int, ...]) -> str:
    table = load_vocabulary().token_bytes
    return b"".join(table[t] for t in prompt_end).decode("utf-8", "replace")


def _prompt_tail(prompt_ids: list[int]) -> str:
    """The text of the prompt's last message header so far (after its ``<|start|>``)."""
    for i in range(len(prompt_ids) - 1, max(-1, len(prompt_ids) - 64), -1):
        if prompt_ids[i] == _START:
            return _tail(tuple(prompt_ids[i + 1 :]))
    return ""


def _tool_grammar(tool: ToolGrammar, prefix: str) -> str | None:
    """The EBNF (rule ``{prefix}root``) of what a call of ``tool`` writes after ``<|message|>``, or None."""
    if tool.syntax == "json_object":
        return object_grammar(prefix)
    if tool.syntax not in ("json_schema", "json_schema_optional"):
        return input_grammar(tool.syntax, tool.definition, prefix)
    try:
        return schema_grammar(tool.definition, prefix, optional=tool.syntax == "json_schema_optional")
    except UnsupportedGrammar:
        return None  # request validation refuses these schemas: only a non-strict one gets here


def _calls(request: GenerateRequest, prefixed: bool) -> tuple[list[_Call], _Call | None]:
    """(the grammar tools' calls the generation may begin, the call it is inside of from its start)."""
    if not request.tool_grammars:
        return [], None
    tail = _prompt_tail(request.prompt_ids)
    if _MESSAGE in tail:
        # The prompt ends inside a message body: a forced call of one tool, or no call at all.
        match = _RECIPIENT_IN_HEADER.search(tail)
        for tool in request.tool_grammars:
            if match and match[1] == f"{tool.namespace}.{tool.name}":
                grammar = _tool_grammar(tool, "")
                return [], _Call("", grammar, "") if grammar else None
        return [], None
    partial = _PARTIAL_RECIPIENT.search(tail)
    calls = []
    for i, tool in enumerate(request.tool_grammars):
        full = f"to={tool.namespace}.{tool.name}"
        written = partial[1] if partial else ""
        if not full.startswith(written) or full == written:
            continue  # the prefill names another recipient
        prefix = f"t{i}-" if prefixed else ""
        grammar = _tool_grammar(tool, prefix)
        if grammar is not None:
            calls.append(_Call(full[len(written) :], grammar, prefix))
    return calls, None


def _recipient_calls(request: GenerateRequest) -> tuple[list[_Call], bool]:
    """(a call of each declared recipient the generation may write, whether the prompt's prefill began the
    recipient): ``rest`` is what is left of ``to=RECIPIENT`` after the prefill, or the name after `` to=``;
    ``grammar`` is a grammar tool's arguments (rules under ``prefix``), "" for a body held to nothing."""
    tail = _prompt_tail(request.prompt_ids)
    partial = None if _MESSAGE in tail else _PARTIAL_RECIPIENT.search(tail)
    written = partial[1] if partial else ""
    tools = {f"{t.namespace}.{t.name}": t for t in request.tool_grammars}
    calls = []
    for i, recipient in enumerate(request.recipients or ()):
        full = f"to={recipient}"
        if partial and not full.startswith(written):
            continue  # the prefill names another recipient
        tool, prefix = tools.get(recipient), f"r{i}-"
        grammar = _tool_grammar(tool, prefix) if tool is not None else None
        calls.append(_Call(full[len(written) :] if partial else recipient, grammar or "", prefix))
    return calls, partial is not None


def _recipients_grammar(calls: list[_Call], *, body: bool) -> str:
    """EBNF whose ``recipients`` rule is one of ``calls``' recipients, its header and ``<|message|>``, then its
    arguments' grammar (or, when ``body``, the rest of the message: llama.cpp's grammar holds it to the end)."""
    lines = ["recipients ::= " + " | ".join(f"{call.prefix}call" for call in calls), *_HEADER_RULES]
    for call in calls:
        rest = f"{call.prefix}root" if call.grammar else "free-body" if body else ""
        lines.append(f'{call.prefix}call ::= {_gbnf_literal(call.rest)} header "<|message|>" {rest}'.rstrip())
        if call.grammar:
            lines.append(call.grammar.rstrip("\n"))
    if body:
        lines.append(_FREE_BODY)
    return "\n".join(lines) + "\n"


def _no_recipient_grammar() -> str:
    """EBNF of a whole generation whose headers name no recipient (``tool_choice: "none"``; llama.cpp)."""
    lines = [
        'root ::= message ("<|end|>" "<|start|>assistant" message)*',
        'message ::= "<|channel|>" [A-Za-z]+ plain-header "<|message|>" free-body',
        *_PLAIN_HEADER_RULES,
        _FREE_BODY,
    ]
    return "\n".join(lines) + "\n"


def _recipients_tag(request: GenerateRequest, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The structural tag holding headers' recipients to ``request.recipients`` (and the final answer to
    ``schema``); None when the prompt ends inside a message (``_calls`` holds that)."""
    if _MESSAGE in _prompt_tail(request.prompt_ids):
        return None
    triggers: list[str] = []
    tags: list[dict[str, Any]] = []
    if not request.recipients:
        # tool_choice "none": each channel's header up to <|message|> without a recipient.
        content = {"type": "grammar", "grammar": "root ::= plain-header\n" + "\n".join(_PLAIN_HEADER_RULES) + "\n"}
        for start in _HEADER_STARTS[:3]:
            if schema is not None and start == "<|channel|>final":
                continue  # the final answer's own tag starts there
            triggers.append(start)
            header = {"type": "tag", "begin": "", "content": content, "end": _MESSAGE}
            tags.append({"type": "tag", "begin": start, "content": header, "end": ""})
    else:
        calls, partial = _recipient_calls(request)
        if not calls:
            return None
        grammar = "root ::= recipients\n" + _recipients_grammar(calls, body=False)
        if partial:
            fmt = {"type": "sequence", "elements": [{"type": "grammar", "grammar": grammar}, {"type": "any_text"}]}
            return {"type": "structural_tag", "format": fmt}
        for start in _HEADER_STARTS:
            triggers.append(start + _TO)
            tags.append(
                {"type": "tag", "begin": start + _TO, "content": {"type": "grammar", "grammar": grammar}, "end": ""}
            )
    if schema is not None:
        triggers.append("<|channel|>final<|message|>")
        tags.append(
            {
                "type": "tag",
                "begin": "<|channel|>final<|message|>",
                "content": {"type": "json_schema", "json_schema": schema},
                "end": "",
            }
        )
    return {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": triggers, "tags": tags}}


def structural_tag(request: GenerateRequest, *, final: bool = True, tools: bool = True) -> dict[str, Any] | None:
    """The xgrammar structural tag for ``request``: its schema (unless not ``final``) and its tools' grammars
    (unless not ``tools``); None for neither."""
    calls, inside = _calls(request, prefixed=False) if tools else ([], None)
    schema = request.response_schema if final else None
    if tools and request.recipients is not None and inside is None:
        held = _recipients_tag(request, schema)
        if held is not None:
            return held
    if inside is not None:
        # Held to the grammar from the first token; free after it, where <|call|> ends the generation.
        fmt: dict[str, Any] = {
            "type": "sequence",
            "elements": [{"type": "grammar", "grammar": inside.grammar}, {"type": "any_text"}],
        }
        return {"type": "structural_tag", "format": fmt}
    if not calls:
        return final_channel_tag(schema) if schema is not None else None
    triggers: list[str] = []
    tags: list[dict[str, Any]] = []
    for call in calls:
        content = {"type": "grammar", "grammar": call.grammar}
        for after in _AFTER_RECIPIENT:
            begin = call.rest + after
            triggers.append(begin)
            if after == _MESSAGE:
                tags.append({"type": "tag", "begin": begin, "content": content, "end": ""})
            else:
                header = {"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": _MESSAGE}
                body = {"type": "sequence", "elements": [header, content]}
                tags.append({"type": "tag", "begin": begin, "content": body, "end": ""})
    if schema is not None:
        triggers.append("<|channel|>final")
        tags.append(
            {
                "type": "tag",
                "begin": "<|channel|>final<|message|>",
                "content": {"type": "json_schema", "json_schema": schema},
                "end": "",
            }
        )
    return {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": triggers, "tags": tags}}


def _gbnf_literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _ecma_escape(text: str) -> str:
    # llama.cpp compiles triggers with std::regex (ECMAScript): escape exactly its syntax characters.
    return re.sub(r"([\\^$.|?*+()\[\]{}/])", r"\\\1", text)


def lazy_grammar(request: GenerateRequest) -> dict[str, Any] | None:
    """llama-server's grammar fields for ``request``'s tool grammars (``grammar``, ``grammar_lazy``,
    ``grammar_triggers``); None when there is nothing to constrain. The schema is not constrained here."""
    calls, inside = _calls(request, prefixed=True)
    if inside is not None:
        return {"grammar": inside.grammar}
    if request.recipients is not None and _MESSAGE not in _prompt_tail(request.prompt_ids):
        return _lazy_recipients(request)
    if not calls:
        return None
    lines = ["root ::= " + " | ".join(f"{call.prefix}call" for call in calls)]
    # The rest of the header: nothing, or a space or a header token and then no other tokens.
    lines.append('header ::= "" | (" " | "<|channel|>" | "<|constrain|>") header-more*')
    lines.append('header-more ::= [^<] | "<|channel|>" | "<|constrain|>"')
    patterns = []
    for call in calls:
        lines.append(f'{call.prefix}call ::= {_gbnf_literal(call.rest)} header "<|message|>" {call.prefix}root')
        lines.append(call.grammar.rstrip("\n"))
        after = "|".join(_ecma_escape(a) for a in _AFTER_RECIPIENT)
        # The grammar sees the text from the first capture group on: the recipient.
        patterns.append({"type": _PATTERN, "value": f"({_ecma_escape(call.rest)})(?:{after})"})
    return {"grammar": "\n".join(lines) + "\n", "grammar_lazy": True, "grammar_triggers": patterns}


def _lazy_recipients(request: GenerateRequest) -> dict[str, Any] | None:
    """llama-server's grammar holding headers' recipients to ``request.recipients``: from a header's `` to=``
    (lazy) or, when the prefill began the recipient, from the first token; under ``tool_choice: "none"`` the
    whole generation, whose headers then name none."""
    if not request.recipients:
        return {"grammar": _no_recipient_grammar()}
    calls, partial = _recipient_calls(request)
    if not calls:
        return None
    if partial:
        return {"grammar": "root ::= recipients\n" + _recipients_grammar(calls, body=True)}
    # Triggered at " to=" after a channel's name or a role (or at the generation's start: the prompt's role);
    # whether llama.cpp feeds the grammar from the capture or from the header's start, the grammar reads both.
    root = 'root ::= header-start? " to=" recipients\nheader-start ::= "<|channel|>" [A-Za-z]+ | "<|start|>assistant"\n'
    trigger = {"type": _PATTERN, "value": _RECIPIENT_TRIGGER}
    return {
        "grammar": root + _recipients_grammar(calls, body=True),
        "grammar_lazy": True,
        "grammar_triggers": [trigger],
    }
