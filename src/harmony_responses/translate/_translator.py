"""The Translator: generated Harmony token ids in, Responses stream events out.

Sans-I/O in the manner of h11's ``Connection``: ``receive_tokens`` and ``receive_end`` only buffer,
``next_event`` returns the next event (or a sentinel saying what it waits for), ``events`` drains
everything buffered into a list. No I/O, no clock and no random ids inside: the caller injects both.

Every token is processed on its own (pitfalls.md #1-#4: text lost or misrouted when an engine chunk holds
several tokens), so the events for a token stream are the same whatever the chunking. Each token costs
O(1): text is kept as a list of deltas joined once when the item closes, and nothing is re-scanned.

The translator owns ``sequence_number`` (0, 1, 2, … over every event), ``output_index`` (assigned once at
``output_item.added``), ``content_index`` (per item, from 0), item ids (created at ``added``, reused in
``done`` and in the final response) and the final Response, built from the streamed items themselves.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .. import _compiled
from ..tokens import FinishReason, TokenLogprob
from ..vocab import FIRST_SPECIAL, Vocabulary
from ._citations import CitationFilter, CitationResolver, FileCitationResolver
from ._custom import InputUnwrapper
from ._decode import TokenDecoder
from ._errors import LocalProtocolError, RemoteProtocolError
from ._header import CHANNEL, CONSTRAIN, normalise_channel, parse_header
from ._items import (
    SHAPES,
    added_item,
    delta_template,
    file_search_queries,
    summary_delta_template,
    text_part,
    tool_search_arguments,
    web_search_action,
)
from ._items import Item as _Item
from ._recipients import ItemKind, RecipientMap, Target
from ._response import response_skeleton, usage_object
from ._state import TRANSITIONS, Action, State, classify

__all__ = ["AWAIT_TOOL", "DONE", "NEED_TOKENS", "ToolCall", "Translator"]

Event = dict[str, Any]

# The compiled run of plain text tokens (_text_run.c: the inline path of ``events`` for a run of such tokens,
# built at install where a C compiler is), None where it is not used: this file's Python then takes every
# token, with the same events (tests/translate/test_translator_properties.py runs both).
_TakeText = Callable[[deque[Any], tuple[str | None, ...], int, Event, list[str], list[Event], int], int]
TEXT_RUN: _TakeText | None
TEXT_RUN, _text_run_why_not = _compiled.load(f"{__package__}._text_run", "take", "text run")


def describe_text_run() -> str:
    """What start-up says of how the translator takes text tokens."""
    return _compiled.describe(TEXT_RUN, _text_run_why_not, "text tokens taken", "text run")


# A header is a dozen tokens (`<|channel|>commentary to=functions.get_weather <|constrain|>json`); a long
# MCP tool name may take a few dozen. Past this many tokens without <|message|> the model is not writing a
# header: text without <|channel|> is treated as a message's content, anything else fails the response.
MAX_HEADER_TOKENS = 128
# Text without any header is held, not streamed, until the model shows whether it is the answer (the output
# ends with it) or thinking it went on past (see _state.py). Real runs wrote a few hundred tokens of chain of
# thought so; past this many the text is streamed as the answer, so that a model that never writes headers
# still streams (its first tokens arrive late, not never).
MAX_HEADERLESS_TOKENS = 2048
_CHANNEL_TOKEN = 200005
_CONTENT, _CLOSED, _READY = State.CONTENT, State.CLOSED, State.READY
_OTHER_ROLES = frozenset({"user", "system", "developer"})
_PHASE_CHANNELS = {"final_answer": "final", "commentary": "commentary"}


def _unpack(entry: int | tuple[int, TokenLogprob | None, bool]) -> tuple[int, TokenLogprob | None, bool]:
    """A buffered token as (token, logprob, generated): a bare id is a generated token without a logprob."""
    return entry if entry.__class__ is tuple else (entry, None, True)  # type: ignore[return-value]


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


NEED_TOKENS = _Sentinel("NEED_TOKENS")  # buffer empty: feed tokens or the end of the engine call
AWAIT_TOOL = _Sentinel("AWAIT_TOOL")  # a built-in tool call waits for send_tool_result()
DONE = _Sentinel("DONE")  # the terminal event has been returned


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A built-in tool call the model made, for the caller to execute."""

    kind: ItemKind
    item_id: str
    name: str  # python; search/open/find; the MCP tool's name
    namespace: str | None  # "browser", the MCP server label
    arguments: str  # as the model wrote it (code for python, JSON otherwise)
    channel: str | None


