"""The token-level protocol table (h11 test_state style): every row written out, then every row exercised.

The literal table below is the specification; ``test_table_is_exactly_the_specification`` fails on any change
to ``_state.TRANSITIONS`` so that a change to the protocol is always a deliberate edit of both. The
behavioural tests drive a real Translator into each state and feed one token of each class.
"""

from __future__ import annotations

import pytest

from harmony_responses.translate import LocalProtocolError, State
from harmony_responses.translate import _translator as translator_module
from harmony_responses.translate._state import TRANSITIONS, Action, TokenClass, classify
from harmony_responses.vocab import SPECIAL_TOKENS, VOCAB_SIZE

from .helpers import CODE_INTERPRETER_TOOL, make_translator, tokens, translate
from .invariants import check_stream

S, T, A = State, TokenClass, Action

SPECIFICATION = {
    # Reading a header: text and header tokens accumulate; <|message|> opens the item.
    (S.HEADER, T.TEXT): (A.HEADER_ADD, S.HEADER),
    (S.HEADER, T.CHANNEL): (A.HEADER_CHANNEL, S.HEADER),
    (S.HEADER, T.CONSTRAIN): (A.HEADER_ADD, S.HEADER),
    (S.HEADER, T.START): (A.HEADER_RESTART, S.HEADER),
    (S.HEADER, T.MESSAGE): (A.OPEN, S.CONTENT),
    (S.HEADER, T.END): (A.HEADER_END, S.BETWEEN),
    (S.HEADER, T.CALL): (A.HEADER_END, S.STOPPED),
    (S.HEADER, T.RETURN): (A.HEADER_END, S.STOPPED),
    (S.HEADER, T.OTHER): (A.SKIP, S.HEADER),
    # Inside content: text appends; a header token means <|end|> was forgotten; stray tokens are skipped.
    (S.CONTENT, T.TEXT): (A.APPEND_TEXT, S.CONTENT),
    (S.CONTENT, T.START): (A.CLOSE_THEN_HEADER, S.HEADER),
    (S.CONTENT, T.CHANNEL): (A.CLOSE_THEN_HEADER_WITH, S.HEADER),
    (S.CONTENT, T.MESSAGE): (A.SKIP, S.CONTENT),
    (S.CONTENT, T.CONSTRAIN): (A.SKIP, S.CONTENT),
    (S.CONTENT, T.END): (A.CLOSE, S.BETWEEN),
    (S.CONTENT, T.CALL): (A.CLOSE, S.STOPPED),
    (S.CONTENT, T.RETURN): (A.CLOSE, S.STOPPED),
    (S.CONTENT, T.OTHER): (A.SKIP, S.CONTENT),
    # Between messages: <|start|> is expected; anything header-like starts a header without it.
    (S.BETWEEN, T.START): (A.HEADER_BEGIN, S.HEADER),
    (S.BETWEEN, T.CHANNEL): (A.HEADER_BEGIN_WITH, S.HEADER),
    (S.BETWEEN, T.CONSTRAIN): (A.HEADER_BEGIN_WITH, S.HEADER),
    (S.BETWEEN, T.TEXT): (A.HEADER_BEGIN_WITH, S.HEADER),
    (S.BETWEEN, T.MESSAGE): (A.OPEN, S.CONTENT),
    (S.BETWEEN, T.END): (A.SKIP, S.BETWEEN),
    (S.BETWEEN, T.CALL): (A.SKIP, S.STOPPED),
    (S.BETWEEN, T.RETURN): (A.SKIP, S.STOPPED),
    (S.BETWEEN, T.OTHER): (A.SKIP, S.BETWEEN),
    # After a stop token, and while a built-in call waits: the engine should have stopped; ignore the rest.
    **{(S.STOPPED, cls): (A.SKIP, S.STOPPED) for cls in TokenClass},
    **{(S.AWAIT_TOOL, cls): (A.SKIP, S.AWAIT_TOOL) for cls in TokenClass},
}

TOKEN_ACCEPTING = (S.HEADER, S.CONTENT, S.BETWEEN, S.STOPPED, S.AWAIT_TOOL)

