"""What an engine is sent to constrain a generation: the final answer's schema, tools' argument grammars.

Only parts of a completion are constrained, never the Harmony headers, the analysis or other tools' calls:

- the ``text.format`` JSON schema from the final channel's header on (engines.md §2.1);
- a custom tool's input (``ToolGrammar``) from the header of a call of that tool on: the model writes
  ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{"input": "…"}<|call|>`` (or the
  recipient before the channel), and what follows ``<|message|>`` is held to ``_grammar.input_grammar``;
- a strict function's arguments (``syntax="json_schema"``, in ``functions`` or a namespace ``N``: the call
  is ``to=N.NAME``) the same way, held to ``grammar.schema_grammar`` of its parameters; another
  function's (``syntax="json_object"``, ``--constrain-function-arguments json``) to one JSON object.

A call is recognised by ``to=NAMESPACE.NAME`` followed by what may follow a recipient in a header (a
space, ``<|channel|>``, ``<|constrain|>``, ``<|message|>``), so that a tool whose name begins another's is
not mistaken for it. A prompt that ends inside an assistant header (a forced ``tool_choice``: render's
prefill) has written part of that already: what is left is looked for, and a prefill that ends at
``<|message|>`` of a grammar tool's call constrains from the first generated token.

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
    if tool.syntax != "json_schema":
        return input_grammar(tool.syntax, tool.definition, prefix)
    try:
        return schema_grammar(tool.definition, prefix)
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


def structural_tag(request: GenerateRequest, *, final: bool = True, tools: bool = True) -> dict[str, Any] | None:
    """The xgrammar structural tag for ``request``: its schema (unless not ``final``) and its tools' grammars
    (unless not ``tools``); None for neither."""
    calls, inside = _calls(request, prefixed=False) if tools else ([], None)
    schema = request.response_schema if final else None
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
