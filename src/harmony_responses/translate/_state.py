"""The whole token-level protocol: where each generated token takes the translator.

Theory of operation
-------------------
A gpt-oss completion is a run of Harmony messages after a prompt that ends with ``<|start|>assistant``:

    {header}<|message|>{content}<|end|><|start|>{header}<|message|>{content}<|return|>

so an engine call starts inside a header. Each message becomes one output item, opened when its header is
complete (at ``<|message|>``: channel and recipient are known then, and an empty message still gets its
``added``/``done`` pair, pitfalls.md #20) and closed at its terminator. ``<|return|>`` and ``<|call|>`` stop
sampling; ``<|end|>`` does not (the model writes several messages per turn).

Like h11's ``_state.py``, every transition is one row of a table, keyed by (state, token class) and giving
the action the translator performs and the state it moves to. The file knows nothing of events, items or
engines. Two rules keep it honest: everything that decides a transition lives here, and an action may only
*refine* a row's target where the row says so (``CALL`` on a built-in tool waits for the tool's result
instead of stopping; a header that turns out to be plain text becomes content).

Malformed output (harmony.md §9) has rows of its own rather than exceptions: a ``<|channel|>`` or
``<|start|>`` inside content closes the item and starts a new header (the model forgot ``<|end|>``), a
``<|channel|>`` after a finished message starts a header as if ``<|start|>assistant`` came first, stray
``<|message|>``/``<|constrain|>``/reserved tokens inside content are skipped so the text around them stays in
the current item, and tokens after a stop token are ignored (the engine should have stopped).

Two rules come from what real gpt-oss runs wrote. Text written where a header should be (no special token)
is the answer only when the output ends with it; when the model goes on past it (``<|start|>``, a
``<|channel|>`` after several words, or ``<|end|>`` followed by anything but a stop token) it was thinking,
and becomes reasoning: ``HEADER_END`` holds it until the next token says which (each ``BETWEEN`` row
other than ``SKIP`` releases it as reasoning; a stop token or the end releases it as the answer). A
header with a channel that ``<|end|>`` closes before ``<|message|>``, its words lost, is dropped when
messages follow it; the output ending right after it still fails the response.
"""

from __future__ import annotations

import enum

from ..vocab import FIRST_SPECIAL

__all__ = ["TRANSITIONS", "Action", "State", "TokenClass", "classify"]


class State(enum.Enum):
    HEADER = "HEADER"  # reading a header (an engine call starts here)
    CONTENT = "CONTENT"  # inside a message's content: one item is open
    BETWEEN = "BETWEEN"  # after <|end|>: expecting <|start|>
    STOPPED = "STOPPED"  # after <|return|> or <|call|>: the engine call should end
    AWAIT_TOOL = "AWAIT_TOOL"  # a built-in tool call waits for the caller to report its result
    READY = "READY"  # the tool result is in: the caller may start the next engine call or finish
    CLOSED = "CLOSED"  # the terminal event has been emitted


class TokenClass(enum.Enum):
    TEXT = "TEXT"
    START = "START"
    CHANNEL = "CHANNEL"
    MESSAGE = "MESSAGE"
    CONSTRAIN = "CONSTRAIN"
    END = "END"
    CALL = "CALL"
    RETURN = "RETURN"
    OTHER = "OTHER"  # <|reserved_N|>, <|startoftext|>, <|endoftext|>: no meaning inside a completion


class Action(enum.Enum):
    APPEND_TEXT = "append text to the open item"
    HEADER_ADD = "add the token to the header"
    HEADER_BEGIN = "begin a new header"
    HEADER_BEGIN_WITH = "begin a new header that starts with this token"
    HEADER_RESTART = "drop the header so far and begin again"
    HEADER_END = "header ended by a terminator: hold or flush headerless text, no item"
    HEADER_CHANNEL = "add <|channel|> to the header; several words before it are reasoning, not a role"
    OPEN = "parse the header and open its item"
    CLOSE = "close the open item"
    CLOSE_THEN_HEADER = "close the open item and begin a new header"
    CLOSE_THEN_HEADER_WITH = "close the open item and begin a header that starts with this token"
    SKIP = "ignore the token"


