"""Property tests (hypothesis): random valid and malformed token streams, random chunkings, random endings.

For every stream: (a) the events do not depend on how the tokens are chunked, nor on draining with
``next_event()`` rather than ``events()``, nor on processing a delta at a time (``to_first_delta``); (b)-(d)
every invariant of ``check_stream`` holds (which includes validation against the openai types and openai's own
stream accumulator); and the translator never raises on model output. Valid completions are also checked
against a model of what they should produce.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harmony_responses.tokens import TokenLogprob
from harmony_responses.translate import AWAIT_TOOL, DONE, NEED_TOKENS, ItemKind, State, Translator, _translator

from .helpers import ALL_TOOLS, CALL, RETURN, SPECIAL_IDS, make_translator, tokens
from .invariants import check_stream

# ~250 examples per property keeps this file well under a minute; HARMONY_PROPERTY_EXAMPLES=5000 searches deeper.
SETTINGS = settings(
    max_examples=int(os.environ.get("HARMONY_PROPERTY_EXAMPLES", "250")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# ---------------------------------------------------------------------------------------------- the driver


@dataclass(frozen=True)
class ToolResult:
    fails: bool
    continue_after: bool  # True: start another engine call if there is one; False: end the response


@dataclass(frozen=True)
class Script:
    """What one response sees: engine calls (token ids), how the last one ends, and the tool results."""

    calls: tuple[tuple[int, ...], ...]
    finish: str
    results: tuple[ToolResult, ...]
    logprobs: bool = False  # ask for logprobs (each token gets a made-up one)
    summaries: bool = False  # reasoning.summary asked for: reasoning streams as its summary
    compacted: bool = False  # the response compacts first (context_management): a compaction item leads


def _logprob(token: int) -> TokenLogprob:
    return TokenLogprob(-(token % 13) / 4, ((token, -(token % 13) / 4), (token % 1000, -5.0)))


def _feed(
    translator: Translator, ids: tuple[int, ...], sizes: Iterator[int], drain: str, out: list, logprobs: bool
) -> None:
    position = 0
    while position < len(ids):
        size = next(sizes)
        chunk = ids[position : position + size]
        translator.receive_tokens(chunk, logprobs=[_logprob(t) for t in chunk] if logprobs else None)
        position += size
        _drain(translator, drain, out)


def _drain(translator: Translator, drain: str, out: list[dict[str, Any]]) -> None:
    if drain == "events":
        out.extend(translator.events())
        return
    if drain == "to_first_delta":  # a delta at a time, as a starting response's first one goes out
        out.extend(translator.events(to_first_delta=True))
        while translator.buffered:
            out.extend(translator.events(to_first_delta=True))
        return
    while isinstance(event := translator.next_event(), dict):
        out.append(event)
    assert event in (NEED_TOKENS, AWAIT_TOOL, DONE)
    assert (event is AWAIT_TOOL) == (translator.state is State.AWAIT_TOOL)
    assert (event is DONE) == translator.closed


def run_script(script: Script, sizes: list[int], drain: str = "events") -> list[dict[str, Any]]:
    """Play a script through a translator, ``sizes`` tokens at a time (cycled); return all its events."""
    translator = make_translator(ALL_TOOLS, logprobs=script.logprobs, summaries=script.summaries)
    chunks = itertools.cycle(sizes)
    events: list[dict[str, Any]] = []
    _drain(translator, drain, events)
    if script.compacted:
        translator.open_compaction()
        _drain(translator, drain, events)
        translator.close_compaction("sealed-summary")
        _drain(translator, drain, events)
    results = iter(script.results)
    for number, ids in enumerate(script.calls):
        last = number == len(script.calls) - 1
        _feed(translator, ids, chunks, drain, events, script.logprobs)
        translator.receive_end(script.finish if last else "stop")  # type: ignore[arg-type]
        _drain(translator, drain, events)
        call = translator.pending_tool_call
        if call is None:
            break
        assert translator.state is State.AWAIT_TOOL
        result = next(results, ToolResult(fails=False, continue_after=False))
        if result.fails:
            translator.send_tool_result(error="tool failed")
        elif call.kind is ItemKind.CODE_INTERPRETER:
            translator.send_tool_result(outputs=[{"type": "logs", "logs": "ok\n"}])
        else:
            translator.send_tool_result(output="ok")
        _drain(translator, drain, events)
        if last or not result.continue_after:
            translator.receive_end("stop")
            _drain(translator, drain, events)
            break
        translator.start_engine_call()
    assert translator.closed, translator.state
    return events


@contextlib.contextmanager
def pure_python() -> Iterator[None]:
    """Translators made meanwhile take every token in Python, without the compiled text run (_text_run.c)."""
    compiled = _translator.TEXT_RUN
    _translator.TEXT_RUN = None
    try:
        yield
    finally:
        _translator.TEXT_RUN = compiled


def assert_chunking_invariant(script: Script, sizes: list[int]) -> list[dict[str, Any]]:
    reference = run_script(script, [1 << 30])  # all at once
    with pure_python():
        assert run_script(script, [1 << 30]) == reference, "the pure-Python path differs from the compiled one"
        assert run_script(script, sizes) == reference, f"the pure-Python path in chunks of {sizes} differs"
    assert run_script(script, [1]) == reference, "one token at a time differs from all at once"
    assert run_script(script, [7]) == reference, "chunks of 7 differ from all at once"
    assert run_script(script, sizes) == reference, f"chunks of {sizes} differ from all at once"
    assert run_script(script, sizes, drain="next_event") == reference, "next_event() differs from events()"
    assert run_script(script, sizes, drain="to_first_delta") == reference, "stopping at each delta differs"
    return reference


# ---------------------------------------------------------------------------------------------- valid completions

# Content text: any unicode (multi-byte included) except surrogates; "<|" is broken up so that random text can
# never spell a special token.
content_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=24).map(lambda s: s.replace("<|", "< |"))
json_text = st.builds(lambda s: '{"q": ' + repr(s).replace("<|", "< |") + "}", content_text)


@dataclass(frozen=True)
class Piece:
    """One Harmony message and the output item it must become (see ``expected_summary``)."""

    text: str  # the message, without <|start|>assistant and without its terminator
    item: tuple[Any, ...]
    terminal: str  # the terminator it takes when last in an engine call
    builtin: bool = False


def analysis(text: str) -> Piece:
    return Piece(f"<|channel|>analysis<|message|>{text}", ("reasoning", text), "<|end|>")


def preamble(text: str) -> Piece:
    return Piece(f"<|channel|>commentary<|message|>{text}", ("message", "commentary", text), "<|end|>")


def final(text: str) -> Piece:
    return Piece(f"<|channel|>final<|message|>{text}", ("message", "final_answer", text), "<|return|>")


def function_call(recipient: str, name: str, channel: str, arguments: str) -> Piece:
    header = f"<|channel|>{channel} to={recipient} <|constrain|>json"
    return Piece(f"{header}<|message|>{arguments}", ("function_call", name, arguments), "<|call|>")


def custom_call(text: str, wrapped: bool) -> Piece:
    """A custom tool call as the model writes it ({"input": …}, as declared), or its raw input written bare."""
    content = json.dumps({"input": text}, ensure_ascii=False) if wrapped else text
    header = "<|channel|>commentary to=functions.apply_patch <|constrain|>json"
    return Piece(f"{header}<|message|>{content}", ("custom_tool_call", "apply_patch", text), "<|call|>")


def python_call(code: str) -> Piece:
    return Piece(
        f"<|channel|>analysis to=python code<|message|>{code}", ("code_interpreter_call", code), "<|call|>", True
    )


def browser_call(action: str, arguments: str) -> Piece:
    header = f"<|channel|>analysis to=browser.{action} code"
    return Piece(f"{header}<|message|>{arguments}", ("web_search_call",), "<|call|>", True)


def mcp_call(arguments: str) -> Piece:
    header = "<|channel|>commentary to=deepwiki.ask_question <|constrain|>json"
    return Piece(f"{header}<|message|>{arguments}", ("mcp_call", arguments), "<|call|>", True)


inner_pieces = st.one_of(st.builds(analysis, content_text), st.builds(preamble, content_text))
# (recipient, the function_call's name): declared, undeclared (surfaced as written), and a namespace tool's.
RECIPIENTS = [
    ("functions.get_weather", "get_weather"),
    ("functions.not_declared", "not_declared"),
    ("crm.lookup", "lookup"),
]
client_calls = st.builds(
    lambda recipient, channel, arguments: function_call(*recipient, channel, arguments),
    st.sampled_from(RECIPIENTS),
    st.sampled_from(["commentary", "analysis"]),
    json_text,
)
custom_calls = st.one_of(
    st.builds(custom_call, content_text, st.just(True)),
    st.builds(custom_call, content_text.filter(lambda t: not t.lstrip().startswith("{")), st.just(False)),
)
builtin_calls = st.one_of(
    st.builds(python_call, content_text),
    st.builds(browser_call, st.sampled_from(["search", "open", "find"]), json_text),
    st.builds(mcp_call, json_text),
)
last_pieces = st.one_of(st.builds(final, content_text), client_calls, custom_calls, builtin_calls, inner_pieces)


@st.composite
def engine_call(draw: st.DrawFn, *, builtin_last: bool) -> list[Piece]:
    pieces = draw(st.lists(inner_pieces, max_size=3))
    pieces.append(draw(builtin_calls if builtin_last else last_pieces))
    return pieces


def render(pieces: list[Piece]) -> str:
    """One engine call's completion: messages joined by <|end|><|start|>assistant, the last one terminated."""
    parts = [piece.text for piece in pieces]
    return "<|end|><|start|>assistant".join(parts) + pieces[-1].terminal