TEXT_TOKEN = tokens(" ok")[0]
SAMPLE = {
    T.TEXT: TEXT_TOKEN,
    T.START: 200006,
    T.CHANNEL: 200005,
    T.MESSAGE: 200008,
    T.CONSTRAIN: 200003,
    T.END: 200007,
    T.CALL: 200012,
    T.RETURN: 200002,
    T.OTHER: 200013,
}
# What reaches each state (a fresh engine call starts in HEADER with an empty header).
PREFIX = {
    S.HEADER: "",
    S.CONTENT: "<|channel|>final<|message|>Hi",
    S.BETWEEN: "<|channel|>final<|message|>Hi<|end|>",
    S.STOPPED: "<|channel|>final<|message|>Hi<|return|>",
    S.AWAIT_TOOL: "<|channel|>analysis to=python code<|message|>print(1)<|call|>",
}
CLOSE_EVENTS = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
# The events each action causes for the sample token, given the prefixes above.
EFFECT = {
    A.HEADER_ADD: [],
    A.HEADER_BEGIN: [],
    A.HEADER_BEGIN_WITH: [],
    A.HEADER_RESTART: [],
    A.HEADER_END: [],
    A.HEADER_CHANNEL: [],
    A.SKIP: [],
    A.OPEN: ["response.output_item.added", "response.content_part.added"],
    A.APPEND_TEXT: ["response.output_text.delta"],
    A.CLOSE: CLOSE_EVENTS,
    A.CLOSE_THEN_HEADER: CLOSE_EVENTS,
    A.CLOSE_THEN_HEADER_WITH: CLOSE_EVENTS,
}


def test_table_is_exactly_the_specification() -> None:
    assert TRANSITIONS == SPECIFICATION


@pytest.mark.parametrize("state", TOKEN_ACCEPTING)
def test_every_token_accepting_state_has_a_row_for_every_token_class(state: State) -> None:
    assert {cls for (s, cls) in TRANSITIONS if s is state} == set(TokenClass)


@pytest.mark.parametrize("state", [S.READY, S.CLOSED])
def test_states_that_accept_no_tokens_have_no_rows(state: State) -> None:
    assert not [key for key in TRANSITIONS if key[0] is state]


def test_classify() -> None:
    named = {
        200002: T.RETURN,
        200003: T.CONSTRAIN,
        200005: T.CHANNEL,
        200006: T.START,
        200007: T.END,
        200008: T.MESSAGE,
        200012: T.CALL,
    }
    for token, cls in named.items():
        assert classify(token) is cls, SPECIAL_TOKENS[token]
    # <|startoftext|>, <|endoftext|> and every <|reserved_N|> up to the end of the vocabulary mean nothing here.
    others = [t for t in range(199998, VOCAB_SIZE) if t not in named]
    assert {classify(t) for t in others} == {T.OTHER}
    assert {classify(t) for t in (0, 1, 173781, 199997)} == {T.TEXT}


@pytest.mark.parametrize(("state", "cls"), sorted(SPECIFICATION, key=lambda k: (k[0].value, k[1].value)))
def test_row_at_the_translator_boundary(state: State, cls: TokenClass) -> None:
    action, next_state = SPECIFICATION[(state, cls)]
    translator = make_translator([CODE_INTERPRETER_TOOL])
    translator.receive_tokens(tokens(PREFIX[state]))
    translator.events()
    assert translator.state is state
    translator.receive_tokens([SAMPLE[cls]])
    caused = [event["type"] for event in translator.events()]
    assert translator.state is next_state
    assert caused == EFFECT[action]
    if action is A.APPEND_TEXT:
        assert translator.output_items == []  # still open


