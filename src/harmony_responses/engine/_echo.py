"""The ``echo`` engine: a deterministic stand-in model, so that a fresh install answers any client at once.

It is not a model. It reads the prompt's Harmony structure and writes valid Harmony back:

- a plain prompt (ending ``<|start|>assistant``): a short analysis message, then a final answer quoting
  the last user message, ``You said: {text}``;
- when the last message is a tool result (``<|start|>functions.x to=assistant…<|end|>``): the same, but
  the answer quotes the tool's output;
- a forced call prefilled up to ``<|message|>`` (named ``tool_choice``): ``{}<|call|>``;
- a forced call prefilled up to ``to=functions.`` (``tool_choice: required``): the first function the
  prompt declares in that namespace, then `` <|constrain|>json<|message|>{}<|call|>``;
- in both, a strict function's arguments are instead the smallest its schema allows (the first of each
  enum and ``anyOf``, ``""``, ``0``, ``false``, ``[]``), so that a strict call passes the run's check of
  strict arguments (run/loop.py) where the schema makes that easy (not under ``pattern`` or ``format``);
- a prefilled final (or analysis) header: the answer, finishing the message it is in.

Anything else (the prompt does not end inside an assistant message) ends the stream with an error
saying so. Quoted text is copied as token ids, never re-encoded, so that text which looks like a
special token cannot turn into one.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..offload import offload
from ..vocab import load_encoding
from ._base import Engine, EngineStream, GenerateRequest
from ._play import play

__all__ = ["EchoEngine"]

_START, _END, _MESSAGE, _CALL, _RETURN = 200006, 200007, 200008, 200012, 200002
# Prompts longer than this are read in a worker thread.
INLINE_PROMPT_TOKENS = 20_000

_FINAL_HEADER = "<|start|>assistant<|channel|>final<|message|>"
_ANALYSIS_USER = "The user wrote a message; I will echo it back."
_ROLES = frozenset({"user", "assistant", "system", "developer"})

# A ``tool_choice: required`` prefill: the recipient's namespace is given, the function name is not.
_NAMESPACE_PREFIX = re.compile(r"assistant<\|channel\|>\w+ to=([^\s<]+)\.")
_TOOL_AUTHOR = re.compile(r"([^\s<]+) to=assistant\b")
_CHANNEL = re.compile(r"<\|channel\|>(\w+)")
_FUNCTION = re.compile(r"^type ([^\s=<]+) =", re.MULTILINE)
_RECIPIENT = re.compile(r" to=([^\s<]+)")


@dataclass(slots=True)
class _Message:
    header: list[int]
    content: list[int] | None = None  # None while the header is still open
    closed: bool = False
    text_header: str = ""


def _split_messages(ids: Sequence[int]) -> list[_Message]:
    """The prompt's messages as token ids; the last one may be open (the part the model continues)."""
    messages: list[_Message] = []
    current: _Message | None = None
    for token in ids:
        if token == _START:
            current = _Message(header=[])
            messages.append(current)
        elif current is None or current.closed:
            continue  # stray tokens between messages: not ours to judge
        elif current.content is None:
            if token == _MESSAGE:
                current.content = []
            else:
                current.header.append(token)
        elif token in (_END, _CALL, _RETURN):
            current.closed = True
        else:
            current.content.append(token)
    decode = load_encoding().decode
    for message in messages:
        message.text_header = decode(message.header)
    return messages


def _encode(text: str) -> list[int]:
    # Only for this module's own strings, where special tokens are meant literally.
    return load_encoding().encode(text, allowed_special="all")


def _answer(history: list[_Message]) -> tuple[str, list[int]]:
    """The analysis text and the final answer's ids for a prompt whose history is ``history``."""
    last = history[-1] if history else None
    if last is not None and last.closed:
        author = _TOOL_AUTHOR.match(last.text_header)
        if author and author[1] not in _ROLES:
            return (
                f"The tool {author[1]} returned a result; I will quote it.",
                _encode(f"The tool {author[1]} returned: ") + (last.content or []),
            )
    for message in reversed(history):
        if message.text_header == "user" and message.closed:
            if not message.content:
                return _ANALYSIS_USER, _encode("You sent an empty message.")
            return _ANALYSIS_USER, _encode("You said: ") + message.content
    return "There is no user message; I will say so.", _encode("There is no user message to echo.")


def _first_function(history: list[_Message], namespace: str) -> str | None:
    opening = f"namespace {namespace} {{"
    closing = f"}} // namespace {namespace}"
    decode = load_encoding().decode
    for message in history:
        if message.text_header not in ("developer", "system") or not message.content:
            continue
        text = decode(message.content)
        begin = text.find(opening)
        if begin < 0:
            continue
        end = text.find(closing, begin)
        found = _FUNCTION.search(text, begin, end if end >= 0 else len(text))
        if found:
            return found[1]
    return None


