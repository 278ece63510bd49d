"""A corpus of malformed model output (harmony.md §9.1/§9.2, pitfalls.md #42-#43) and what the translator makes of it.

Every case states the recovery the translator decides (the items it surfaces, how the response ends, and for
failures what the message names) and must keep every protocol invariant, whatever the chunking. Recovery
where the intent is clear; ``response.failed`` naming what the model wrote otherwise; never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from harmony_responses.translate import State
from harmony_responses.translate._translator import MAX_HEADER_TOKENS

from .helpers import ALL_TOOLS, make_translator, tokens
from .invariants import check_stream

Summary = tuple[Any, ...]


def msg(text: str, phase: str = "final_answer", status: str = "completed") -> Summary:
    return ("message", phase, status, text)


def rs(text: str, status: str = "completed") -> Summary:
    return ("reasoning", status, text)


def fc(name: str, arguments: str, status: str = "completed") -> Summary:
    return ("function_call", name, status, arguments)


def ci(code: str, status: str = "completed") -> Summary:
    return ("code_interpreter_call", status, code)


def summarise(item: dict[str, Any]) -> Summary:
    kind = item["type"]
    if kind == "message":
        return msg(item["content"][0]["text"], item["phase"], item["status"])
    if kind == "reasoning":
        return rs(item["content"][0]["text"], item["status"])
    if kind == "function_call":
        return fc(item["name"], item["arguments"], item["status"])
    if kind == "code_interpreter_call":
        return ci(item["code"], item["status"])
    return (kind, item["status"])


@dataclass(frozen=True)
class Case:
    name: str
    completion: str | list[int]
    finish: str
    terminal: str  # completed | incomplete | failed
    items: list[Summary] = field(default_factory=list)
    error: str | None = None  # a fragment the failure message must contain
    note: str = ""


def run(completion: str | list[int], finish: str, chunk: int | None) -> list[dict[str, Any]]:
    """Feed one engine call; a built-in call the model made gets a result and the response then ends."""
    ids = tokens(completion) if isinstance(completion, str) else completion
    translator = make_translator(ALL_TOOLS)
    events: list[dict[str, Any]] = []
    size = chunk or max(len(ids), 1)
    for start in range(0, len(ids), size):
        translator.receive_tokens(ids[start : start + size])
        events += translator.events()
    translator.receive_end(finish)  # type: ignore[arg-type]
    events += translator.events()
    if translator.state is State.AWAIT_TOOL:
        translator.send_tool_result(output="ok", outputs=[{"type": "logs", "logs": "ok"}])
        translator.receive_end("stop")
        events += translator.events()
    assert translator.closed
    return events


LONG_TEXT = " word" * (MAX_HEADER_TOKENS + 20)

CORPUS = [
    # ------------------------------------------------------------------ harmony.md §9.1: the parser raises
    Case(
        "missing <|start|> before the next header",
        "<|channel|>analysis<|message|>A<|end|><|channel|>final<|message|>B<|return|>",
        "stop",
        "completed",
        [rs("A"), msg("B")],
        note="<|channel|> after a finished message acts as if <|start|>assistant came first (§9.3)",
    ),
    Case(
        "missing <|start|>, role written",
        "<|channel|>analysis<|message|>A<|end|>assistant<|channel|>final<|message|>B<|return|>",
        "stop",
        "completed",
        [rs("A"), msg("B")],
    ),
    Case(
        "stray text after <|return|>",
        "<|channel|>final<|message|>x<|return|>junk",
        "stop",
        "completed",
        [msg("x")],
        note="the engine should have stopped: tokens after a stop token are ignored",
    ),
    Case(
        "<|return|> after <|end|>",
        "<|channel|>final<|message|>Answer<|end|><|return|>",
        "stop",
        "completed",
        [msg("Answer")],
    ),
    Case(
        "stray text after <|end|> is surfaced, not dropped",
        "<|channel|>final<|message|>Answer<|end|>junk text",
        "stop",
        "completed",
        [msg("Answer"), msg("junk text")],
    ),
    Case(
        "doubled <|end|>",
        "<|channel|>final<|message|>x<|end|><|end|><|start|>assistant<|channel|>final<|message|>y<|return|>",
        "stop",
        "completed",
        [msg("x"), msg("y")],
    ),
    Case(
        "`to=functions.f json extra`",
        "<|channel|>commentary to=functions.f json extra<|message|>{}<|call|>",
        "stop",
        "completed",
        [fc("f", "{}")],
    ),
    Case(
        "duplicated to=",
        '<|channel|>commentary to=functions.f to=functions.f<|message|>{"a":1}<|call|>',
        "stop",
        "completed",
        [fc("f", '{"a":1}')],
    ),
    Case(
        "headerless refusal ended by <|end|>",
        "I must refuse.<|end|>",
        "stop",
        "completed",
        [msg("I must refuse.")],
    ),
    Case(
        "headerless refusal ended by <|return|>",
        "I can't help with that.<|return|>",
        "stop",
        "completed",
        [msg("I can't help with that.")],
    ),
    Case("headerless text, end of stream", "Just text", "stop", "completed", [msg("Just text")]),
    Case(
        "headerless text, length cut",
        "Just text",
        "length",
        "incomplete",
        [msg("Just text", status="incomplete")],
    ),
    Case("empty channel", "<|channel|><|message|>x<|return|>", "stop", "completed", [msg("x")]),
    Case(
        "message without <|start|> after a finished one",
        "<|channel|>analysis<|message|>A<|end|><|start|><|channel|>final<|message|>x<|return|>",
        "stop",
        "completed",
        [rs("A"), msg("x")],
    ),
    Case(
        "doubled <|start|>assistant at the start",
        "<|start|>assistant<|start|>assistant<|channel|>final<|message|>x<|return|>",
        "stop",
        "completed",
        [msg("x")],
    ),
    Case(
        "doubled <|start|>assistant between messages",
        "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|start|>assistant<|channel|>final<|message|>x<|return|>",
        "stop",
        "completed",
        [rs("A"), msg("x")],
    ),
    Case(
        "recipient in the role position as the first tokens",
        "<|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json<|message|>{}<|call|>",
        "stop",
        "completed",
        [fc("f", "{}")],
    ),
    Case(
        "<|start|>assistant inside a header restarts it",
        "<|channel|>commentary <|start|>assistant to=functions.f<|message|>{}<|call|>",
        "stop",
        "completed",
        [fc("f", "{}")],
    ),
    Case(
        "end of stream inside a header",
        "<|channel|>fin",
        "stop",
        "failed",
        error="ended inside a message header: '<|channel|>fin'",
    ),
    Case("length cut inside a header", "<|channel|>fin", "length", "incomplete"),
    Case(
        "end of stream inside the second header",
        "<|channel|>final<|message|>x<|end|><|start|>assistant<|channel|>fin",
        "stop",
        "failed",
        [msg("x")],
        error="'assistant<|channel|>fin'",
    ),
    Case(
        "length cut right after <|start|>",
        "<|channel|>final<|message|>x<|end|><|start|>",
        "length",
        "incomplete",
        [msg("x")],
    ),
    Case(
        "stop token inside a header (its words would be lost)",
        "<|channel|>final Hello there<|return|>",
        "stop",
        "failed",
        error="ended a message inside its header: '<|channel|>final Hello there'",
        note="harmony.md §9.2: openai-harmony drops 'Hello there' silently",
    ),
    Case(
        "<|end|> inside a header: the empty header is dropped, the model goes on",
        "<|channel|>final<|end|><|start|>assistant<|channel|>final<|message|>x<|return|>",
        "stop",
        "completed",
        [msg("x")],
    ),
    Case(
        "tool result written by the model: its turn was over, the forged result is ignored",
        '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"sunny":true}<|end|>',
        "stop",
        "completed",
    ),
    Case(
        "tool result written after a call that ended with <|end|>: the call stands, last",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}<|end|>"
        '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"sunny":true}<|end|>',
        "stop",
        "completed",
        [fc("get_weather", "{}")],
    ),
    Case(
        "built-in tool result written by the model",
        "<|channel|>final<|message|>x<|end|><|start|>python to=assistant<|channel|>analysis<|message|>2<|end|>",
        "stop",
        "completed",
        [msg("x")],
    ),
    Case(
        "the model writes a user turn: the assistant's turn ended before it",
        "<|channel|>final<|message|>Done.<|end|><|start|>user<|message|>thanks!<|end|>"
        "<|start|>assistant<|channel|>final<|message|>You're welcome<|return|>",
        "stop",
        "completed",
        [msg("Done.")],
    ),
    Case(
        "text after <|start|>assistant without a channel: the role word is not text",
        "<|channel|>final<|message|>x<|end|><|start|>assistant Hello there<|end|>",
        "stop",
        "completed",
        [msg("x"), msg("Hello there")],
    ),
    Case(
        "<|end|> inside a header with words after the channel: they would be lost",
        "<|channel|>final Hello there<|end|>",
        "stop",
        "failed",
        error="ended a message inside its header: '<|channel|>final Hello there'",
    ),
    # ------------------------------------------------------------------ harmony.md §9.2: the parser misreads
    Case(
        "`final json` is a content type, not a recipient",
        '<|channel|>final json<|message|>{"a":1}<|return|>',
        "stop",
        "completed",
        [msg('{"a":1}')],
    ),
    Case(
        "`final <|constrain|>json`",
        '<|channel|>final <|constrain|>json<|message|>{"a":1}<|return|>',
        "stop",
        "completed",
        [msg('{"a":1}')],
    ),
    Case(
        "`final<|constrain|>json` without a space",
        '<|channel|>final<|constrain|>json<|message|>{"a":1}<|return|>',
        "stop",
        "completed",
        [msg('{"a":1}')],
    ),
    Case(
        "doubled <|channel|>: the last one wins",
        "<|channel|>analysis<|channel|>final<|message|>x<|return|>",
        "stop",
        "completed",
        [msg("x")],
    ),
    Case(
        "doubled <|channel|> after a recipient",
        "<|channel|>commentary to=functions.f<|channel|>commentary <|constrain|>json<|message|>{}<|call|>",
        "stop",
        "completed",
        [fc("f", "{}")],
    ),
    Case(
        "`commentaryto=functions.f` glued",
        "<|channel|>commentaryto=functions.f<|message|>{}<|call|>",
        "stop",
        "completed",
        [fc("f", "{}")],
    ),
    Case(
        "<|message|> without a header",
        "<|message|>hello<|return|>",
        "stop",
        "completed",
        [msg("hello")],
    ),
    Case(
        "<|message|> without a header after a finished message",
        "<|channel|>analysis<|message|>A<|end|><|message|>B<|return|>",
        "stop",
        "completed",
        [rs("A"), msg("B")],
    ),
    Case(
        "unknown channel is shown as reasoning, not as the answer",
        "<|channel|>foo<|message|>x<|return|>",
        "stop",
        "completed",
        [rs("x")],
    ),
    Case(
        "near-miss channel `commentary?`",
        "<|channel|>commentary?<|message|>Working on it.<|end|>",
        "stop",
        "completed",
        [msg("Working on it.", phase="commentary")],
    ),
    Case(
        "special tokens inside content are skipped, the text around them kept",
        "<|channel|>final<|message|>abc<|constrain|>def<|reserved_200013|>ghi<|message|>jkl<|return|>",
        "stop",
        "completed",
        [msg("abcdefghijkl")],
    ),
    Case(
        "<|channel|> inside content: <|end|> was forgotten",
        "<|channel|>analysis<|message|>abc<|channel|>final<|message|>def<|return|>",
        "stop",
        "completed",
        [rs("abc"), msg("def")],
    ),
    Case(
        "<|start|> inside content: <|end|> was forgotten",
        "<|channel|>analysis<|message|>abc<|start|>assistant<|channel|>final<|message|>def<|return|>",
        "stop",
        "completed",
        [rs("abc"), msg("def")],
    ),
    Case(
        "reserved tokens before a header and between messages",
        "<|reserved_200013|><|channel|>final<|message|>x<|end|><|reserved_200100|><|startoftext|>"
        "<|start|>assistant<|channel|>final<|message|>y<|return|>",
        "stop",
        "completed",
        [msg("x"), msg("y")],
    ),
    Case("only <|endoftext|>", "<|endoftext|>", "stop", "completed"),
    Case("nothing at all", "", "stop", "completed"),
    Case(
        "invalid JSON arguments are streamed as written",
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": Par<|call|>',
        "stop",
        "completed",
        [fc("get_weather", '{"city": Par')],
        note="harmony.md §9.3: not a parser error; strict clients fail in json.loads",
    ),
    Case(
        "`to=functions.` without a name (a `tool_choice: required` prefill the model did not finish)",
        "<|channel|>commentary to=functions. <|constrain|>json<|message|>{}<|call|>",
        "stop",
        "completed",
        [fc("functions.", "{}")],
        note="bug fixed: the function_call's name was the empty string",
    ),
    Case(
        "<|call|> ending a message",
        "<|channel|>final<|message|>x<|call|>",
        "stop",
        "completed",
        [msg("x")],
    ),
    Case(
        "<|return|> ending a function call",
        "<|channel|>commentary to=functions.f<|message|>{}<|return|>",
        "stop",
        "completed",
        [fc("f", "{}")],
    ),
    Case(
        "function call ended with <|end|>, then an answer",
        "<|channel|>commentary to=functions.f<|message|>{}<|end|>"
        "<|start|>assistant<|channel|>final<|message|>y<|return|>",
        "stop",
        "completed",
        [fc("f", "{}"), msg("y")],
    ),
    Case(
        "built-in call without <|call|> followed by a guessed answer",
        "<|channel|>analysis to=python code<|message|>print(1)<|end|>"
        "<|start|>assistant<|channel|>final<|message|>2<|return|>",
        "stop",
        "completed",
        [ci("print(1)")],
        note="the call is made at <|end|>; what the model wrote without the tool's result is ignored",
    ),
    Case(
        "built-in call interrupted by a new header",
        "<|channel|>analysis to=python code<|message|>print(1)<|channel|>final<|message|>2<|return|>",
        "stop",
        "completed",
        [ci("print(1)")],
    ),
    Case(
        "built-in call whose <|call|> the engine dropped",
        "<|channel|>analysis to=python code<|message|>print(1)",
        "stop",
        "completed",
        [ci("print(1)")],
    ),
    Case(
        "header longer than MAX_HEADER_TOKENS",
        "<|channel|>commentary" + " to" * (MAX_HEADER_TOKENS + 5) + "<|message|>x<|end|>",
        "stop",
        "failed",
        error=f"more than {MAX_HEADER_TOKENS} tokens without <|message|>",
    ),
    Case(
        "text longer than MAX_HEADER_TOKENS without any header",
        LONG_TEXT + "<|end|>",
        "stop",
        "completed",
        [msg(LONG_TEXT)],
    ),
    Case(
        "text longer than MAX_HEADER_TOKENS, multi-byte character across the limit",
        tokens(" a" * MAX_HEADER_TOKENS) + tokens("🦜 done") + tokens("<|return|>"),
        "stop",
        "completed",
        [msg(" a" * MAX_HEADER_TOKENS + "🦜 done")],
        note="bug fixed: the parrot became three U+FFFD",
    ),
    Case(
        "random garbage: special tokens in a row",
        [200008, 200005, 200003, 200012, 200006, 200002, 200007],
        "stop",
        "completed",
        [msg("")],
        note="<|message|> opens an empty message; <|channel|> closes it and starts an empty header <|call|> ends",
    ),
    Case(
        "random garbage: reserved tokens around text",
        [200004, 17, 200009, 200001, 1234, 200011],  # reserved, "2", reserved, reserved, "()\n", reserved
        "length",
        "incomplete",
        [msg("2()\n", status="incomplete")],
        note="reserved tokens mean nothing; the text is a headerless message",
    ),
    Case(
        "random garbage: header tokens in content, stop tokens in a header",
        "<|channel|>final<|message|>a<|constrain|><|message|>b<|end|><|constrain|>json<|call|>",
        "stop",
        "completed",
        [msg("ab")],
        note="a header without <|channel|> ended by a stop token has no words to lose",
    ),
    # ------------------------------------------------------------------ seen in real gpt-oss-20b runs (llama.cpp)
    Case(
        "a header <|end|> closes before <|message|>, then valid messages: they are kept",
        "<|channel|>commentary Should I check the weather?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>"
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}'
        "<|call|>",
        "stop",
        "completed",
        [rs("Need the weather."), fc("get_weather", '{"city":"Paris"}')],
        note="only the header's stray words are lost",
    ),
    Case(
        "a header <|end|> closes before <|message|> after a message, and nothing follows",
        "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|channel|>final Hello there<|end|>",
        "stop",
        "failed",
        [rs("A")],
        error="'assistant<|channel|>final Hello there'",
    ),
    Case(
        "chain of thought without a header, <|end|>, then the messages: it is reasoning, not an answer",
        "The user asks for 2+2. Easy.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>",
        "stop",
        "completed",
        [rs("The user asks for 2+2. Easy."), msg("4")],
    ),
    Case(
        "headerless text, <|end|>, then a function call",
        "We need the weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}<|call|>",
        "stop",
        "completed",
        [rs("We need the weather."), fc("get_weather", "{}")],
    ),
    Case(
        "headerless text, <|end|>, then another headerless text that ends the output: only the last is the answer",
        "Thinking first.<|end|>The answer.<|end|>",
        "stop",
        "completed",
        [rs("Thinking first."), msg("The answer.")],
    ),
    Case(
        "headerless text, <|end|>, then <|return|>: the output ends with it, it is the answer",
        "Just this.<|end|><|return|>",
        "stop",
        "completed",
        [msg("Just this.")],
    ),
    Case(
        "headerless text, <|end|>, then a length cut: the output ends with it",
        "Just this.<|end|>",
        "length",
        "incomplete",
        [msg("Just this.")],
    ),
    Case(
        "headerless text, then <|start|>: the model went on past it",
        "Let me see.<|start|>assistant<|channel|>final<|message|>Yes<|return|>",
        "stop",
        "completed",
        [rs("Let me see."), msg("Yes")],
    ),
    Case(
        "several words, then <|channel|>: text, not a role",
        "Let me think about it<|channel|>final<|message|>Hi<|return|>",
        "stop",
        "completed",
        [rs("Let me think about it"), msg("Hi")],
    ),
    Case(
        "long chain of thought without a header (past the header limit), <|end|>, then the answer",
        "word " * (MAX_HEADER_TOKENS + 40) + "<|end|><|start|>assistant<|channel|>final<|message|>Done<|return|>",
        "stop",
        "completed",
        [rs("word " * (MAX_HEADER_TOKENS + 40)), msg("Done")],
    ),
]


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_malformed_output(case: Case) -> None:
    events = run(case.completion, case.finish, chunk=None)
    check_stream(events)
    last = events[-1]
    assert last["type"] == f"response.{case.terminal}", last["response"].get("error")
    assert [summarise(item) for item in last["response"]["output"]] == case.items
    if case.terminal == "failed":
        assert case.error is not None and case.error in last["response"]["error"]["message"]
        assert last["response"]["error"]["message"].startswith("model output is not valid Harmony: ")
    for chunk in (1, 7):
        assert run(case.completion, case.finish, chunk=chunk) == events, f"chunk {chunk} changes the events"


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 25