@st.composite
def valid_scripts(draw: st.DrawFn) -> tuple[Script, list[list[Piece]]]:
    rounds = draw(st.integers(1, 3))
    calls = [draw(engine_call(builtin_last=i < rounds - 1)) for i in range(rounds)]
    results = tuple(ToolResult(fails=draw(st.booleans()), continue_after=True) for _ in range(rounds - 1))
    ids = tuple(tuple(tokens(render(call))) for call in calls)
    script = Script(ids, "stop", results, draw(st.booleans()), draw(st.booleans()), draw(st.booleans()))
    return script, calls


def expected_summary(calls: list[list[Piece]], compacted: bool = False) -> list[tuple[Any, ...]]:
    return [("compaction",)] * compacted + [piece.item for pieces in calls for piece in pieces]


def summarise(item: dict[str, Any]) -> tuple[Any, ...]:
    kind = item["type"]
    if kind == "reasoning":
        return (kind, item["content"][0]["text"])
    if kind == "message":
        return (kind, item["phase"], item["content"][0]["text"])
    if kind == "function_call":
        return (kind, item["name"], item["arguments"])
    if kind == "custom_tool_call":
        return (kind, item["name"], item["input"])
    if kind == "code_interpreter_call":
        return (kind, item["code"])
    if kind == "mcp_call":
        return (kind, item["arguments"])
    return (kind,)


