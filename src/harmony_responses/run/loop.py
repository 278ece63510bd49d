"""One response being generated: engine stream → translator → batches of events, plus what the API adds.

``ResponseRun`` pumps engine calls through the translator. ``start()`` waits for the engine's first
item, so that an engine that cannot take the request fails *before* anything is sent and becomes an HTTP
503 (engine/_base.py: ``EngineError`` before the first item); after that every failure is in-band, and the
translator turns it into ``error`` + ``response.failed``. ``batches()`` yields the events each engine chunk
caused, one list per chunk, so that the transport writes a chunk's events in one go (each event stays
whole: never split across writes).

The tool loop (harmony.md §5.3). When an engine call ends in a built-in tool call (``pending_tool_call``:
code interpreter, web search, file search, MCP, a server-run tool search), the run finds the call's ``ToolSession`` by
namespace, awaits it, hands the result to the translator (which ends the item), and calls the engine again
with the next prompt:
the previous prompt + this call's raw generated ids up to and including ``<|call|>`` (raw, so that the
engine's prefix cache hits; no ``<|end|>`` after ``<|call|>``) + the tool message ``<|start|>{author}
to=assistant<|channel|>{channel of the call}<|message|>{result}<|end|>`` + ``<|start|>assistant``. It goes
on until a final answer, a client function call, or a limit:

- ``max_output_tokens`` counts every engine call's generated tokens; each call gets what is left (and no
  more than the context window has room for). Nothing left between calls: ``response.incomplete``
  (``max_output_tokens``). Tool results are input tokens of the next call, never output; their tokens (the
  tool message and the ``<|start|>assistant`` after it) are also ``usage.output_tokens_details
  .tool_output_tokens``, vLLM's detail.
- ``max_tool_calls`` counts the built-in calls that ran. The first call past it is not run: its item
  ends ``failed`` and the model is told to answer without tools (the API says further calls are
  "ignored"; telling the model is what lets it still answer). A second call past it ends the response
  there (``completed``, the refused call its last item): the model is not following the instruction, and
  generating on would spend the client's budget on calls that cannot run. A server-run tool search is not
  counted and always runs: it runs nothing of the client's, only declares tools, and a refused one would
  leave a ``tool_search_call`` the API gives no failed status, with no ``tool_search_output`` to resend.
- A tool that raises becomes an error result (the item ends ``failed``, the model reads the error); an
  engine error or a length cut in a later engine call ends the response as in the first.
- A client disconnect cancels whatever is running (engine call or tool); the sessions are closed when the
  run ends, whatever the outcome (``aclose``).

Compaction (``compact.py``): a run built with a ``Compaction`` first announces the ``compaction`` item, runs
the summary (its own run, unseen), seals it into the item, and then ends (``compaction_trigger``) or renders
the compacted conversation and goes on as above from that prompt (``context_management``); the summary's
tokens count in usage, not against ``max_output_tokens``.

Two things the translator does not know are added here, on the way out:

- ``include: ["reasoning.encrypted_content"]``: each finished reasoning item gets ``encrypted_content``
  (``sealed.py``), in its ``output_item.done`` and in the terminal Response.
- strict ``json_schema`` formats: the final answer is checked against the schema when the response
  completes; a mismatch turns ``response.completed`` into ``error`` + ``response.failed`` whose message
  says what does not match. We fail rather than complete because the client asked for a guarantee
  (``responses.parse`` would otherwise die in pydantic with a less useful message, and Codex would act
  on invalid JSON); the answer stays visible in the streamed items and the failed Response's ``output``;
- strict functions: a completed response's calls of a ``strict: true`` function are checked against its
  parameters' schema, and arguments it refuses (invalid JSON included) fail the response the same way,
  quoting them. Only an engine that cannot constrain a call (echo, replay, trtllm, transformers) lets
  such arguments through; on vLLM, SGLang and llama.cpp a grammar holds them (engine/_constrain.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import orjson
from openai_harmony import Author, Message, Role

from .. import text_tokens, tracing
from ..engine import Engine, EngineError, EngineStream, GenerateRequest, current_reading, reading_here
from ..errors import APIError
from ..metrics import QUEUE_DEPTH, TOOL_CALL_DURATION, TOOL_CALLS, RunMetrics, engine_label, failure_reason
from ..request.schema import instance_problem
from ..request.sealed import ReasoningSealer
from ..tokens import ADMITTED, EngineEnd, TokenChunk
from ..tokentrace import Recorder
from ..tools import ToolCall, ToolResult, ToolSessions
from ..translate import ItemKind, LocalProtocolError, State, Translator
from ..vocab import load_encoding
from .compact import Compaction, record_summary, write_summary
from .messages import ResponseMessages
from .turns import current_start, leave_lane

__all__ = ["ResponseRun"]

logger = logging.getLogger("harmony_responses.run")

Event = dict[str, Any]
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})

_START, _CHANNEL, _MESSAGE, _END, _RETURN, _CALL = 200006, 200005, 200008, 200007, 200002, 200012
# Tokens that may follow a call's content in the generated ids (its terminator, or the next header the model
# began without one); the splice replaces them with <|call|>.
_AFTER_CALL = frozenset({_START, _CHANNEL, _END, _RETURN, _CALL})
_CLOSED, _AWAIT_TOOL, _STOPPED = State.CLOSED, State.AWAIT_TOOL, State.STOPPED
# Past max_tool_calls, the model is told once; a further call ends the response (module docstring).
MAX_REFUSED_CALLS = 1
SHUTDOWN_MESSAGE = "The server shut down before the response finished; its output so far is kept."
# Responses waiting for an engine call's first item (metrics.QUEUE_DEPTH).
_ENGINE_QUEUE = QUEUE_DEPTH.labels("engine")
# How long to wait for an engine's EngineEnd after it stopped on <|call|> (it is due at once).
SETTLE_SECONDS = 5.0


# What ``_pump`` goes on with when the translator holds tokens it has not processed yet.
_BUFFERED = object()


class DirectOut(Protocol):
    """Where ``ResponseRun`` sends the events of a chunk taken where the engine read it (http/streaming.py)."""

    def ready(self) -> bool:
        """Whether events can go out now, in order, with nothing held (else the stream loop takes the chunk)."""
        ...

    def emit(self, events: list[Event]) -> None:
        """Send ``events`` (to the socket, or to the writer when the socket cannot take them now)."""
        ...


class _Empty:
    """The engine stream ended before yielding anything at all."""


class ResponseRun:
    """Generate one response.

    Args:
        translator: a fresh translator for this response (its prefill already received).
        engine: the engine to call; ``request`` is the one call this issue's responses make.
        sealer: seals reasoning into ``encrypted_content`` when the client included it, else None.
        strict_schema: ``(name, schema)`` for a strict ``json_schema`` format, else None.
        tools: the response's built-in tool sessions (closed when the run ends).
        max_output_tokens: the request's budget over all engine calls (None: the context window's room).
        max_tool_calls: the request's limit on built-in calls run (None: no limit).
        context_window: prompt plus output tokens the engine takes (bounds each later call's budget).
        prelude: called with the translator when the run starts, after ``response.in_progress`` (also for a
            background response): items shown before generation (``mcp_list_tools``, an approved ``mcp_call``
            set up with ``start_mcp_call``, which then runs before the first engine call).
        compaction: the response compacts the conversation first (``compact.py``): the ``compaction`` item
            comes first, then (unless it is a ``compaction_trigger`` response, which ends there) the prelude
            and the answer, from the prompt ``compaction.answer`` renders; ``request`` is then replaced.
        metrics: the response's metrics (default: labelled with the translator's model and the engine's name).
        messages: the Harmony messages to put in the terminal Response (``enable_response_messages``), or None.
        trace: the response's trace (``tokentrace``), or None. A traced run feeds the translator one token at
            a time, to know which events each token caused (the events are the same however tokens come); the
            events sent are told to the trace where they are published (``LiveResponse.publish``).
    """

    def __init__(
        self,
        *,
        translator: Translator,
        engine: Engine,
        request: GenerateRequest,
        sealer: ReasoningSealer | None = None,
        strict_schema: tuple[str, dict[str, Any]] | None = None,
        tools: ToolSessions | None = None,
        max_output_tokens: int | None = None,
        max_tool_calls: int | None = None,
        context_window: int | None = None,
        prelude: Callable[[Translator], None] | None = None,
        compaction: Compaction | None = None,
        metrics: RunMetrics | None = None,
        messages: ResponseMessages | None = None,
        trace: Recorder | None = None,
    ) -> None:
        self.translator = translator
        self.trace = trace
        if trace is not None:
            translator.on_recovery = trace.recovery
        if tools:
            translator.count_tool_output(0)  # a response that may run built-in tools reports their results' tokens
        self._engine = engine
        self._request = request
        self._sealer = sealer
        self._strict = strict_schema
        self._tools = tools if tools is not None else ToolSessions()
        self._max_output_tokens = max_output_tokens
        self._max_tool_calls = max_tool_calls
        self._context_window = context_window
        self._prelude = prelude
        self._compaction = compaction
        self._messages = messages
        self._prefill: list[int] = []  # after a compaction: the answer's prefill, received once the item is done
        self._summary_tokens = 0  # output tokens of the compaction's summary (not counted against the budget)
        self.metrics = metrics or RunMetrics(model=str(translator.response.get("model")), engine=engine_label(engine))
        self._began = False  # the engine took the request (or a call set up before generation runs first)
        self._stream: EngineStream | None = None
        self._first: TokenChunk | EngineEnd | _Empty | None = None
        self._sealed: dict[str, str] = {}
        self.final: dict[str, Any] | None = None
        self._generated: list[int] = []  # this engine call's token ids, for the splice
        self._call_base = 0  # translator.output_tokens when this engine call started
        self._usage_seen = False  # this engine call's EngineEnd (prompt tokens) was received
        self.tool_calls = 0  # built-in calls run
        self._refused = 0  # built-in calls refused past max_tool_calls
        self._shutting_down = False
        self._stream_started = False  # this engine call was sent (its prompt is input, ended or not)
        # --otel (tracing.py): the response's span, and the current engine call's with when it was sent
        self.span: Any = None
        self._call_span: Any = None
        self._call_sent = 0.0
        # Where the events of a chunk taken where the engine read it go (engine/_reading.py): set by the HTTP
        # layer once the response streams steadily (http/streaming.py), None otherwise.
        self.direct_out: DirectOut | None = None

    @property
    def request_id(self) -> str | None:
        return self._request.request_id

    async def start(self, *, at_admission: bool = False) -> None:
        """Call the engine and wait for its first item; ``at_admission`` (a streamed response): only until
        the engine has admitted the request (``tokens.ADMITTED``), so that ``response.created`` does not wait
        for the prefill. A refusal inside the engine's stream before its first token is then an in-band
        failure; a JSON answer has sent nothing yet, and waits for the first item, so it stays an HTTP error.

        Raises:
            EngineError: the engine cannot take the request (nothing has been sent: answer 503).
        """
        if tracing.enabled() and self.span is None:
            response = self.translator.response
            self.span = tracing.start(
                "response",
                {"gen_ai.request.model": response.get("model"), "harmony.response_id": response.get("id")},
            )
        if self._compaction is not None:
            await self._compaction.summary.start()  # the summary's engine call is the first one
            self._began = True
            return
        if self._prelude is not None:
            prelude, self._prelude = self._prelude, None
            prelude(self.translator)
        if self.translator.pending_tool_call is not None:
            self._began = True
            return  # a call set up before generation (an approved MCP call) runs first: batches() does it
        self._first = await self._open_call(at_admission=at_admission)
        self._began = True

    def shutdown(self) -> None:
        """The server is shutting down: end at the next chunk (or tool result), failed, telling the client why."""
        self._shutting_down = True
        if self._compaction is not None:
            self._compaction.summary.shutdown()

    async def _end_for_shutdown(self) -> bool:
        """If shutting down, stop the engine and fail the response; whether it did."""
        t = self.translator
        if not self._shutting_down or t.closed:
            return False
        await self._close_stream()
        self.count_unreported_prompt()
        t.fail(SHUTDOWN_MESSAGE)
        return True

    def count_unreported_prompt(self) -> None:
        """An engine call cut short (cancel, shutdown) never sent its end, which carries the prompt's count:
        the prompt the engine was given counts as input all the same (it was 0 for a cancelled response)."""
        if self._stream_started and not self._usage_seen:
            self._usage_seen = True
            self.translator.receive_usage(prompt_tokens=len(self._request.prompt_ids))

    async def aclose(self) -> None:
        """Stop the engine's generation and close the tool sessions (idempotent): on disconnect, early close,
        or after the end."""
        await self._close_stream()
        if self._compaction is not None:
            await self._compaction.summary.aclose()
        await self._tools.aclose_all()
        if (self._began or self.translator.closed) and not self.metrics.reported:
            self._report()

    def _report(self) -> None:
        """The response's counts, once, however it ended (a client gone: its tokens were spent all the same)."""
        t = self.translator
        self.count_unreported_prompt()
        status = t.status if t.closed else "cancelled"
        usage = {
            "input": t.input_tokens,
            "cached": t.cached_tokens,
            "output": t.output_tokens,
            "reasoning": t.reasoning_tokens,
        }
        self.metrics.ended(status, usage, t.output_items)
        if self.span is not None:
            traced = {
                "harmony.response.status": status,
                "gen_ai.usage.input_tokens": usage["input"],
                "gen_ai.usage.output_tokens": usage["output"],
                "harmony.usage.cached_tokens": usage["cached"],
                "harmony.usage.reasoning_tokens": usage["reasoning"],
                "harmony.tool_calls": self.tool_calls,
            }
            tracing.annotate_request(traced)
            tracing.end(self.span, traced, error=None if status != "failed" else "failed")

    def _end_call(self, reason: str, end: EngineEnd | None = None, error: str | None = None) -> None:
        """The engine call's span ends (--otel): how it ended, its tokens."""
        span, self._call_span = self._call_span, None
        if span is None:
            return
        attributes: dict[str, Any] = {
            "gen_ai.response.finish_reasons": (reason,),
            "gen_ai.usage.output_tokens": len(self._generated),
        }
        if end is not None:
            attributes["gen_ai.usage.input_tokens"] = end.prompt_tokens
            attributes["harmony.usage.cached_tokens"] = end.cached_tokens
        tracing.end(span, attributes, error=error)

    async def _close_stream(self) -> None:
        self._end_call("closed")  # (unless it ended already)
        stream, self._stream = self._stream, None
        if stream is not None:
            if self.trace is not None:
                self.trace.engine_end("closed")  # stopped here (a cut, a tool call, the end): unless it ended
            try:
                await stream.aclose()
            except Exception:  # an engine failing to clean up must not hide the response's own outcome
                logger.exception("engine stream failed to close")

    async def batches(self) -> AsyncIterator[list[Event]]:
        """The events, a list per engine chunk (and per tool result); the last list ends with the terminal event."""
        t = self.translator
        if self._compaction is not None:
            yield self._finish(t.events())  # response.created, response.in_progress
            async for events in self._compact():
                yield self._finish(events)
            if t.closed:
                await self.aclose()
                return
        assert self._first is not None or t.pending_tool_call is not None, "start() first"
        item, self._first = self._first, None
        # response.created, response.in_progress, prefilled items (a traced run: the prefill token by token)
        yield self._finish(t.events() if self.trace is None else self.trace.feed_buffered(t))
        while True:
            if item is not None:
                async for events in self._pump(item):
                    yield events
                # The pump returns as soon as it has handed the translator the engine's end: what that end makes
                # comes first. A built-in call the engine stopped right after (``stop`` with no ``<|call|>``: a
                # grammar that ended with the arguments) is a call to run; asked before the end was processed,
                # it was none, and the response ended with no terminal event (a 500 "no final" for JSON).
                events = t.events()
                if events:
                    yield self._finish(events)
            call = t.pending_tool_call
            if call is None:
                break  # the engine call ended the response (answer, function call, cut, failure)
            if await self._end_for_shutdown():
                break
            await self._settle_call()
            result = await self._run_tool(call)
            t.send_tool_result(
                output=result.output,
                error=result.error,
                outputs=result.outputs,
                action=result.action,
                tools=result.tools,
                results=result.results,
            )
            events = t.events()
            if events:
                yield self._finish(events)
            item = await self._next_engine_call(call, result)
            if item is None:
                break  # the response ended between engine calls (budget, limit, engine refusal)
        events = t.events()
        if events:
            yield self._finish(events)
        await self.aclose()

    def _take_read(self, chunk: TokenChunk) -> bool:
        """``chunk``, taken where the engine read it while ``_pump`` waits for it (engine/_reading.py): True once
        its events are out, False, nothing done, unless it is what ``_pump`` would make of it with nothing else
        to do (plain text streaming on, within the budget, no trace, no shutdown) and the events can go out now.
        The same calls as ``_pump``'s, so the same events."""
        out = self.direct_out
        ids = chunk.token_ids
        limit = self._request.max_tokens
        if (
            out is None
            or chunk.logprobs is not None
            or self.trace is not None
            or self._shutting_down
            or (limit is not None and len(self._generated) + len(ids) > limit)
            or not self.translator.takes_text(ids)
            or not out.ready()
        ):
            return False
        self._generated.extend(ids)
        self.metrics.tokens(len(ids))
        t = self.translator
        t.receive_tokens(ids)
        events = t.events()
        if events:
            out.emit(self._finish(events))
        return True

    async def _pump(self, item: TokenChunk | EngineEnd | _Empty | object) -> AsyncIterator[list[Event]]:
        """One engine call through the translator, until it ends or makes a built-in tool call."""
        t = self.translator
        start = current_start()
        # A traced run's events of this chunk's tokens (Recorder.feed): set by each chunk that is read with them.
        traced: list[Event] = []
        # While it waits for the next chunk, a read may be taken where it comes in (engine/_reading.py).
        reading = current_reading() if self._engine.direct_reads else None
        while True:
            if item is _BUFFERED:
                pass  # tokens of an earlier chunk the translator still holds (below)
            elif isinstance(item, TokenChunk):
                ids, logprobs = item.token_ids, item.logprobs
                limit = self._request.max_tokens
                over = limit is not None and len(self._generated) + len(ids) > limit
                if over:
                    # The engine went past the budget it was given (a misbehaving engine streamed 49,844
                    # tokens for a limit of 200): keep what fits, stop it, and end as a length cut.
                    keep = max(limit - len(self._generated), 0)  # type: ignore[operator]
                    ids = ids[:keep]
                    logprobs = logprobs[:keep] if logprobs is not None else None
                if self._call_span is not None and not self._generated:
                    first = time.monotonic() - self._call_sent
                    tracing.annotate(self._call_span, {"harmony.time_to_first_token": first})
                self._generated.extend(ids)
                self.metrics.tokens(len(ids))
                try:
                    if self.trace is None:
                        t.receive_tokens(ids, logprobs)
                    else:
                        traced = self.trace.feed(t, ids, logprobs)
                except LocalProtocolError as exc:  # e.g. a logprobs list that does not match the tokens
                    t.receive_end("error", f"the engine sent a malformed chunk: {exc.message}")
                    return
                if over and not t.closed and t.pending_tool_call is None:
                    await self._close_stream()
                    t.receive_usage(prompt_tokens=len(self._request.prompt_ids))
                    self._usage_seen = True
                    t.receive_end("length")
            elif isinstance(item, EngineEnd):
                if self.trace is not None:
                    self.trace.engine_end(
                        item.reason, prompt_tokens=item.prompt_tokens, cached_tokens=item.cached_tokens
                    )
                self.metrics.engine_call_ended()
                if item.reason == "error":
                    self.metrics.engine_failed("stream")
                self._end_call(item.reason, item, error=item.message if item.reason == "error" else None)
                self._usage_seen = True
                t.receive_usage(prompt_tokens=item.prompt_tokens, cached_tokens=item.cached_tokens)
                t.receive_end(item.reason, item.message)
                return
            elif isinstance(item, _Empty):
                t.receive_end("error", "the engine stream ended without a result")
                return
            else:
                t.receive_end("error", f"the engine yielded {type(item).__name__}, not a token chunk")
                return
            # A starting request's first delta goes out before the tokens behind it in the chunk are translated
            # (a flat-out engine's first read holds a dozen): they wait for the loop's next turn for this
            # stream, after the other requests' starts (run/turns.py).
            if self.trace is None or item is _BUFFERED:
                events = t.events(to_first_delta=start is not None and start.active and not start.delivered)
            else:
                events = traced + t.events()  # (the length cut's events, if any)
            if events:
                yield self._finish(events)
            if t.buffered:
                item = _BUFFERED
                continue
            # t.closed and t.pending_tool_call, read through the state once: this runs once per engine chunk.
            state = t.state
            if state is _CLOSED:
                return  # the translator failed the response on bad model output: the rest is moot
            if state is _AWAIT_TOOL and t.pending_tool_call is not None:
                return  # the engine call ends at the call; the tool loop takes over
            if state is _STOPPED and self._generated[-1:] not in ([_CALL], [_RETURN]):
                # The model's turn ended without a stop token (it began writing a tool result or a user turn
                # itself): the engine would go on writing what is not the assistant's. Stop it and end here.
                await self._close_stream()
                t.receive_usage(prompt_tokens=len(self._request.prompt_ids))
                self._usage_seen = True
                t.receive_end("stop")
                return
            if self._shutting_down and await self._end_for_shutdown():
                events = t.events()
                if events:
                    yield self._finish(events)
                return
            assert self._stream is not None
            try:
                if reading is not None and self.direct_out is not None:
                    reading.direct = self._take_read
                    try:
                        item = await anext(self._stream)
                    finally:
                        reading.direct = None
                else:
                    item = await anext(self._stream)
            except StopAsyncIteration:  # the stream ended with no EngineEnd: the engine broke its contract
                t.receive_end("error", "the engine stream ended without saying how")
                return
            except EngineError as exc:  # before its first token, after admission: the stream has begun
                self.metrics.engine_failed(failure_reason(exc))
                self._end_call("error", error=str(exc) or type(exc).__name__)
                t.receive_end("error", str(exc) or type(exc).__name__)
                return
            except Exception as exc:  # the engine broke its contract (it must report errors in-band)
                self.metrics.engine_failed("contract")
                logger.exception("engine stream raised mid-generation")
                t.receive_end("error", f"the engine failed: {exc}")
                return

    # ------------------------------------------------------------------ compaction

    async def _compact(self) -> AsyncIterator[list[Event]]:
        """The compaction item, then (with an answer to follow) the answer's engine call started."""
        compaction = self._compaction
        assert compaction is not None
        self._compaction = None  # done once; the summary run is closed by write_summary
        t = self.translator
        t.open_compaction()
        yield t.events()  # output_item.added, response.compaction.compacting
        span = tracing.child(self.span, "compaction")
        summary = await write_summary(compaction.summary)
        if self.trace is not None and compaction.summary.trace is not None:
            self.trace.compaction_call(compaction.summary.trace)  # its own engine call, not the answer's tokens
        tracing.end(span, {"gen_ai.usage.output_tokens": summary.output_tokens}, error=summary.problem)
        record_summary(t, summary)
        self._summary_tokens = summary.output_tokens
        if summary.text is None:
            t.fail(SHUTDOWN_MESSAGE if self._shutting_down else summary.problem)
            yield t.events()
            return
        done = t.close_compaction(compaction.seal(summary.text))
        if compaction.answer is None:
            t.receive_end("stop")  # a compaction_trigger response: the item is the whole output
            yield t.events()
            return
        if await self._end_for_shutdown():
            yield t.events()
            return
        try:
            request, prefill = await compaction.answer({**done, "summary": summary.text})
        except APIError as exc:
            t.fail(f"The compacted conversation could not be rendered: {exc.message}")
            yield t.events()
            return
        self._request = request
        self._call_base = t.output_tokens  # the summary's tokens are not in this call's generated ids
        t.receive_prefill(prefill)
        if self._prelude is not None:
            prelude, self._prelude = self._prelude, None
            prelude(t)
        if t.pending_tool_call is not None:
            return  # an approved MCP call runs first (batches() does it)
        refused = None
        try:
            self._first = await self._open_call()
        except Exception as exc:  # the response has started: an engine refusing the answer fails it in-band
            refused = exc
        if refused is not None:
            logger.warning("%s: the engine refused the answer after compacting: %s", self.request_id, refused)
            t.receive_end("error", str(refused) or type(refused).__name__)
            yield t.events()

    # ------------------------------------------------------------------ the tool loop

    async def _settle_call(self) -> None:
        """The engine call made a tool call: take its usage and stop it.

        An engine stops on ``<|call|>`` and then sends its ``EngineEnd`` (prompt and cached tokens): read it.
        A call the model closed some other way (``<|end|>``, a new header) leaves the engine generating: stop
        it, and count the prompt ourselves.
        """
        if self._stream is not None and not self._usage_seen and self._generated[-1:] == [_CALL]:
            try:
                async with asyncio.timeout(SETTLE_SECONDS):
                    end = await anext(self._stream)
            except Exception:  # StopAsyncIteration, a timeout or a broken engine: the call itself is complete
                end = None
            if isinstance(end, EngineEnd):
                self._end_call(end.reason, end)
                if self.trace is not None:
                    self.trace.engine_end(end.reason, prompt_tokens=end.prompt_tokens, cached_tokens=end.cached_tokens)
                self._usage_seen = True
                self.translator.receive_usage(prompt_tokens=end.prompt_tokens, cached_tokens=end.cached_tokens)
        await self._close_stream()
        if not self._usage_seen and self._generated:  # (no tokens: the call was set up before any engine call)
            self.translator.receive_usage(prompt_tokens=len(self._request.prompt_ids))
        self._usage_seen = True

    async def _run_tool(self, call: ToolCall) -> ToolResult:
        """Run one built-in call; every failure becomes an error result (the model reads it)."""
        author = _tool_author(call)
        tool = _TOOL_LABELS.get(call.kind, call.kind.name.lower())
        searching = call.kind is ItemKind.TOOL_SEARCH_CALL
        span = tracing.child(self.span, f"tool {tool}", {"harmony.tool": tool, "harmony.tool.recipient": author})
        if self.trace is not None:
            self.trace.tool_started(call)
        with tracing.use(span):  # (an MCP call's HTTP requests are its children)
            result = await self._call_tool(call, author, tool, searching)
        if self.trace is not None:
            self.trace.tool_ended(result)
        tracing.end(span, error=result.error)
        return result

    async def _call_tool(self, call: ToolCall, author: str, tool: str, searching: bool) -> ToolResult:
        limit = self._max_tool_calls
        if limit is not None and self.tool_calls >= limit and not searching:
            TOOL_CALLS.labels(tool, "refused").inc()
            self._refused += 1
            message = f"This call was not run: max_tool_calls ({limit}) is reached for this response."
            return ToolResult(
                text=f"[ERROR] {message} Answer now with what you have, without calling any more tools.",
                error=message,
            )
        namespace = _session_namespace(call)
        session = self._tools.get(namespace)
        if session is None:
            TOOL_CALLS.labels(tool, "error").inc()
            message = f"The tool {author} is not available on this server."
            return ToolResult(text=f"[ERROR] {message}", error=message)
        self.tool_calls += 0 if searching else 1
        started = time.monotonic()
        try:
            result = await session.call(call)
        except Exception as exc:  # a tool bug: tell the model and the client, keep the response going
            logger.exception("%s: the %s tool raised", self.request_id, author)
            message = f"The tool {author} failed: {type(exc).__name__}: {exc}"
            result = ToolResult(text=f"[ERROR] {message}", error=message)
        elapsed = time.monotonic() - started
        TOOL_CALLS.labels(tool, "error" if result.error else "ok").inc()
        TOOL_CALL_DURATION.labels(tool).observe(elapsed)
        logger.info(
            "%s: %s call %s in %.2f s",
            self.request_id,
            author,
            "failed" if result.error else "ran",
            elapsed,
        )
        return result

    async def _next_engine_call(self, call: ToolCall, result: ToolResult) -> TokenChunk | EngineEnd | _Empty | None:
        """Start the engine call that continues after a tool result; None when the response ended instead."""
        t = self.translator
        t.start_engine_call()
        splice, tool_result = self._splice(call), _tool_result(call, result.text)
        self._generated = []  # spliced: the next engine call's tokens follow
        if self._messages is not None:
            self._messages.generated(splice)
            self._messages.tool_result(tool_result)
        if self._refused > MAX_REFUSED_CALLS:
            t.receive_end("stop")  # the model keeps calling past max_tool_calls: end here (module docstring)
            return None
        try:
            rendered = text_tokens.render(load_encoding(), tool_result)  # linear in a long run in the output
        except text_tokens.LongRunError:  # one in the tool's name, which its declaration rendered already
            rendered = load_encoding().render(tool_result)
        fed_back = [*rendered, _START, _ASSISTANT]
        t.count_tool_output(len(fed_back))
        prompt = [*self._request.prompt_ids, *splice, *fed_back]
        budget: list[int] = []
        if self._max_output_tokens is not None:
            budget.append(self._max_output_tokens - (t.output_tokens - self._summary_tokens))
        if self._context_window is not None:
            budget.append(self._context_window - len(prompt))
        max_tokens = min(budget) if budget else None
        if max_tokens is not None and max_tokens <= 0:
            t.receive_end("length")  # nothing left to generate with: incomplete (max_output_tokens)
            return None
        self._request = dataclasses.replace(self._request, prompt_ids=prompt, max_tokens=max_tokens)
        self._generated = []
        self._call_base = t.output_tokens
        self._usage_seen = False
        try:
            return await self._open_call()
        except Exception as exc:  # EngineError and the like: the response has started, so it fails in-band
            logger.warning("%s: the engine refused the call after a tool result: %s", self.request_id, exc)
            t.receive_end("error", str(exc) or type(exc).__name__)
            return None

    async def _open_call(self, *, at_admission: bool = False) -> TokenChunk | EngineEnd | _Empty:
        """Send ``self._request`` to the engine and wait for its first item (``at_admission``: or its
        admission, ``tokens.ADMITTED``), counted and shown as queued meanwhile.

        Raises what the engine raises before its first item (counted as a failure); callers decide whether
        that refuses the response or fails it in-band.
        """
        leave_lane()  # the next request's start work may begin (run/turns.py)
        reading_here()  # its first chunk may be read here and the rest in the producer: one Reading for both
        self.metrics.engine_call()
        if self.trace is not None:
            self.trace.engine_call(*_request_record(self._engine, self._request))
        _ENGINE_QUEUE.inc()
        if self.span is not None:
            self._call_sent = time.monotonic()
            self._call_span = tracing.child(
                self.span,
                "engine call",
                {
                    "harmony.engine": engine_label(self._engine),
                    "harmony.prompt_tokens": len(self._request.prompt_ids),
                    "gen_ai.request.max_tokens": self._request.max_tokens,
                },
            )
        try:
            # Current while the engine sends the request: its traceparent (engine/_http.py), the replica chosen.
            with tracing.use(self._call_span):
                self._stream = self._engine.generate(self._request)
                self._stream_started = True
                item = await anext(self._stream)
                if item is ADMITTED:
                    if self.trace is not None:
                        self.trace.engine_admitted()
                    tracing.event(self._call_span, "admitted")
                    if not at_admission:
                        item = await anext(self._stream)
            return item
        except StopAsyncIteration:
            self._end_call("error", error="the engine stream ended without a result")
            return _Empty()
        except Exception as exc:
            self.metrics.engine_failed(failure_reason(exc))
            self._end_call("error", error=str(exc) or type(exc).__name__)
            raise
        finally:
            _ENGINE_QUEUE.dec()

    def _splice(self, call: ToolCall) -> list[int]:
        """This engine call's generated ids up to the tool call, ending ``<|call|>``."""
        n = self.translator.output_tokens_at_call - self._call_base
        ids = self._generated[: max(n, 0)]
        if not ids and self._request.prompt_ids[-1:] == [_CALL]:
            return []  # render already ended the prompt with the approved call (RenderedPrompt.pending_mcp_call)
        if not ids:
            # A call the model did not write in this engine call (an approved MCP call run before generating):
            # write it as the model would have, after the prompt's <|start|>assistant.
            recipient = "python" if call.kind is ItemKind.CODE_INTERPRETER else f"{call.namespace}.{call.name}"
            content_type = "code" if call.kind is not ItemKind.MCP_CALL else "<|constrain|>json"
            text = f"<|channel|>{call.channel or 'analysis'} to={recipient} {content_type}<|message|>{call.arguments}"
            return [*load_encoding().encode(text, allowed_special="all"), _CALL]
        if ids[-1] in _AFTER_CALL:
            ids = ids[:-1]  # <|call|> itself, or what closed the call instead: the call ends <|call|> either way
        return [*ids, _CALL]

    # ------------------------------------------------------------------ additions on the way out

    def _finish(self, events: list[Event]) -> list[Event]:
        if self._sealer is not None:
            for event in events:
                if event["type"] == "response.output_item.done" and event["item"]["type"] == "reasoning":
                    self._seal(event["item"])
        last = events[-1] if events else None
        if last is not None and last["type"] in TERMINAL_EVENTS:
            response = last["response"]
            if self._sealer is not None:
                for output in response["output"]:
                    if output["type"] == "reasoning" and output["id"] in self._sealed:
                        output["encrypted_content"] = self._sealed[output["id"]]
            if self._strict is not None and response["status"] == "completed":
                problem = self._answer_problem(response)
                if problem is not None:
                    message = (
                        f"The model's answer does not match the JSON schema '{self._strict[0]}' required by "
                        f"'text.format' (strict): {problem}"
                    )
                    events[-1:] = self._fail(last, message)
                    response = events[-1]["response"]
            if response["status"] == "completed":
                message = self._arguments_problem(response)
                if message is not None:
                    events[-1:] = self._fail(last, message)
                    response = events[-1]["response"]
            if self._messages is not None:
                self._messages.generated(self._generated)  # the last engine call's (spliced ones are in already)
                response["output_messages"] = self._messages.output()
            self.final = response
            usage = response.get("usage") or {}
            logger.info(
                "%s %s: %s input / %s output tokens",
                response["id"],
                response["status"],
                usage.get("input_tokens"),
                usage.get("output_tokens"),
            )
        return events

    def _seal(self, item: dict[str, Any]) -> None:
        assert self._sealer is not None
        text = "".join(part.get("text", "") for part in item.get("content") or ())
        blob = self._sealed[item["id"]] = self._sealer.seal(text)
        item["encrypted_content"] = blob

    def _answer_problem(self, response: dict[str, Any]) -> str | None:
        """Why the final answer does not match the strict schema, or None (also when there is no answer)."""
        assert self._strict is not None
        answers = [
            item
            for item in response["output"]
            if item["type"] == "message" and item.get("phase") in (None, "final_answer")
        ]
        if not answers:
            return None  # a function call (or nothing) ended the turn: there is no answer to check
        text = "".join(p.get("text", "") for p in answers[-1]["content"] if p.get("type") == "output_text")
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return f"the answer is not valid JSON ({exc})."
        return instance_problem(value, self._strict[1])

    def _arguments_problem(self, response: dict[str, Any]) -> str | None:
        """Why a call of a strict function has arguments its schema refuses, or None.

        An engine that constrains calls (vLLM, SGLang, llama.cpp) cannot write such arguments; on one that
        cannot (echo, replay, trtllm, transformers) they fail the response as a strict ``text.format``
        answer does, quoting the arguments, rather than reaching a client that trusts ``strict``.
        """
        strict = {(t.namespace, t.name): t.definition for t in self._request.tool_grammars if t.syntax == "json_schema"}
        if not strict:
            return None
        for item in response["output"]:
            if item["type"] != "function_call":
                continue
            definition = strict.get((item.get("namespace") or "functions", item["name"]))
            if definition is None:
                continue
            arguments = item.get("arguments") or ""
            try:
                problem = instance_problem(orjson.loads(arguments), orjson.loads(definition))
            except orjson.JSONDecodeError as exc:
                problem = f"the arguments are not valid JSON ({exc})."
            if problem is not None:
                shown = arguments if len(arguments) <= 200 else arguments[:200] + "…"
                return (
                    f"The model's arguments for the strict function '{item['name']}' do not match its "
                    f"parameters' schema: {problem} Arguments: {shown}"
                )
        return None

    def _fail(self, terminal: Event, message: str) -> list[Event]:
        seq = terminal["sequence_number"]
        error = {"type": "server_error", "code": "server_error", "message": message, "param": None}
        response = dict(
            terminal["response"],
            status="failed",
            completed_at=None,
            error={"code": "server_error", "message": message},
        )
        flat = {"type": "error", "sequence_number": seq, "code": "server_error", "message": message, "param": None}
        # Both error forms in one event, as the translator sends them (responses-protocol.md §5.3).
        return [
            {**flat, "error": error},
            {"type": "response.failed", "sequence_number": seq + 1, "response": response},
        ]


def _request_record(engine: Engine, request: GenerateRequest) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An engine call for its trace: the request without its prompt's ids (the trace has the prompt), and the
    JSON body an HTTP engine posts for it, its token list likewise replaced by its length."""
    fields = {f.name: getattr(request, f.name) for f in dataclasses.fields(request) if f.name != "prompt_ids"}
    fields["prompt_tokens"] = len(request.prompt_ids)
    body = None
    for _ in range(3):  # the HTTP engine inside a replica set (its replicas' bodies differ in no field) or recorder
        replicas = getattr(engine, "replicas", None)
        engine = replicas[0].engine if replicas else getattr(engine, "engine", engine)
    make_body, make_reader = getattr(engine, "body", None), getattr(engine, "reader", None)
    if callable(make_body) and callable(make_reader):
        try:
            body = {
                k: ({"tokens": len(v)} if v == request.prompt_ids else v)
                for k, v in make_body(make_reader(request)).items()
            }
        except Exception:  # an adapter that cannot say: the request alone is traced
            body = None
    return fields, body


def _session_namespace(call: ToolCall) -> str:
    """The ``ToolSessions`` key of the session that runs ``call``."""
    if call.kind is ItemKind.CODE_INTERPRETER:
        return "python"
    if call.kind is ItemKind.TOOL_SEARCH_CALL:
        return "tool_search"
    return call.namespace or ""


def _tool_author(call: ToolCall) -> str:
    """The tool message's author: ``python``, ``browser.search|open|find``, ``{server label}.{tool}``."""
    if call.kind is ItemKind.CODE_INTERPRETER:
        return "python"
    return f"{call.namespace}.{call.name}" if call.namespace else call.name


def _tool_result(call: ToolCall, text: str) -> Message:
    """``<|start|>{author} to=assistant<|channel|>{channel}<|message|>{text}<|end|>``, which the next prompt
    continues with ``<|start|>assistant``.

    The result goes on the channel of the call (harmony.md §5.2). Lone surrogates (from a tool's JSON) cannot
    be encoded: they become U+FFFD.
    """
    text = text.encode("utf-8", errors="replace").decode("utf-8") if not text.isascii() else text
    return (
        Message.from_author_and_content(Author.new(Role.TOOL, _tool_author(call)), text)
        .with_channel(call.channel or "analysis")
        .with_recipient("assistant")
    )


_ASSISTANT = 173781  # "assistant" after <|start|>
# The tool label of a built-in call (metrics.TOOL_CALLS).
_TOOL_LABELS = {
    ItemKind.CODE_INTERPRETER: "code_interpreter",
    ItemKind.WEB_SEARCH: "web_search",
    ItemKind.FILE_SEARCH: "file_search",
    ItemKind.MCP_CALL: "mcp",
    ItemKind.TOOL_SEARCH_CALL: "tool_search",
}