def test_stopped_and_await_tool_ignore_every_token_in_the_vocabulary_classes() -> None:
    every_class = [SAMPLE[cls] for cls in TokenClass] * 2
    for prefix in (PREFIX[S.STOPPED], PREFIX[S.AWAIT_TOOL]):
        translator = make_translator([CODE_INTERPRETER_TOOL])
        translator.receive_tokens(tokens(prefix))
        before = translator.events()
        state = translator.state
        translator.receive_tokens(every_class + tokens("<|channel|>final<|message|>ignored<|return|>"))
        assert translator.events() == [] and translator.state is state
        assert before[-1]["type"] in ("response.output_item.done", "response.code_interpreter_call.interpreting")


def test_ready_and_closed_refuse_tokens() -> None:
    translator = make_translator([CODE_INTERPRETER_TOOL])
    translator.receive_tokens(tokens(PREFIX[S.AWAIT_TOOL]))
    translator.send_tool_result(outputs=None)
    assert translator.state is S.READY
    with pytest.raises(LocalProtocolError):
        translator.receive_tokens([TEXT_TOKEN])
    translator.receive_end("stop")
    translator.events()
    assert translator.state is S.CLOSED
    with pytest.raises(LocalProtocolError):
        translator.receive_tokens([TEXT_TOKEN])


# ---------------------------------------------------------------------------------------------- refinements


def test_call_on_a_builtin_item_refines_stopped_to_await_tool() -> None:
    """The one refinement of a CONTENT row: <|call|>, <|end|> or a new header make the built-in call."""
    for terminator in ("<|call|>", "<|end|>", "<|return|>", "<|start|>", "<|channel|>"):
        translator = make_translator([CODE_INTERPRETER_TOOL])
        translator.receive_tokens(tokens("<|channel|>analysis to=python code<|message|>print(1)" + terminator))
        events = translator.events()
        assert translator.state is S.AWAIT_TOOL, terminator
        assert events[-1]["type"] == "response.code_interpreter_call.interpreting"


def test_header_end_on_a_stop_token_fails_when_the_header_has_a_channel() -> None:
    """The HEADER/CALL and HEADER/RETURN rows end the response failed when a real header would be lost."""
    translator = make_translator()
    translator.receive_tokens(tokens("<|channel|>final to the user<|return|>"))
    events = translator.events()
    assert translator.state is S.CLOSED and translator.error is not None
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]


def test_header_begin_with_keeps_the_token_as_the_start_of_the_header() -> None:
    """BETWEEN/CHANNEL and CONTENT/CHANNEL: the <|channel|> token belongs to the new header."""
    for prefix in (PREFIX[S.BETWEEN], PREFIX[S.CONTENT]):
        events = translate(prefix + "<|channel|>analysis<|message|>thinking<|end|>")
        check_stream(events)
        assert [item["type"] for item in events[-1]["response"]["output"]] == ["message", "reasoning"]


# ---------------------------------------------------------------------------------------------- the fast path


def test_fast_path_agrees_with_the_content_text_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Translator._step handles CONTENT/TEXT inline; with the shortcut disabled the table's row gives the same."""
    completion = (
        "<|channel|>analysis<|message|>猫が好き🐈 and more<|end|><|start|>assistant"
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": "龘🦜"}<|end|>'
        "<|start|>assistant<|channel|>final<|message|>Hi there 🦜!<|constrain|> ok<|return|>"
    )
    fast = translate(completion)
    # The shortcut tests ``token < FIRST_SPECIAL`` with the translator module's name: at 0 it is never taken
    # (classify() keeps its own), so every content token goes through TRANSITIONS[(CONTENT, TEXT)].
    lookups: list[tuple[State, TokenClass]] = []

    class Recording(dict):
        def __getitem__(self, key: tuple[State, TokenClass]) -> tuple[Action, State]:
            lookups.append(key)
            return super().__getitem__(key)

    monkeypatch.setattr(translator_module, "FIRST_SPECIAL", 0)
    monkeypatch.setattr(translator_module, "TRANSITIONS", Recording(TRANSITIONS))
    slow = translate(completion)
    assert slow == fast
    check_stream(fast)
    content_tokens = len(tokens("猫が好き🐈 and more" + '{"a": "龘🦜"}' + "Hi there 🦜! ok"))
    assert lookups.count((S.CONTENT, T.TEXT)) == content_tokens
