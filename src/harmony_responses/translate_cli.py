"""``harmony-responses translate``: print the Responses events for one Harmony completion.

Reads what a model generated after the prompt's trailing ``<|start|>assistant`` (special tokens written
literally, or ``--tokens`` for a JSON array of ids), feeds it through the same Translator the server uses and
prints every event from ``response.created`` to the terminal event. This is the tool for debugging a model's
output, so bad input gets a one-line message and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import orjson

from .ids import counting_ids, random_id
from .sse import encode_event
from .tokens import FinishReason
from .translate import AWAIT_TOOL, RecipientMap, Translator
from .vocab import VOCAB_SIZE, load_encoding, load_vocabulary

_STOP_TOKENS = (200002, 200012)  # <|return|>, <|call|>


class InputError(Exception):
    """Bad input from the user: reported in one line, exit status 2."""


def add_translate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="the completion to read (default: standard input)")
    parser.add_argument("--tokens", action="store_true", help="the input is a JSON array of token ids, not text")
    parser.add_argument("--chunk", type=int, default=1, metavar="N", help="feed N tokens at a time (default 1)")
    parser.add_argument(
        "--finish",
        choices=("stop", "length", "error"),
        help="how generation ended (default: stop if the input ends with <|return|> or <|call|>, else length)",
    )
    parser.add_argument("--error-message", default="engine error", help="the engine's message with --finish error")
    parser.add_argument(
        "--tools",
        metavar="JSON",
        help="the request's tools array (JSON, or @FILE), so built-in and MCP recipients map to their items",
    )
    parser.add_argument(
        "--summaries",
        action="store_true",
        help="as for a request with reasoning.summary: reasoning streams as its summary (gpt-oss writes none)",
    )
    parser.add_argument("--format", choices=("sse", "jsonl"), default="sse", help="output format (default sse)")
    parser.add_argument(
        "--stable-ids", action="store_true", help="number ids (msg_1, rs_2, …) and fix the clock, for diffs"
    )
    parser.set_defaults(handler=run_translate)


def _read_input(args: argparse.Namespace) -> str:
    if args.file in (None, "-"):
        return sys.stdin.read()
    try:
        with open(args.file, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise InputError(f"cannot read {args.file}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{args.file} is not UTF-8 text: {exc}") from None


def _token_ids(raw: str, as_tokens: bool) -> list[int]:
    if not as_tokens:
        # A trailing newline is the file's, not the model's.
        return load_encoding().encode(raw.rstrip("\n"), allowed_special="all")
    try:
        ids = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"--tokens expects a JSON array of token ids: {exc}") from None
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InputError("--tokens expects a JSON array of integers, e.g. [200005, 17196, 200008]")
    bad = [i for i in ids if not 0 <= i < VOCAB_SIZE]
    if bad:
        raise InputError(f"token id {bad[0]} is outside the Harmony vocabulary (0..{VOCAB_SIZE - 1})")
    return ids


def _tools(spec: str | None) -> list[dict[str, Any]]:
    if spec is None:
        return []
    if spec.startswith("@"):
        try:
            with open(spec[1:], encoding="utf-8") as f:
                spec = f.read()
        except OSError as exc:
            raise InputError(f"cannot read {spec[1:]}: {exc.strerror}") from None
    try:
        tools = orjson.loads(spec)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"--tools expects a JSON array of tools: {exc}") from None
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("type"), str) for t in tools):
        raise InputError('--tools expects a JSON array of tool objects, e.g. [{"type": "code_interpreter"}]')
    return tools


def translate_tokens(
    token_ids: list[int],
    *,
    chunk: int,
    finish: FinishReason,
    error_message: str,
    tools: list[dict[str, Any]],
    stable_ids: bool,
    summaries: bool = False,
) -> tuple[list[dict[str, Any]], list[str]]:
    """All events for one completion, and notes for the user (tool calls that were not run)."""
    translator = Translator(
        vocab=load_vocabulary(),
        new_id=counting_ids() if stable_ids else random_id,
        clock=(lambda: 0) if stable_ids else (lambda: int(time.time())),
        recipients=RecipientMap.from_tools(tools),
        summaries=summaries,
    )
    events: list[dict[str, Any]] = []
    notes: list[str] = []
    for start in range(0, len(token_ids), chunk):
        translator.receive_tokens(token_ids[start : start + chunk])
        events.extend(translator.events())
    translator.receive_end(finish, error_message if finish == "error" else None)
    events.extend(translator.events())
    if translator.next_event() is AWAIT_TOOL:
        call = translator.pending_tool_call
        assert call is not None
        notes.append(f"the model called {call.kind.value} {call.name!r}; translate does not run tools")
        translator.send_tool_result(error="not executed: harmony-responses translate does not run tools")
        translator.receive_end("stop")
        events.extend(translator.events())
    return events, notes


def run_translate(args: argparse.Namespace) -> int:
    try:
        if args.chunk < 1:
            raise InputError("--chunk must be at least 1")
        token_ids = _token_ids(_read_input(args), args.tokens)
        tools = _tools(args.tools)
    except InputError as exc:
        print(f"harmony-responses translate: {exc}", file=sys.stderr)
        return 2
    finish: FinishReason = args.finish or ("stop" if token_ids and token_ids[-1] in _STOP_TOKENS else "length")
    events, notes = translate_tokens(
        token_ids,
        chunk=args.chunk,
        finish=finish,
        error_message=args.error_message,
        tools=tools,
        stable_ids=args.stable_ids,
        summaries=args.summaries,
    )
    out = sys.stdout.buffer
    for event in events:
        out.write(encode_event(event) if args.format == "sse" else orjson.dumps(event) + b"\n")
    out.flush()
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