class Translator:
    """Translate one response's generated Harmony tokens into Responses stream events.

    Args:
        vocab: token bytes, from ``harmony_responses.vocab.load_vocabulary()``.
        new_id: makes an id from a prefix (``"msg"`` → ``"msg_…"``).
        clock: Unix seconds, for ``created_at`` and ``completed_at``.
        response: the Response object to start from (the request's echo, see ``response_skeleton``);
            a minimal one is made when omitted.
        queued: background mode (responses-protocol.md §5.1): start with ``response.created`` (status
            ``queued``) and ``response.queued``; ``begin()`` sends ``response.in_progress`` when work starts.
        recipients: the request's declared tools, deciding which item a tool recipient becomes.
        logprobs: put per-token logprobs on ``output_text`` events (``include`` asked for them).
        citations: resolves a browser cursor to the ``(url, title)`` of the page it showed (None: not
            citable), when the browser tool is declared. Message text then has its ``【cursor†L…】`` citations
            replaced and announced as ``url_citation`` annotations (``_citations.py``).
        file_citations: resolves a file search result ``(call, result)`` to its ``(file_id, filename)``, when
            the file_search tool is declared: ``【call:result†…】`` citations become ``file_citation`` annotations.
        summaries: the request asked for reasoning summaries (``reasoning.summary``). gpt-oss writes none,
            so each reasoning item's own text is its summary. Both stream as the text is written: the
            ``reasoning_text`` part opens with the item, the summary part with its first text
            (``reasoning_summary_part.added``), and each piece of text is a ``reasoning_summary_text.delta``
            then a ``reasoning_text.delta``; at the close the summary part ends (``.done``,
            ``reasoning_summary_part.done``), then the ``reasoning_text`` part.
    """

    def __init__(
        self,
        *,
        vocab: Vocabulary,
        new_id: Callable[[str], str],
        clock: Callable[[], int],
        response: dict[str, Any] | None = None,
        queued: bool = False,
        recipients: RecipientMap | None = None,
        logprobs: bool = False,
        citations: CitationResolver | None = None,
        summaries: bool = False,
        file_citations: FileCitationResolver | None = None,
    ) -> None:
        self._vocab = vocab
        self._token_bytes = vocab.token_bytes
        self._token_text = vocab.token_text
        # The compiled text run takes a vocabulary's table as a tuple (Vocabulary's own).
        self._take_text = TEXT_RUN if type(vocab.token_text) is tuple else None
        self._new_id = new_id
        self._clock = clock
        self._recipients = recipients or RecipientMap()
        self._want_logprobs = logprobs
        self._citations = citations
        self._file_citations = file_citations
        self._summaries = summaries
        self._decoder = TokenDecoder(vocab)
        if response is None:
            response = response_skeleton(id=new_id("resp"), created_at=clock(), model="gpt-oss")
        self._response: dict[str, Any] = orjson.loads(orjson.dumps(response))  # a deep copy (see _snapshot)
        self._response.update(status="in_progress", output=[], usage=None, error=None, incomplete_details=None)

        self.state = State.HEADER
        self.error: RemoteProtocolError | None = None
        # A list, handed over whole by events() (no copy): next_event() pops its head, but a token makes only a
        # few events, so the list it pops from stays short.
        self._events: list[Event] = []
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._item: _Item | None = None
        self._compaction: tuple[int, dict[str, Any]] | None = None  # (output_index, added item) while open
        self._tool_call: ToolCall | None = None
        self._header: list[int] = []
        # The logprobs of the header's tokens, in step: header tokens that turn out to be headerless text
        # (the model skipped its header) are an answer whose logprobs were asked for too.
        self._header_lps: list[TokenLogprob | None] = []
        self._held: list[int] | None = None  # headerless text ended by <|end|>: the answer, or thinking?
        self._held_lps: list[TokenLogprob | None] = []
        self._lost_header: str | None = None  # a header <|end|> closed, words lost: fails unless messages follow
        self._long_headerless = False  # the header buffer is past MAX_HEADER_TOKENS of plain text
        # Buffered tokens: a generated token without a logprob is its bare id (receive_tokens extends the deque in
        # C, no object per token), any other one a (token, logprob, generated) tuple (see _unpack).
        self._pending: deque[int | tuple[int, TokenLogprob | None, bool]] = deque()
        self._pending_end: tuple[FinishReason, str | None] | None = None
        self._counting = True
        # Told of each recovery from malformed Harmony as ``(rule, detail)``: a response's trace (tokentrace/)
        # sets it; None costs nothing, since only the rare recovery branches look at it.
        self.on_recovery: Callable[[str, str], None] | None = None

        self.input_tokens = 0
        self.cached_tokens = 0
        self.output_tokens = 0
        self.reasoning_tokens = 0
        # Built-in tools' results fed back to the model, a usage detail reported by runs that have tools (None:
        # not reported, the usage stays the API's).
        self.tool_output_tokens: int | None = None
        # output_tokens when the last built-in call was made: where the tool loop cuts the engine call's tokens
        # to splice the tool result in (tokens the engine wrote after the call are not part of the prompt).
        self.output_tokens_at_call = 0

        self._queued = queued
        if queued:
            self._response["status"] = "queued"
            self._emit({"type": "response.created", "response": self._opening()})
            self._emit({"type": "response.queued", "response": self._opening()})
        else:
            self._emit({"type": "response.created", "response": self._opening()})
            self._emit({"type": "response.in_progress", "response": self._opening()})

    # ------------------------------------------------------------------ public API: input

    def receive_tokens(self, token_ids: Sequence[int], logprobs: Sequence[TokenLogprob | None] | None = None) -> None:
        """Buffer generated token ids (any number), optionally with one logprob entry per token."""
        state = self.state
        # One test for the common case (called once per engine chunk, often one token): the refusals below.
        if self._queued or self._pending_end is not None or state is _CLOSED or state is _READY:
            self._check_receive()
        if logprobs is None:
            self._pending.extend(token_ids)
            return
        if len(logprobs) != len(token_ids):
            raise LocalProtocolError(f"got {len(token_ids)} tokens but {len(logprobs)} logprobs")
        append = self._pending.append
        for token, lp in zip(token_ids, logprobs, strict=True):
            append((token, lp, True) if lp is not None else token)

    def takes_text(self, token_ids: Sequence[int]) -> bool:
        """Whether ``token_ids`` (no logprobs) would only add text to the item streaming now, deltas and nothing
        else, the state the same after them: plain text tokens inside content whose text streams as it comes,
        nothing buffered before them. A server may then translate them outside its stream loop (run/loop.py)."""
        return (
            self.state is _CONTENT
            and not self._pending
            and self._pending_end is None
            and self._item is not None
            and self._item.fast is not None
            and max(token_ids, default=FIRST_SPECIAL) < FIRST_SPECIAL
        )

    def _check_receive(self) -> None:
        """Refuse tokens where they cannot come; a response failed on bad output drops them (see _step)."""
        if self._queued:
            raise LocalProtocolError("can't receive tokens before begin() of a queued response")
        if self.state is State.CLOSED and self.error is None or self._pending_end is not None:
            raise LocalProtocolError("can't receive tokens after the end of generation")
        if self.state is State.READY:
            raise LocalProtocolError("can't receive tokens before start_engine_call() after a tool result")

    def receive_prefill(self, token_ids: Iterable[int]) -> None:
        """Tokens the prompt already wrote after ``<|start|>assistant`` (a forced tool call's header).

        They shape the items like generated tokens but are not counted as output.
        """
        for token in token_ids:
            self._pending.append((token, None, False))

    def receive_usage(self, *, prompt_tokens: int, cached_tokens: int = 0) -> None:
        """Token counts of one engine call's prompt (summed over the calls of the response)."""
        self.input_tokens += prompt_tokens
        self.cached_tokens += cached_tokens

    def count_tool_output(self, tokens: int) -> None:
        """A built-in tool's result fed back to the model took ``tokens`` of the next prompt
        (``usage.output_tokens_details.tool_output_tokens``; the prompt's count is input, as always).
        ``count_tool_output(0)`` makes the usage report the detail without adding to it."""
        self.tool_output_tokens = (self.tool_output_tokens or 0) + tokens

    def receive_end(self, reason: FinishReason, message: str | None = None) -> None:
        """The engine call ended: ``stop`` (stop token or end of sequence), ``length`` or ``error``."""
        if self._pending_end is not None or self.state is State.CLOSED and self.error is None:
            raise LocalProtocolError("the end of generation was already received")
        if reason not in ("stop", "length", "error"):
            raise LocalProtocolError(f"unknown finish reason {reason!r}")
        self._pending_end = (reason, message)

    def start_engine_call(self) -> None:
        """After a tool result: the next engine call's tokens follow (its prompt ends ``<|start|>assistant``)."""
        if self.state is not State.READY:
            raise LocalProtocolError(f"can't start an engine call in state {self.state.value}")
        self.state = State.HEADER
        self._header = []
        self._header_lps = []

    @property
    def pending_tool_call(self) -> ToolCall | None:
        return self._tool_call if self.state is State.AWAIT_TOOL else None

    def send_tool_result(
        self,
        *,
        output: str | None = None,
        error: str | dict[str, Any] | None = None,
        outputs: list[dict[str, Any]] | None = None,
        action: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        results: list[dict[str, Any]] | None = None,
    ) -> None:
        """Report the pending built-in call's result; its remaining events follow, then state READY.

        Args:
            output: the tool's text output (``mcp_call.output``).
            error: the failure (a string, or an MCP error object); the item ends ``failed``.
            outputs: ``code_interpreter_call.outputs`` (``[{"type": "logs", "logs": …}]``), when included.
            action: the ``web_search_call`` action with real URLs, replacing the one read from arguments.
            tools: the tools a tool search loaded: a ``tool_search_output`` item lists them after the call.
            results: a ``file_search_call``'s ``results`` (None unless the request includes them).
        """
        # Process what is buffered first: the call may not have been read yet.
        self._process_pending()
        if self.state is not State.AWAIT_TOOL or self._item is None:
            raise LocalProtocolError(f"no tool call is waiting for a result (state {self.state.value})")
        item = self._item
        status = "failed" if error is not None else "completed"
        done = dict(item.added, status=status)
        arguments = "".join(item.parts)
        if item.kind is ItemKind.TOOL_SEARCH_CALL:
            # The type has no failed status: a call that did not run (max_tool_calls) is incomplete.
            done["status"] = "completed" if error is None else "incomplete"
            self._done_item(item, done)
            if error is None:
                self._add_tool_search_output(done["call_id"], tools or [])
            self._tool_call = None
            self.state = State.READY
            return
        if item.kind is ItemKind.CODE_INTERPRETER:
            done["code"] = arguments
            done["outputs"] = outputs
            if error is None:
                self._emit_item_event("response.code_interpreter_call.completed", item)
        elif item.kind is ItemKind.WEB_SEARCH:
            done["action"] = action if action is not None else web_search_action(item.target, arguments)
            if error is None:
                self._emit_item_event("response.web_search_call.completed", item)
        elif item.kind is ItemKind.FILE_SEARCH:
            done["queries"] = file_search_queries(arguments)
            done["results"] = results
            if error is None:
                self._emit_item_event("response.file_search_call.completed", item)
        else:
            done["arguments"] = arguments
            if error is None:
                done["output"] = output if output is not None else ""
                self._emit_item_event("response.mcp_call.completed", item)
            else:
                done["error"] = (
                    error
                    if isinstance(error, dict)
                    else {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": error}]}
                )
                self._emit_item_event("response.mcp_call.failed", item)
        self._done_item(item, done)
        self._tool_call = None
        self.state = State.READY

    def add_mcp_list_tools(
        self, server_label: str, *, tools: list[dict[str, Any]] | None = None, error: str | None = None
    ) -> dict[str, Any]:
        """Emit a whole ``mcp_list_tools`` item (the server's tools, or the ``error`` that stopped the listing).

        Called by the server before the model's first item, once per MCP server it listed (the listing itself
        happens outside, before the prompt can declare the tools). Returns the done item.
        """
        self._require_between_items("add an mcp_list_tools item")
        index = len(self._output)
        item_id = self._new_id("mcpl")
        added: dict[str, Any] = {"id": item_id, "type": "mcp_list_tools", "server_label": server_label, "tools": []}
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        ref = {"item_id": item_id, "output_index": index}
        self._emit({"type": "response.mcp_list_tools.in_progress", **ref})
        done = dict(added, tools=[] if error is not None else list(tools or ()))
        if error is not None:
            done["error"] = error
            self._emit({"type": "response.mcp_list_tools.failed", **ref})
        else:
            self._emit({"type": "response.mcp_list_tools.completed", **ref})
        self._emit({"type": "response.output_item.done", "output_index": index, "item": done})
        self._output.append(done)
        return done

    def _add_tool_search_output(self, call_id: str, tools: list[dict[str, Any]]) -> None:
        """The whole ``tool_search_output`` item of a search the server ran: the tools it loaded."""
        index = len(self._output)
        added = {
            "id": self._new_id("tso"),
            "type": "tool_search_output",
            "status": "in_progress",
            "call_id": call_id,
            "execution": "server",
            "tools": [],
        }
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        done = dict(added, status="completed", tools=tools)
        self._emit({"type": "response.output_item.done", "output_index": index, "item": done})
        self._output.append(done)

    def open_compaction(self) -> str:
        """Announce a ``compaction`` item before the model's first item: its ``output_item.added`` and then
        ``response.compaction.compacting`` (the summary is being written, elsewhere: its tokens never reach
        this translator). ``close_compaction`` ends it. Returns the item's id."""
        self._require_between_items("start a compaction")
        if self._compaction is not None:
            raise LocalProtocolError("a compaction is already open")
        index = len(self._output)
        # encrypted_content is a required string of the item type: empty until the summary is sealed.
        added: dict[str, Any] = {"id": self._new_id("cmp"), "type": "compaction", "encrypted_content": ""}
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        self._emit({"type": "response.compaction.compacting", "item_id": added["id"], "output_index": index})
        self._compaction = (index, added)
        return added["id"]

    def close_compaction(self, encrypted_content: str) -> dict[str, Any]:
        """End the open compaction item with its sealed summary (``""``: none was made); returns the done item."""
        if self._compaction is None:
            raise LocalProtocolError("no compaction is open")
        (index, added), self._compaction = self._compaction, None
        done = dict(added, encrypted_content=encrypted_content)
        self._emit({"type": "response.output_item.done", "output_index": index, "item": done})
        self._output.append(done)
        return done

    def count_output(self, *, output_tokens: int, reasoning_tokens: int = 0) -> None:
        """Tokens generated for this response outside this translator (a compaction's summary): usage only."""
        self.output_tokens += output_tokens
        self.reasoning_tokens += reasoning_tokens

    def start_mcp_call(
        self,
        server_label: str,
        name: str,
        arguments: str,
        *,
        approval_request_id: str | None = None,
        channel: str | None = "analysis",
    ) -> ToolCall:
        """Open an ``mcp_call`` the model did not write in this response: a call the user approved.

        Its arguments stream as one delta, then the translator waits for ``send_tool_result`` as after a call
        the model made (state AWAIT_TOOL, ``pending_tool_call`` set); the next engine call follows the result.
        """
        self._require_between_items("start an mcp_call")
        target = Target(ItemKind.MCP_CALL, name, server_label)
        item = self._open_item(ItemKind.MCP_CALL, target, channel=channel, approval_request_id=approval_request_id)
        if arguments:
            item.parts.append(arguments)
            self._emit_delta(item, arguments)
        self._make_call(item)
        assert self._tool_call is not None
        return self._tool_call

    def _require_between_items(self, what: str) -> None:
        if (
            self._item is not None
            or self._header
            or self._compaction is not None
            or self.state not in (State.HEADER, State.READY)
        ):
            raise LocalProtocolError(f"can't {what} in state {self.state.value} (only between items)")

    # ------------------------------------------------------------------ public API: output

    def next_event(self) -> Event | _Sentinel:
        """The next event, or NEED_TOKENS / AWAIT_TOOL / DONE when there is none yet."""
        events = self._events
        while not events:
            if self._pending:
                self._step(*_unpack(self._pending.popleft()))
            elif self._pending_end is not None:
                reason, message = self._pending_end
                self._pending_end = None
                self._end(reason, message)
            elif self.state is State.CLOSED:
                return DONE
            elif self.state is State.AWAIT_TOOL:
                return AWAIT_TOOL
            else:
                return NEED_TOKENS
        return events.pop(0)

    def events(self, *, to_first_delta: bool = False) -> list[Event]:
        """Process everything buffered and return all the events it caused.

        ``to_first_delta``: stop after the first token that made a ``*.delta`` event, the rest staying
        buffered (``buffered``) for a later call: a server sends a response's first delta before it spends
        any time on the tokens behind it. The events are the same however the processing is split.
        """
        if to_first_delta:
            self._process_to_first_delta()
            out, self._events = self._events, []
            return out
        # The per-token loop is here rather than in _process_pending: this is the call made for every engine
        # chunk, often of one token, and a call less per chunk shows (see bench/translate_bench.py).
        pending = self._pending
        events = self._events
        token_text = self._token_text
        decoder = self._decoder
        take_text = self._take_text
        while pending:
            token = pending.popleft()
            if token.__class__ is tuple:
                self._step(*token)
                continue
            # The common case inline, no call: a generated text token without a logprob inside an item whose
            # text goes straight to deltas (Item.fast), a whole character (the decoder holds no bytes). This is
            # _step's CONTENT/TEXT row, _append_text and _emit_delta, in that order, with the same effects.
            if token < FIRST_SPECIAL and self.state is _CONTENT:
                item = self._item
                if item is not None:
                    fast = item.fast
                    if fast is not None and not decoder.held:
                        text = token_text[token]
                        if text:
                            self.output_tokens += 1
                            if item.reasoning:
                                self.reasoning_tokens += 1
                            item.parts.append(text)
                            event = fast.copy()
                            event["sequence_number"] = self._seq
                            event["delta"] = text
                            self._seq += 1
                            events.append(event)
                            if take_text is not None and pending:
                                # The tokens right behind it, while they are plain text too, in C: the same
                                # effects, token by token (_text_run.c); it stops at the first that is not.
                                taken = take_text(
                                    pending, token_text, FIRST_SPECIAL, fast, item.parts, events, self._seq
                                )
                                if taken:
                                    self._seq += taken
                                    self.output_tokens += taken
                                    if item.reasoning:
                                        self.reasoning_tokens += taken
                            continue
            self._step(token, None, True)
        if self._pending_end is not None:
            reason, message = self._pending_end
            self._pending_end = None
            self._end(reason, message)
        out, self._events = self._events, []
        return out

    def step_buffered(self) -> int | None:
        """Process only the oldest buffered token (a trace takes a prefill so, token by token): returns it, or
        None when no token is buffered. Its events join those not yet taken; ``taken()`` returns them."""
        if not self._pending:
            return None
        token, lp, generated = _unpack(self._pending.popleft())
        self._step(token, lp, generated)
        return token

    def taken(self) -> list[Event]:
        """The events produced so far, without processing what is buffered (``step_buffered``)."""
        out, self._events = self._events, []
        return out

    @property
    def buffered(self) -> bool:
        """Tokens (or the end) have been received that ``events()`` has not processed yet."""
        return bool(self._pending) or self._pending_end is not None

    @property
    def response(self) -> dict[str, Any]:
        """The Response as it stands (final once the terminal event has been produced)."""
        return self._snapshot()

    @property
    def status(self) -> str:
        """The Response's ``status`` as it stands (``response["status"]`` without copying the response)."""
        return str(self._response["status"])

    @property
    def output_items(self) -> list[dict[str, Any]]:
        return list(self._output)

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    def trace_state(self) -> tuple[str, str | None, str | None, str | None]:
        """Where the translator stands, for a trace: ``(state, header read so far, channel, open item id)``."""
        item = self._item
        header = self._header_text() if self._header else None
        if item is None:
            return self.state.value, header, None, None
        channel = item.channel
        if channel is None:  # a message's or reasoning's channel is its item's kind and phase
            phase = item.added.get("phase")
            channel = "analysis" if item.kind is ItemKind.REASONING else _PHASE_CHANNELS.get(phase, phase)
        return self.state.value, header, channel, item.id

    # ------------------------------------------------------------------ public API: lifecycle

    def begin(self) -> None:
        """A queued (background) response starts: status ``in_progress`` and ``response.in_progress``."""
        if self.state is State.CLOSED:
            return  # cancelled while queued: nothing starts
        if not self._queued:
            raise LocalProtocolError("begin() is for a queued response that has not begun")
        self._queued = False
        self._response["status"] = "in_progress"
        self._emit({"type": "response.in_progress", "response": self._opening()})

    def cancel(self) -> None:
        """End the response ``cancelled`` now (a background cancel, or the client gone); idempotent.

        What is buffered is processed first. The open item (if any) is closed ``incomplete``, as for a
        length cut, and the terminal event is ``response.incomplete`` carrying ``status: "cancelled"``: the
        event union has no cancelled event, and an event log must end with a terminal event that every
        client (and a resumed stream) recognises (responses-protocol.md §5.2, pitfalls.md #44).
        """
        if self._cut_short():
            self._terminal("cancelled")

    def fail(self, message: str) -> None:
        """End the response ``failed`` now, for a reason of the server's (e.g. it is shutting down); idempotent.

        As ``cancel``, but the end is ``error`` + ``response.failed`` with ``message``.
        """
        if self._cut_short():
            self._fail(message)

    def _cut_short(self) -> bool:
        """Process what is buffered, then close what is open ``incomplete``; False if already closed."""
        if self.state is not State.CLOSED:
            self._process_pending()
        if self.state is State.CLOSED:
            return False
        self._queued = False
        if self._compaction is not None:
            self.close_compaction("")  # cut short while the summary was being written: there is none
        if self._held is not None:
            held, self._held = self._held, None
            self._flush_headerless("completed", held, lps=self._held_lps)
        item = self._item
        if item is not None:
            self._close(item, "incomplete")
            self._tool_call = None
        elif self.state is State.HEADER and self._headerless_text(self._header) is not None:
            self._flush_headerless("incomplete", self._header, lps=self._header_lps)
        return True

    # ------------------------------------------------------------------ token processing

    def _process_pending(self) -> None:
        """Process everything buffered, its events left to be taken (the loop is events()'s: put them back)."""
        self._events = self.events()

    def _process_to_first_delta(self) -> None:
        pending = self._pending
        events = self._events
        step = self._step
        while pending:
            seen = len(events)
            step(*_unpack(pending.popleft()))
            for k in range(seen, len(events)):
                if events[k]["type"].endswith(".delta"):
                    return
        self._process_pending()  # the end, if it came

    def _step(self, token: int, lp: TokenLogprob | None, generated: bool) -> None:
        if generated:
            self.output_tokens += 1
        state = self.state
        item = self._item
        # The common case first: a text token inside content (the CONTENT/TEXT row of the table).
        if state is State.CONTENT and token < FIRST_SPECIAL and item is not None:
            self._append_text(item, token, lp)
            return
        if state is State.CLOSED:
            return  # the response already failed on bad model output; the engine's tail is dropped
        action, next_state = TRANSITIONS[(state, classify(token))]
        if self._held is not None and action is not Action.SKIP:
            # Headerless text held at <|end|> (only ever in BETWEEN): the model goes on, so it was thinking.
            held, self._held = self._held, None
            self._recovered("headerless_thinking", "text without a header, followed by more output: reasoning")
            self._flush_headerless("completed", held, answer=False)
        if action is Action.SKIP:
            if item is not None and item.kind is ItemKind.REASONING and generated:
                self.reasoning_tokens += 1
            self.state = next_state
        elif action is Action.HEADER_ADD:
            self._header.append(token)
            self._header_lps.append(lp)
            self.state = next_state
            if len(self._header) > MAX_HEADER_TOKENS:
                self._header_overflow(token)
        elif action is Action.HEADER_CHANNEL:
            if self._is_text_not_role():
                # "Let me think<|channel|>…": a role is one word; several words are text the model went on past.
                self._recovered("text_before_channel", f"text before a header, as reasoning: {self._header_text()!r}")
                header, self._header, self._header_lps = self._header, [], []
                self._flush_headerless("completed", header, answer=False)
            self._header.append(token)
            self._header_lps.append(lp)
            self.state = next_state
            if len(self._header) > MAX_HEADER_TOKENS:
                self._header_overflow(token)
        elif action is Action.OPEN:
            if self._long_headerless and len(self._header) > MAX_HEADER_TOKENS:
                self._stream_headerless()  # <|message|> inside long plain text: skipped, as inside content
            else:
                self._open()
        elif action is Action.APPEND_TEXT:  # pragma: no cover - taken by the fast path above
            assert item is not None
            self._append_text(item, token, lp)
        elif action is Action.CLOSE:
            assert item is not None
            if item.kind is ItemKind.REASONING and generated:
                self.reasoning_tokens += 1
            if item.kind.is_builtin_tool:
                self._make_call(item)
            elif item.kind is ItemKind.MCP_APPROVAL_REQUEST:
                self._close(item, "completed")
                self.state = State.STOPPED  # the request ends the response, whatever terminated it
            else:
                self._close(item, "completed")
                self.state = next_state
        elif action is Action.CLOSE_THEN_HEADER or action is Action.CLOSE_THEN_HEADER_WITH:
            assert item is not None
            if item.kind.is_builtin_tool:
                # A call without its <|call|>: make it; the rest of this engine call is ignored.
                self._recovered("call_without_call_token", "a tool call ended by a new header, not <|call|>")
                self._make_call(item)
                return
            if item.kind is ItemKind.MCP_APPROVAL_REQUEST:
                self._close(item, "completed")  # likewise: the request is complete and ends the response
                self.state = State.STOPPED
                return
            self._close(item, "completed")
            with_token = action is Action.CLOSE_THEN_HEADER_WITH
            self._header, self._header_lps = ([token], [lp]) if with_token else ([], [])
            self.state = next_state
        elif action is Action.HEADER_BEGIN:
            self._header, self._header_lps = [], []
            self.state = next_state
        elif action is Action.HEADER_BEGIN_WITH:
            self._header, self._header_lps = [token], [lp]
            self.state = next_state
        elif action is Action.HEADER_RESTART:
            if self._headerless_text(self._header) is not None:
                self._recovered("header_restart", "text without a header before <|start|>: reasoning")
            self._flush_headerless("completed", self._header, answer=False)  # text the model went on past
            self._header, self._header_lps = [], []
            self.state = next_state
        elif action is Action.HEADER_END:
            if _CHANNEL_TOKEN in self._header and self._header_would_lose_words():
                # A terminator inside a header that has words after its channel (``<|channel|>final Hello
                # there<|end|>``, ``<|channel|>commentary ...?<|end|>``, harmony.md §9.2): the model forgot
                # <|message|>. A stop token ends the output there, and ending quietly would drop its words: fail
                # naming the header, as _end does when the output ends inside a header. After <|end|> the model
                # goes on: the header is dropped (only its stray words are lost) and what follows is kept, unless
                # nothing does (_end fails then).
                if next_state is State.STOPPED:
                    self._model_error(f"the model ended a message inside its header: {self._header_text()!r}")
                    return
                self._lost_header = self._header_text()
                self._recovered("words_in_header", f"a header ended by <|end|> was dropped: {self._lost_header!r}")
            elif next_state is State.BETWEEN and self._headerless_text(self._header) is not None:
                self._held = self._header  # the answer if the output ends here, thinking if it goes on
                self._held_lps = self._header_lps
            else:
                self._flush_headerless("completed", self._header, lps=self._header_lps)
            self._header, self._header_lps = [], []
            self.state = next_state
        else:  # pragma: no cover - the table has no other actions
            raise AssertionError(action)

    def _append_text(self, item: _Item, token: int, lp: TokenLogprob | None) -> None:
        if item.kind is ItemKind.REASONING:
            self.reasoning_tokens += 1
        if item.logprobs is not None and lp is not None:
            entry = self._logprob_entry(token, lp)
            item.logprobs.append(entry)
            item.pending_lp.append(entry)
        text = self._decoder.decode(token)
        if text:
            if item.cites is not None:
                self._cite_text(item, item.cites.feed(text))
            else:
                if item.unwrap is not None:
                    text = item.unwrap.feed(text)
                    if not text:
                        return
                item.parts.append(text)
                self._emit_delta(item, text)

    def _push_text(self, item: _Item, text: str) -> None:
        """Text for an item outside the per-token path (headerless text, the decoder's tail)."""
        if item.unwrap is not None:
            text = item.unwrap.feed(text)
            if text:
                item.parts.append(text)
                self._emit_delta(item, text)
        elif item.cites is not None:
            self._cite_text(item, item.cites.feed(text))
        else:
            item.parts.append(text)
            self._emit_delta(item, text)

    def _cite_text(self, item: _Item, pieces: list[str | dict[str, Any]]) -> None:
        """Emit what the citation filter released: text as deltas, each annotation right after its text."""
        cites = item.cites
        assert cites is not None
        for piece in pieces:
            if isinstance(piece, str):
                if piece:
                    item.parts.append(piece)
                    self._emit_delta(item, piece)
                continue
            self._emit(
                {
                    "type": "response.output_text.annotation.added",
                    "item_id": item.id,
                    "output_index": item.index,
                    "content_index": 0,
                    "annotation_index": cites.announced,
                    "annotation": piece,
                }
            )
            cites.announced += 1

    def _emit_delta(self, item: _Item, text: str) -> None:
        template = item.delta
        if template is None:
            return
        if item.summary_open is False:
            item.summary_open = True
            self._emit_summary_part("response.reasoning_summary_part.added", item, "")
        if item.summary_delta is not None:
            summary = item.summary_delta.copy()
            summary["sequence_number"] = self._seq
            summary["delta"] = text
            self._seq += 1
            self._events.append(summary)
        event = template.copy()
        event["sequence_number"] = self._seq
        event["delta"] = text
        if item.logprobs is not None:
            event["logprobs"] = item.pending_lp
            item.pending_lp = []
        self._seq += 1
        self._events.append(event)

    def _header_text(self, tokens: list[int] | None = None) -> str:
        data = b"".join(self._token_bytes[t] for t in (self._header if tokens is None else tokens))
        return data.decode("utf-8", errors="replace")

    def _headerless_text(self, tokens: list[int]) -> str | None:
        """The text of header tokens that are not a header at all but text the model wrote without one."""
        if any(t >= FIRST_SPECIAL for t in tokens):
            return None
        text = self._header_text(tokens)
        stripped = text.strip()
        if stripped.startswith("assistant") and stripped[len("assistant") : len("assistant") + 1] in ("", " ", "\n"):
            # "<|start|>assistant Hello" without a channel: the role word is the header, the rest is text.
            text = stripped[len("assistant") :].lstrip()
            stripped = text
        if not stripped:
            return None
        return text

    def _header_would_lose_words(self) -> bool:
        """True when the header has words after its channel that are no recipient or content type."""
        after_channel = self._header_text().rsplit(CHANNEL, 1)[1]
        words = [w for w in after_channel.replace(CONSTRAIN, " ").split() if not w.startswith("to=")]
        return len(words) > 1 + (CONSTRAIN in after_channel)

    def _is_text_not_role(self) -> bool:
        """The header so far is plain text of several words (or very long), which no role is."""
        if len(self._header) > MAX_HEADER_TOKENS:
            return self._long_headerless
        text = self._headerless_text(self._header)
        if text is None:
            return False
        return len([word for word in text.split() if not word.startswith("to=")]) > 1

    def _flush_headerless(
        self,
        status: str,
        tokens: list[int],
        *,
        answer: bool = True,
        lps: list[TokenLogprob | None] | None = None,
    ) -> None:
        """Headerless text as an item of its own: the answer (the output ended with it) or reasoning.

        ``lps`` are the tokens' logprobs (an answer carries them, as any message does).
        """
        text = self._headerless_text(tokens)
        if text is None:
            return
        if answer:
            item = self._open_item(ItemKind.MESSAGE, None, phase="final_answer")
            if lps:
                self._headerless_logprobs(item, tokens, lps, text)
        else:
            item = self._open_item(ItemKind.REASONING, None)
            self.reasoning_tokens += len(tokens)
        self._push_text(item, text)
        self._close(item, status)

    def _headerless_logprobs(
        self, item: _Item, tokens: list[int], lps: list[TokenLogprob | None], text: str | None = None
    ) -> None:
        """Queue the logprobs of headerless tokens on ``item`` (sent with its next delta).

        ``text`` is what the tokens show: the tokens of a leading role word it dropped ("assistant") carry
        no logprob entry, as the text has none of their bytes.
        """
        if item.logprobs is None:
            return
        skip = 0
        if text is not None:
            whole = sum(len(self._token_bytes[t]) for t in tokens)
            skip = whole - len(text.encode("utf-8", "surrogatepass"))
        for token, lp in zip(tokens, lps, strict=False):
            size = len(self._token_bytes[token])
            if 0 < size <= skip:  # wholly inside the dropped prefix (a token it shares keeps its entry)
                skip -= size
                continue
            skip = 0
            if lp is not None:
                entry = self._logprob_entry(token, lp)
                item.logprobs.append(entry)
                item.pending_lp.append(entry)

    def _header_overflow(self, token: int) -> None:
        header = self._header
        if len(header) == MAX_HEADER_TOKENS + 1:
            self._long_headerless = self._headerless_text(header) is not None
        elif self._long_headerless and token >= FIRST_SPECIAL:
            header.pop()  # a stray <|constrain|> inside long plain text: skipped, as inside content
            self._header_lps.pop()
            return
        if not self._long_headerless:
            self._model_error(
                f"the model wrote a message header of more than {MAX_HEADER_TOKENS} tokens without "
                f"<|message|>: {self._header_text()[:200]!r}"
            )
        elif len(header) > MAX_HEADERLESS_TOKENS:
            self._stream_headerless()

    def _stream_headerless(self) -> None:
        """Long text without any header: the model skipped the header; its text is streamed as the answer."""
        self._recovered("long_headerless_text", f"{len(self._header)} tokens without a header: the answer")
        header, self._header = self._header, []
        lps, self._header_lps = self._header_lps, []
        self._long_headerless = False
        item = self._open_item(ItemKind.MESSAGE, None, phase="final_answer")
        self._headerless_logprobs(item, header, lps)
        # Decode through the item's incremental decoder, not _header_text(): the last header token may end
        # inside a multi-byte character that the next content token completes (it became U+FFFD before).
        text = "".join(self._decoder.decode(token) for token in header)
        if text:
            self._push_text(item, text)
        self.state = State.CONTENT

    # ------------------------------------------------------------------ items

    def _open(self) -> None:
        text = self._header_text()
        header = parse_header(text, self._recipients.is_tool_name)
        header_tokens = len(self._header) + 1  # and <|message|>
        self._header, self._header_lps = [], []
        if header.role is not None and (header.addressed_to_assistant or header.role in _OTHER_ROLES):
            # A tool result or a user/system turn written by the model itself: its own turn ended before this
            # (it should have stopped at <|call|> or <|return|>). What it wrote so far stands; the rest is
            # not the assistant's and is ignored, as tokens after a stop token are.
            self._recovered("other_role_turn", f"the model began a {header.role} turn itself: output ends here")
            self.state = State.STOPPED
            return
        channel = normalise_channel(header.channel)
        if header.recipient is not None:
            target = self._recipients.resolve(header.recipient)
            self._open_item(target.kind, target, channel=header.channel)
        elif channel == "commentary":
            self._open_item(ItemKind.MESSAGE, None, phase="commentary")
        elif channel is None or channel == "final":
            self._open_item(ItemKind.MESSAGE, None, phase="final_answer")
        else:
            # analysis, and channels Harmony does not define: shown as reasoning rather than as the answer,
            # since an unknown channel is more likely the model thinking than talking to the user.
            if channel != "analysis":
                self._recovered("unknown_channel", f"channel {header.channel!r} shown as reasoning")
            self._open_item(ItemKind.REASONING, None)
            self.reasoning_tokens += header_tokens
        self.state = State.CONTENT

    def _open_item(
        self,
        kind: ItemKind,
        target: Target | None,
        *,
        phase: str | None = None,
        channel: str | None = None,
        approval_request_id: str | None = None,
    ) -> _Item:
        self._decoder.flush()
        self._lost_header = None  # a message follows a header that lost its words: that header is just dropped
        added = added_item(
            kind,
            target,
            self._new_id,
            phase=phase,
            container_id=self._recipients.container_id,
            approval_request_id=approval_request_id,
        )
        item = _Item(kind, len(self._output), added, target, channel)
        shape = SHAPES[kind]
        summarised = kind is ItemKind.REASONING and self._summaries
        if shape.announced_at_open:
            self._emit({"type": "response.output_item.added", "output_index": item.index, "item": added})
            if shape.opening_part is not None:
                self._emit_part("response.content_part.added", item, shape.opening_part())
            if shape.in_progress_event is not None:
                self._emit_item_event(shape.in_progress_event, item)
        if summarised:
            # The text streams as the summary too, each piece before its reasoning_text delta; the summary part
            # opens with the first text (an empty reasoning message has no summary, as the API sends none).
            item.summary_delta = summary_delta_template(item.id, item.index)
            item.summary_open = False
        if shape.delta_event is not None:
            item.delta = delta_template(shape, item.id, item.index)
        if kind is ItemKind.CUSTOM_TOOL_CALL:
            item.unwrap = InputUnwrapper()
        if kind is ItemKind.MESSAGE:
            if self._want_logprobs:
                item.logprobs = []
            if self._citations is not None or self._file_citations is not None:
                item.cites = CitationFilter(self._citations, self._file_citations)
        item.reasoning = kind is ItemKind.REASONING
        if item.logprobs is None and item.cites is None and item.unwrap is None and item.summary_delta is None:
            item.fast = item.delta  # each piece of text is one delta, as is: the inline path may take it
        self._item = item
        return item

    def _finish_text(self, item: _Item) -> str:
        tail = self._decoder.flush()
        if tail:
            self._push_text(item, tail)
        if item.cites is not None:
            self._cite_text(item, item.cites.flush())  # an unfinished citation at the end is text
        if item.unwrap is not None:
            rest = item.unwrap.flush()  # what JSON decoding held back, or text that was not our JSON
            if rest:
                item.parts.append(rest)
                self._emit_delta(item, rest)
        return "".join(item.parts)

    def _close(self, item: _Item, status: str) -> None:
        """Close a message, reasoning or function call item (or a built-in one cut short)."""
        text = self._finish_text(item)
        kind = item.kind
        if kind is ItemKind.MCP_APPROVAL_REQUEST:
            self._finish_approval_request(item, text, status)
            return
        if kind.is_tool_search:
            self._finish_tool_search(item, text, status)
            return
        done = dict(item.added, status=status)
        if kind is ItemKind.MESSAGE:
            logprobs = item.logprobs if item.logprobs is not None else []
            self._emit(
                {
                    "type": "response.output_text.done",
                    "item_id": item.id,
                    "output_index": item.index,
                    "content_index": 0,
                    "text": text,
                    "logprobs": logprobs,
                }
            )
            part = text_part(text, logprobs)
            if item.cites is not None:
                part["annotations"] = item.cites.annotations
            self._emit_part("response.content_part.done", item, part)
            done["content"] = [part]
        elif kind is ItemKind.REASONING:
            if item.summary_open is not None:
                self._close_summary(item, text, status, done)
            self._emit(
                {
                    "type": "response.reasoning_text.done",
                    "item_id": item.id,
                    "output_index": item.index,
                    "content_index": 0,
                    "text": text,
                }
            )
            part = {"type": "reasoning_text", "text": text}
            self._emit_part("response.content_part.done", item, part)
            done["content"] = [part]
        elif kind is ItemKind.FUNCTION_CALL:
            self._emit(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item.id,
                    "output_index": item.index,
                    "arguments": text,
                    "name": item.added["name"],
                }
            )
            done["arguments"] = text
        elif kind is ItemKind.CUSTOM_TOOL_CALL:
            self._emit(
                {
                    "type": "response.custom_tool_call_input.done",
                    "item_id": item.id,
                    "output_index": item.index,
                    "input": text,
                }
            )
            done["input"] = text
        else:
            self._send_call_events(item, text)
            if kind is ItemKind.CODE_INTERPRETER:
                done["code"] = text
            elif kind is ItemKind.WEB_SEARCH:
                done["action"] = web_search_action(item.target, text)
            elif kind is ItemKind.FILE_SEARCH:
                done["queries"] = file_search_queries(text)
            else:
                done["arguments"] = text
        self._done_item(item, done)

    def _finish_approval_request(self, item: _Item, arguments: str, status: str) -> None:
        """Announce a complete approval request (added and done at once); drop one cut short.

        A request cut short (length, engine error, bad output) is never shown: its arguments are unfinished and
        the client could approve a call the model never completed. The response ends incomplete or failed.
        """
        self._item = None
        if status != "completed":
            return
        request = dict(item.added, arguments=arguments)
        self._emit({"type": "response.output_item.added", "output_index": item.index, "item": request})
        self._emit({"type": "response.output_item.done", "output_index": item.index, "item": dict(request)})
        self._output.append(request)

    def _finish_tool_search(self, item: _Item, text: str, status: str) -> None:
        """End a tool search call that is not waiting for the server's search.

        A client's call is announced whole when complete (added, then done); one cut short was never shown
        and is dropped, like an approval request (the client could act on arguments the model never finished).
        A server call cut short after it was announced ends ``incomplete``.
        """
        if not item.call_made:
            self._item = None
            if status != "completed":
                return
            self._announce_tool_search(item, text)
        self._done_item(item, dict(item.added, status=status))

    def _announce_tool_search(self, item: _Item, text: str) -> None:
        item.call_made = True
        item.added["arguments"] = tool_search_arguments(text)
        self._emit({"type": "response.output_item.added", "output_index": item.index, "item": dict(item.added)})

    def _send_call_events(self, item: _Item, text: str) -> None:
        """The events that mark a built-in call as made: its code/arguments are complete."""
        if item.call_made:
            return
        item.call_made = True
        if item.kind is ItemKind.CODE_INTERPRETER:
            self._emit(
                {
                    "type": "response.code_interpreter_call_code.done",
                    "item_id": item.id,
                    "output_index": item.index,
                    "code": text,
                }
            )
        elif item.kind is ItemKind.MCP_CALL:
            self._emit(
                {
                    "type": "response.mcp_call_arguments.done",
                    "item_id": item.id,
                    "output_index": item.index,
                    "arguments": text,
                }
            )

    def _make_call(self, item: _Item) -> None:
        """A built-in tool call is complete: announce it and wait for the caller to run it."""
        self.output_tokens_at_call = self.output_tokens
        text = self._finish_text(item)
        if item.kind is ItemKind.TOOL_SEARCH_CALL and not item.call_made:
            self._announce_tool_search(item, text)
        self._send_call_events(item, text)
        if item.kind is ItemKind.CODE_INTERPRETER:
            self._emit_item_event("response.code_interpreter_call.interpreting", item)
        elif item.kind is ItemKind.WEB_SEARCH:
            self._emit_item_event("response.web_search_call.searching", item)
        elif item.kind is ItemKind.FILE_SEARCH:
            self._emit_item_event("response.file_search_call.searching", item)
        target = item.target
        assert target is not None
        self._tool_call = ToolCall(
            kind=item.kind,
            item_id=item.id,
            name=target.name,
            namespace=target.namespace,
            arguments=text,
            channel=item.channel,
        )
        self.state = State.AWAIT_TOOL

    def _done_item(self, item: _Item, done: dict[str, Any]) -> None:
        self._emit({"type": "response.output_item.done", "output_index": item.index, "item": done})
        self._output.append(done)
        self._item = None

    # ------------------------------------------------------------------ endings

    def _end(self, reason: FinishReason, message: str | None) -> None:
        state = self.state
        if state is State.CLOSED:
            return
        if self._held is not None:
            held, self._held = self._held, None
            self._flush_headerless("completed", held, lps=self._held_lps)  # the output ended with it: the answer
        item = self._item
        if state is State.AWAIT_TOOL and reason == "stop":
            return  # the engine stopped on the call: the caller runs the tool next
        if reason == "stop":
            if state is State.CONTENT and item is not None:
                if item.kind.is_builtin_tool:
                    self._recovered("call_without_call_token", "the output ended inside a tool call")
                    self._make_call(item)  # the engine dropped the <|call|> token; the call is complete
                    return
                self._close(item, "completed")
            elif state is State.HEADER:
                if self._headerless_text(self._header) is not None:
                    self._flush_headerless("completed", self._header, lps=self._header_lps)
                elif self._header and CHANNEL in self._header_text():
                    self._model_error(f"the model's output ended inside a message header: {self._header_text()!r}")
                    return
            if self._lost_header is not None:
                # A header ended by <|end|> with its words lost, and no message after it (see HEADER_END).
                self._model_error(f"the model ended a message inside its header: {self._lost_header!r}")
                return
            self._terminal("completed")
            return
        # length or error: whatever is open is cut short.
        if item is not None:
            self._close(item, "incomplete")
        elif state is State.HEADER and self._headerless_text(self._header) is not None:
            self._flush_headerless("incomplete", self._header, lps=self._header_lps)
        if reason == "error":
            self._fail(f"the engine failed: {message}" if message else "the engine failed mid-stream")
        elif state is State.STOPPED:
            self._terminal("completed")  # the model finished exactly at the limit
        else:
            self._terminal("incomplete", reason="max_output_tokens")

    def _recovered(self, rule: str, detail: str) -> None:
        if self.on_recovery is not None:
            self.on_recovery(rule, detail)

    def _model_error(self, message: str) -> None:
        self.error = RemoteProtocolError(message)
        self._recovered("not_recovered", message)  # a trace shows the failure too
        if self._item is not None:
            self._close(self._item, "incomplete")
        self._fail(f"model output is not valid Harmony: {message}")

    def _fail(self, message: str) -> None:
        if self._compaction is not None:
            self.close_compaction("")  # before the error event, which comes right before response.failed
        error = {"type": "server_error", "code": "server_error", "message": message, "param": None}
        self._emit({"type": "error", "code": "server_error", "message": message, "param": None, "error": error})
        self._terminal("failed", error={"code": "server_error", "message": message})

    def _terminal(self, status: str, *, reason: str | None = None, error: dict[str, str] | None = None) -> None:
        self._pending.clear()
        if self._compaction is not None:
            self.close_compaction("")  # the response ended before its summary was sealed
        response = self._response
        response["status"] = status
        response["output"] = self._output
        response["usage"] = usage_object(
            input_tokens=self.input_tokens,
            cached_tokens=self.cached_tokens,
            output_tokens=self.output_tokens,
            reasoning_tokens=self.reasoning_tokens,
            tool_output_tokens=self.tool_output_tokens,
        )
        if status == "completed":
            response["completed_at"] = self._clock()
        if reason is not None:
            response["incomplete_details"] = {"reason": reason}
        if error is not None:
            response["error"] = error
        self.state = State.CLOSED
        # A cancelled response ends with response.incomplete (see cancel()).
        kind = "incomplete" if status == "cancelled" else status
        self._emit({"type": f"response.{kind}", "response": self._snapshot()})

    # ------------------------------------------------------------------ event helpers

    def _emit(self, event: Event) -> None:
        # sequence_number goes second so that every event reads "type, sequence_number, …" on the wire.
        event = {"type": event["type"], "sequence_number": self._seq, **event}
        self._seq += 1
        self._events.append(event)

    def _emit_item_event(self, type_: str, item: _Item) -> None:
        self._emit({"type": type_, "item_id": item.id, "output_index": item.index})

    def _emit_summary_part(self, type_: str, item: _Item, text: str, status: str = "completed") -> None:
        event = {
            "type": type_,
            "item_id": item.id,
            "output_index": item.index,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": text},
        }
        if status != "completed":
            event["status"] = "incomplete"  # the type's one other value: generation was interrupted
        self._emit(event)

    def _close_summary(self, item: _Item, text: str, status: str, done: dict[str, Any]) -> None:
        """End a summarised reasoning item's summary part (before its reasoning_text part ends)."""
        if item.summary_open:
            ref = {"item_id": item.id, "output_index": item.index, "summary_index": 0}
            self._emit({"type": "response.reasoning_summary_text.done", **ref, "text": text})
            self._emit_summary_part("response.reasoning_summary_part.done", item, text, status)
            done["summary"] = [{"type": "summary_text", "text": text}]

    def _emit_part(self, type_: str, item: _Item, part: dict[str, Any]) -> None:
        self._emit({"type": type_, "item_id": item.id, "output_index": item.index, "content_index": 0, "part": part})

    def _snapshot(self) -> dict[str, Any]:
        # orjson round trip: a deep copy that is several times faster than copy.deepcopy.
        return orjson.loads(orjson.dumps(self._response))

    def _opening(self) -> dict[str, Any]:
        """The Response as it stands before any output, for the events that open it: a copy of its top level.
        Enough until the terminal event: until then the translator only sets top-level keys (``status``) of its
        Response, whose nested values are its own (copied in ``__init__``) and never changed, and ``output`` is
        the empty list it started with. These events share those values with it, as nothing downstream changes
        an event's Response (only the terminal one's, a deep copy). Two orjson round trips fewer per request."""
        return self._response.copy()

    def _logprob_entry(self, token: int, lp: TokenLogprob) -> dict[str, Any]:
        token_bytes = self._token_bytes
        raw = token_bytes[token]
        return {
            "token": raw.decode("utf-8", errors="replace"),
            "bytes": list(raw),
            "logprob": lp.logprob,
            "top_logprobs": [
                {
                    "token": token_bytes[t].decode("utf-8", errors="replace"),
                    "bytes": list(token_bytes[t]),
                    "logprob": p,
                }
                for t, p in lp.top
            ],
        }
