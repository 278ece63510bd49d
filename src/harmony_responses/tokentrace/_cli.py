"""``harmony-responses trace``: a response's trace page, from a server or from a ``--record`` recording.

``trace ID`` reads ``GET /v1/responses/ID/trace?format=json`` from the server (``--url``, ``--api-key``),
renders the page here (the same page the server serves) and writes it to ``--output`` or a temporary file,
which it opens in the browser unless ``--no-open``. ``trace --record PATH`` instead traces one engine call
of a recording (``serve --record``; ``--line N``, default the last): its tokens, in the engine's chunks,
through the server's translator. A recording holds no prompt ids, no times and no tool results, so the
page shows none (a built-in call is noted as not run). Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import webbrowser
from pathlib import Path
from typing import Any

import orjson

from ._page import render_page
from ._recorder import Recorder

DEFAULT_URL = "http://127.0.0.1:8400"


class TraceInputError(Exception):
    """Reported in one line, exit status 2."""


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("response_id", nargs="?", metavar="ID", help="the response whose trace to show (resp_…)")
    parser.add_argument(
        "--url",
        default=os.environ.get("HARMONY_RESPONSES_URL") or DEFAULT_URL,
        help=f"the server (default: $HARMONY_RESPONSES_URL or {DEFAULT_URL})",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("HARMONY_API_KEY"),
        metavar="KEY",
        help="its API key (default: $HARMONY_API_KEY)",
    )
    parser.add_argument("--record", metavar="PATH", help="trace an engine call of this recording (serve --record)")
    parser.add_argument("--line", type=int, default=0, metavar="N", help="which call of the recording (default: last)")
    parser.add_argument(
        "--tools", metavar="JSON", help="with --record: the request's tools array (JSON, or @FILE), as for translate"
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write the page (or --json) here, and do not open it")
    parser.add_argument("--json", action="store_true", help="write the trace's JSON instead of the page")
    parser.add_argument("--no-open", action="store_true", help="do not open the page in a browser")
    parser.set_defaults(handler=run_trace)


def fetch_trace(url: str, response_id: str, api_key: str | None) -> dict[str, Any]:
    quoted = urllib.parse.quote(response_id, safe="")
    request = urllib.request.Request(f"{url.rstrip('/')}/v1/responses/{quoted}/trace?format=json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return orjson.loads(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            message = orjson.loads(exc.read())["error"]["message"]
        except Exception:
            message = exc.reason
        raise TraceInputError(f"{url} answered {exc.code}: {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise TraceInputError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None


def _recorded_line(path: str, number: int) -> tuple[int, dict[str, Any]]:
    try:
        lines = [line for line in Path(path).read_bytes().splitlines() if line.strip()]
    except OSError as exc:
        raise TraceInputError(f"cannot read {path}: {exc.strerror}") from None
    if not lines:
        raise TraceInputError(f"{path} holds no recorded engine call")
    if not 0 <= number <= len(lines):
        raise TraceInputError(f"{path} has {len(lines)} recorded calls: --line takes 1..{len(lines)}")
    index = number - 1 if number > 0 else len(lines) - 1
    try:
        line = orjson.loads(lines[index])
    except orjson.JSONDecodeError as exc:
        raise TraceInputError(f"{path} line {index + 1} is not JSON: {exc}") from None
    if not isinstance(line, dict) or not isinstance(line.get("tokens", []), list):
        raise TraceInputError(f"{path} line {index + 1} is not a recorded engine call")
    return index + 1, line


def trace_recording(path: str, number: int = 0, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The trace of one recorded engine call, translated as the server translates it."""
    from ..tokens import TokenLogprob
    from ..translate import AWAIT_TOOL, RecipientMap, Translator
    from ..vocab import load_vocabulary

    at, line = _recorded_line(path, number)
    tokens = [int(t) for t in line.get("tokens", [])]
    vocab = load_vocabulary()
    recorder = Recorder(
        response_id=f"{Path(path).name} line {at}",
        model="recorded",
        token_text=vocab.token_text,
        max_bytes=1 << 30,
        clock=lambda: 0.0,  # a recording holds no times
    )
    recorder.record_prompt([], [])
    recorder.prompt["count"] = line.get("prompt_tokens") or 0
    ids = iter(range(1, 10**9))
    translator = Translator(
        vocab=vocab,
        new_id=lambda prefix: f"{prefix}_{next(ids)}",
        clock=lambda: 0,
        recipients=RecipientMap.from_tools(tools or []),
    )
    translator.on_recovery = recorder.recovery
    recorder.engine_call({"recording": str(path), "line": at, "prompt_tokens": recorder.prompt["count"]}, None)
    raw_lps = line.get("token_logprobs")
    lps = [None if lp is None else TokenLogprob(lp[0], tuple(map(tuple, lp[1]))) for lp in raw_lps] if raw_lps else None
    events = translator.events()
    start = 0
    for size in line.get("chunks") or [len(tokens)]:
        chunk = tokens[start : start + size]
        events += recorder.feed(translator, chunk, lps[start : start + size] if lps else None)
        start += size
    if start < len(tokens):
        events += recorder.feed(translator, tokens[start:], lps[start:] if lps else None)
    finish = line.get("finish", "stop")
    recorder.engine_end(finish, prompt_tokens=line.get("prompt_tokens"), cached_tokens=line.get("cached_tokens"))
    translator.receive_end(finish if finish in ("stop", "length", "error") else "error", line.get("error"))
    events += translator.events()
    if translator.next_event() is AWAIT_TOOL:
        call = translator.pending_tool_call
        recorder.tool_started(call)
        translator.send_tool_result(error="not run: a recording holds no tool results")
        recorder.tool_ended(None)
        translator.receive_end("stop")
        events += translator.events()
    recorder.sent(events)
    return recorder.document()


def run_trace(args: argparse.Namespace) -> int:
    try:
        if args.record is not None:
            if args.response_id is not None:
                raise TraceInputError("give a response ID or --record PATH, not both")
            from ..translate_cli import InputError, _tools

            try:
                tools = _tools(args.tools)
            except InputError as exc:
                raise TraceInputError(str(exc)) from None
            trace = trace_recording(args.record, args.line, tools)
        elif args.response_id is None:
            raise TraceInputError("give a response ID (resp_…) or --record PATH")
        else:
            trace = fetch_trace(args.url, args.response_id, args.api_key)
    except TraceInputError as exc:
        print(f"harmony-responses trace: {exc}", file=sys.stderr)
        return 2
    data = orjson.dumps(trace, option=orjson.OPT_INDENT_2) if args.json else render_page(trace).encode()
    if args.output is not None:
        if args.output == "-":
            sys.stdout.buffer.write(data)
            return 0
        Path(args.output).write_bytes(data)
        print(args.output)
        return 0
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in str(trace.get("response_id", "trace")))
    fd, path = tempfile.mkstemp(prefix=f"harmony-trace-{name}-", suffix=".json" if args.json else ".html")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    print(path)
    if not args.no_open and not args.json:
        webbrowser.open(Path(path).as_uri())
    return 0