def _smallest(schema: Any, root: Any, depth: int = 0) -> Any:
    """The smallest JSON value ``schema`` allows, as far as that is easy to tell (see the docstring)."""
    if not isinstance(schema, dict) or depth > 32:
        return {}
    if "$ref" in schema:
        target: Any = root
        for part in str(schema["$ref"]).lstrip("#").strip("/").split("/"):
            target = target.get(part, {}) if part and isinstance(target, dict) else target
        return _smallest(target, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("anyOf"):
        return _smallest(schema["anyOf"][0], root, depth + 1)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or "properties" in schema:
        return {k: _smallest(v, root, depth + 1) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [_smallest(schema.get("items"), root, depth + 1)] * int(schema.get("minItems", 0))
    defaults: dict[Any, Any] = {"string": "a" * int(schema.get("minLength", 0)), "integer": 0, "number": 0}
    return defaults.get(kind, False if kind == "boolean" else None)


def _arguments(recipient: str, strict: dict[str, str]) -> str:
    schema = strict.get(recipient)
    if schema is None:
        return "{}"
    root = json.loads(schema)
    return json.dumps(_smallest(root, root))


def continue_prompt(prompt_ids: Sequence[int], strict: dict[str, str] | None = None) -> list[int] | str:
    """What the echo engine writes after ``prompt_ids``: token ids, or a message saying why it can't.

    ``strict`` maps a strict function's recipient (``functions.NAME``) to its parameters' JSON schema text."""
    strict = strict or {}
    messages = _split_messages(prompt_ids)
    if not messages or messages[-1].closed or not messages[-1].text_header.startswith("assistant"):
        return "the prompt does not end with an assistant message to continue (<|start|>assistant)"
    tail, history = messages[-1], messages[:-1]
    header = tail.text_header

    if tail.content is None:
        if header == "assistant":
            analysis, answer = _answer(history)
            prefix = f"<|channel|>analysis<|message|>{analysis}<|end|>"
            return _encode(prefix + _FINAL_HEADER) + answer + [_RETURN]
        prefilled = _NAMESPACE_PREFIX.fullmatch(header)
        if prefilled:
            namespace = prefilled[1]
            name = _first_function(history, namespace)
            if name is None:
                return f"the prompt forces a call into namespace {namespace!r} but declares no function in it"
            arguments = _arguments(f"{namespace}.{name}", strict)
            return _encode(f"{name} <|constrain|>json<|message|>{arguments}<|call|>")
    elif " to=" in header:
        recipient = _RECIPIENT.search(header)
        arguments = _arguments(recipient[1] if recipient else "", strict)
        return _encode(f"{arguments}<|call|>") if not tail.content else [_CALL]
    else:
        channel = _CHANNEL.search(header)
        analysis, answer = _answer(history)
        if channel is None or channel[1] == "final":
            return answer + [_RETURN]
        return _encode(f"{analysis}<|end|>{_FINAL_HEADER}") + answer + [_RETURN]
    return f"cannot continue a prompt that ends with '<|start|>{header}'"


class EchoEngine(Engine):
    """A stand-in that echoes the last user message (or tool output) back as valid Harmony.

    It streams one token per chunk without delay, honours ``max_tokens`` and the stop ids, and returns
    deterministic fake logprobs when asked for them (see ``fake_logprobs``).
    """

    name = "echo"

    def generate(self, request: GenerateRequest) -> EngineStream:
        return self._generate(request)

    async def _generate(self, request: GenerateRequest) -> EngineStream:
        strict = {f"{t.namespace}.{t.name}": t.definition for t in request.tool_grammars if t.syntax == "json_schema"}
        if len(request.prompt_ids) > INLINE_PROMPT_TOKENS:
            # Reading a long prompt takes milliseconds per thousand messages: not on the event loop, which
            # every other stream shares (a real engine does this work in its own process).
            continuation = await offload(continue_prompt, request.prompt_ids, strict)
        else:
            continuation = continue_prompt(request.prompt_ids, strict)
        if isinstance(continuation, str):
            stream = play((), request, finish="error", message=f"echo engine: {continuation}")
        else:
            stream = play(continuation, request, finish="stop")
        async with contextlib.aclosing(stream):
            async for item in stream:
                yield item

    def describe(self) -> str:
        return (
            "echo: a stand-in that echoes the last user message back as valid Harmony; "
            "it is not a language model (choose a real engine with --engine)"
        )