_SPECIAL_CLASSES = {
    200002: TokenClass.RETURN,
    200003: TokenClass.CONSTRAIN,
    200005: TokenClass.CHANNEL,
    200006: TokenClass.START,
    200007: TokenClass.END,
    200008: TokenClass.MESSAGE,
    200012: TokenClass.CALL,
}


def classify(token: int) -> TokenClass:
    if token < FIRST_SPECIAL:
        return TokenClass.TEXT
    return _SPECIAL_CLASSES.get(token, TokenClass.OTHER)


S, T, A = State, TokenClass, Action

# (state, token class) -> (action, next state). STOPPED/AWAIT_TOOL: the engine should have stopped; any
# further token of this engine call is ignored. READY and CLOSED accept no tokens (the caller's error).
TRANSITIONS: dict[tuple[State, TokenClass], tuple[Action, State]] = {
    (S.HEADER, T.TEXT): (A.HEADER_ADD, S.HEADER),
    (S.HEADER, T.CHANNEL): (A.HEADER_CHANNEL, S.HEADER),
    (S.HEADER, T.CONSTRAIN): (A.HEADER_ADD, S.HEADER),
    (S.HEADER, T.START): (A.HEADER_RESTART, S.HEADER),
    (S.HEADER, T.MESSAGE): (A.OPEN, S.CONTENT),
    (S.HEADER, T.END): (A.HEADER_END, S.BETWEEN),
    (S.HEADER, T.CALL): (A.HEADER_END, S.STOPPED),
    (S.HEADER, T.RETURN): (A.HEADER_END, S.STOPPED),
    (S.HEADER, T.OTHER): (A.SKIP, S.HEADER),
    (S.CONTENT, T.TEXT): (A.APPEND_TEXT, S.CONTENT),
    (S.CONTENT, T.START): (A.CLOSE_THEN_HEADER, S.HEADER),
    (S.CONTENT, T.CHANNEL): (A.CLOSE_THEN_HEADER_WITH, S.HEADER),
    (S.CONTENT, T.MESSAGE): (A.SKIP, S.CONTENT),
    (S.CONTENT, T.CONSTRAIN): (A.SKIP, S.CONTENT),
    (S.CONTENT, T.END): (A.CLOSE, S.BETWEEN),
    # A built-in tool call refines STOPPED to AWAIT_TOOL (and so does <|end|> after one: the call is made).
    # An MCP call that needs approval refines BETWEEN/HEADER to STOPPED: the request ends the response.
    (S.CONTENT, T.CALL): (A.CLOSE, S.STOPPED),
    (S.CONTENT, T.RETURN): (A.CLOSE, S.STOPPED),
    (S.CONTENT, T.OTHER): (A.SKIP, S.CONTENT),
    # Headerless text held at <|end|> is released as reasoning by every BETWEEN row that is not SKIP (the
    # model goes on), and as the answer when the output ends (a stop token, the end of the engine call).
    (S.BETWEEN, T.START): (A.HEADER_BEGIN, S.HEADER),
    (S.BETWEEN, T.CHANNEL): (A.HEADER_BEGIN_WITH, S.HEADER),
    (S.BETWEEN, T.CONSTRAIN): (A.HEADER_BEGIN_WITH, S.HEADER),
    (S.BETWEEN, T.TEXT): (A.HEADER_BEGIN_WITH, S.HEADER),
    (S.BETWEEN, T.MESSAGE): (A.OPEN, S.CONTENT),
    (S.BETWEEN, T.END): (A.SKIP, S.BETWEEN),
    (S.BETWEEN, T.CALL): (A.SKIP, S.STOPPED),
    (S.BETWEEN, T.RETURN): (A.SKIP, S.STOPPED),
    (S.BETWEEN, T.OTHER): (A.SKIP, S.BETWEEN),
}
for _cls in TokenClass:
    TRANSITIONS[(S.STOPPED, _cls)] = (A.SKIP, S.STOPPED)
    TRANSITIONS[(S.AWAIT_TOOL, _cls)] = (A.SKIP, S.AWAIT_TOOL)
del _cls