chunk_sizes = st.lists(st.integers(1, 9), min_size=1, max_size=12)


@SETTINGS
@given(valid_scripts(), chunk_sizes)
def test_valid_completions(generated: tuple[Script, list[list[Piece]]], sizes: list[int]) -> None:
    script, calls = generated
    events = assert_chunking_invariant(script, sizes)
    check_stream(events)
    last = events[-1]
    assert last["type"] == "response.completed"
    assert [summarise(item) for item in last["response"]["output"]] == expected_summary(calls, script.compacted)
    assert last["response"]["usage"]["output_tokens"] == sum(len(ids) for ids in script.calls)
    summaries = [item["summary"] for item in last["response"]["output"] if item["type"] == "reasoning"]
    texts = [item["content"][0]["text"] for item in last["response"]["output"] if item["type"] == "reasoning"]
    expected = [[{"type": "summary_text", "text": t}] if script.summaries and t else [] for t in texts]
    assert summaries == expected, "a reasoning item's summary is not its text (asked for) or not empty"


@SETTINGS
@given(valid_scripts(), chunk_sizes, st.sampled_from(["length", "error"]), st.data())
def test_valid_completions_cut_short(
    generated: tuple[Script, list[list[Piece]]], sizes: list[int], finish: str, data: st.DataObject
) -> None:
    """A length cut or engine error anywhere in the last engine call."""
    script, calls = generated
    last = script.calls[-1]
    cut = data.draw(st.integers(0, len(last)), label="cut")
    script = dataclasses.replace(script, calls=(*script.calls[:-1], last[:cut]), finish=finish)
    events = assert_chunking_invariant(script, sizes)
    check_stream(events)
    terminal = events[-1]
    if finish == "error":
        assert terminal["type"] == "response.failed"
    elif cut == len(last) and last[-1] in (RETURN, CALL) and not calls[-1][-1].builtin:
        assert terminal["type"] == "response.completed"  # the stop token was the last token allowed
    else:
        # Cut inside a message, after an <|end|> (the model was going on), or on a built-in call that can no
        # longer run.
        assert terminal["type"] == "response.incomplete"
        assert terminal["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


# ---------------------------------------------------------------------------------------------- malformed streams

# Text tokens that make headers likely (assistant, analysis, final, comment+ary, " to", "=", functions, python,
# " code", json, …), partial UTF-8 bytes (the parrot's three tokens, half of 龘) and plain words.
HEADER_WORDS = tokens(
    "assistant analysis final commentary to=functions.get_weather python code json browser.search deepwiki.x crm."
    ' to=functions.apply_patch {"input": "a\\nb"}'
)
TEXT_POOL = sorted({*HEADER_WORDS, *tokens('🦜龘 Hi there, {"a": 1}'), 0, 28, 316})
any_token = st.one_of(st.sampled_from(SPECIAL_IDS), st.sampled_from(TEXT_POOL), st.integers(0, 199_997))
random_stream = st.lists(any_token, max_size=60).map(tuple)


@st.composite
def mutated_stream(draw: st.DrawFn) -> tuple[int, ...]:
    """A valid engine call with tokens inserted, deleted or duplicated at random places."""
    ids = list(tokens(render(draw(engine_call(builtin_last=draw(st.booleans()))))))
    for _ in range(draw(st.integers(1, 4))):
        operation = draw(st.sampled_from(["insert", "delete", "duplicate"]))
        position = draw(st.integers(0, max(len(ids) - 1, 0)))
        if operation == "insert":
            ids.insert(position, draw(st.one_of(st.sampled_from(SPECIAL_IDS), st.sampled_from(TEXT_POOL))))
        elif ids and operation == "delete":
            del ids[position]
        elif ids:
            ids.insert(position, ids[position])
    return tuple(ids)


malformed_call = st.one_of(random_stream, mutated_stream())
tool_results = st.lists(st.builds(ToolResult, st.booleans(), st.booleans()), max_size=2).map(tuple)
malformed_scripts = st.builds(
    Script,
    st.lists(malformed_call, min_size=1, max_size=3).map(tuple),
    st.sampled_from(["stop", "length", "error"]),
    tool_results,
    st.booleans(),
    st.booleans(),
    st.booleans(),
)


@SETTINGS
@given(malformed_scripts, chunk_sizes)
def test_malformed_streams(script: Script, sizes: list[int]) -> None:
    events = assert_chunking_invariant(script, sizes)
    check_stream(events)
    terminal = events[-1]
    if terminal["type"] == "response.failed" and script.finish != "error":
        # Only the model can have failed this response: the message names what it wrote.
        assert terminal["response"]["error"]["message"].startswith("model output is not valid Harmony: ")


# ------------------------------------------------------------------------------------- text a server may take early


def _promises_kept(script: Script, sizes: list[int]) -> int:
    """Feed the script's first engine call ``sizes`` tokens at a time; wherever ``takes_text`` said yes for a chunk,
    check that it made deltas only and left the item and the state as they were. Returns how often it said yes."""
    translator = make_translator(ALL_TOOLS, summaries=script.summaries)
    translator.events()
    ids, chunks, position, promised = script.calls[0], itertools.cycle(sizes), 0, 0
    while position < len(ids):
        chunk = ids[position : position + next(chunks)]
        position += len(chunk)
        before = (translator.state, translator._item)
        takes = translator.takes_text(chunk)
        translator.receive_tokens(chunk)
        events = translator.events()
        if takes:
            promised += 1
            assert all(e["type"].endswith(".delta") for e in events), [e["type"] for e in events]
            assert (translator.state, translator._item) == before
    return promised


@SETTINGS
@given(st.one_of(valid_scripts().map(lambda g: g[0]), malformed_scripts), chunk_sizes)
def test_text_a_server_may_take_early_makes_deltas_only(script: Script, sizes: list[int]) -> None:
    # run/loop.py translates a chunk in the engine's read callback only where takes_text says this holds.
    _promises_kept(script, sizes)


def test_takes_text_says_yes_inside_an_answer() -> None:
    script = Script((tuple(tokens("<|channel|>final<|message|>Hello there, a longer answer.<|return|>")),), "stop", ())
    assert _promises_kept(script, [2]) >= 3
