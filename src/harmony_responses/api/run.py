"""One response being generated: engine stream → translator → batches of events, plus what the API adds.

``ResponseRun`` pumps one engine call through the translator. ``start()`` waits for the engine's first
item, so that an engine that cannot take the request fails *before* anything is sent and becomes an HTTP
503 (engine/_base.py: ``EngineError`` before the first item); after that every failure is in-band, and the
translator turns it into ``error`` + ``response.failed``. ``batches()`` yields the events each engine chunk
caused, one list per chunk, so that the transport writes a chunk's events in one go (each event stays
whole: never split across writes).

Two things the translator does not know are added here, on the way out:

- ``include: ["reasoning.encrypted_content"]``: each finished reasoning item gets ``encrypted_content``
  (``sealed.py``), in its ``output_item.done`` and in the terminal Response.
- strict ``json_schema`` formats: the final answer is checked against the schema when the response
  completes; a mismatch turns ``response.completed`` into ``error`` + ``response.failed`` whose message
  says what does not match. We fail rather than complete because the client asked for a guarantee
  (``responses.parse`` would otherwise die in pydantic with a less useful message, and Codex would act
  on invalid JSON); the answer stays visible in the streamed items and the failed Response's ``output``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson

from ..engine import Engine, EngineStream, GenerateRequest
from ..tokens import EngineEnd, TokenChunk
from ..translate import LocalProtocolError, Translator
from .schema import instance_problem
from .sealed import ReasoningSealer

__all__ = ["ResponseRun"]

logger = logging.getLogger("harmony_responses.api")

Event = dict[str, Any]
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


class _Empty:
    """The engine stream ended before yielding anything at all."""


class ResponseRun:
    """Generate one response.

    Args:
        translator: a fresh translator for this response (its prefill already received).
        engine: the engine to call; ``request`` is the one call this issue's responses make.
        sealer: seals reasoning into ``encrypted_content`` when the client included it, else None.
        strict_schema: ``(name, schema)`` for a strict ``json_schema`` format, else None.
    """

    def __init__(
        self,
        *,
        translator: Translator,
        engine: Engine,
        request: GenerateRequest,
        sealer: ReasoningSealer | None = None,
        strict_schema: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        self.translator = translator
        self._engine = engine
        self._request = request
        self._sealer = sealer
        self._strict = strict_schema
        self._stream: EngineStream | None = None
        self._first: TokenChunk | EngineEnd | _Empty | None = None
        self._sealed: dict[str, str] = {}
        self.final: dict[str, Any] | None = None

    @property
    def request_id(self) -> str | None:
        return self._request.request_id

    async def start(self) -> None:
        """Call the engine and wait for its first item.

        Raises:
            EngineError: the engine cannot take the request (nothing has been sent: answer 503).
        """
        self._stream = self._engine.generate(self._request)
        try:
            self._first = await anext(self._stream)
        except StopAsyncIteration:
            self._first = _Empty()

    async def aclose(self) -> None:
        """Stop the engine's generation (idempotent): on disconnect, early close, or after the end."""
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                await stream.aclose()
            except Exception:  # an engine failing to clean up must not hide the response's own outcome
                logger.exception("engine stream failed to close")

    async def batches(self) -> AsyncIterator[list[Event]]:
        """The events, a list per engine chunk; the last list ends with the terminal event."""
        t = self.translator
        assert self._first is not None, "start() first"
        item, self._first = self._first, None
        yield self._finish(t.events())  # response.created, response.in_progress, prefilled items
        while True:
            if isinstance(item, TokenChunk):
                try:
                    t.receive_tokens(item.token_ids, item.logprobs)
                except LocalProtocolError as exc:  # e.g. a logprobs list that does not match the tokens
                    t.receive_end("error", f"the engine sent a malformed chunk: {exc.message}")
                    break
            elif isinstance(item, EngineEnd):
                t.receive_usage(prompt_tokens=item.prompt_tokens, cached_tokens=item.cached_tokens)
                t.receive_end(item.reason, item.message)
                break
            elif isinstance(item, _Empty):
                t.receive_end("error", "the engine stream ended without a result")
                break
            else:
                t.receive_end("error", f"the engine yielded {type(item).__name__}, not a token chunk")
                break
            events = t.events()
            if events:
                yield self._finish(events)
            if t.closed:
                break  # the translator failed the response on bad model output: the rest is moot
            if t.pending_tool_call is not None:
                # Unreachable while built-in tools are neither declared nor mapped (validate.py); kept so
                # that a future mapping cannot leave a response without its terminal event.
                t.send_tool_result(error="built-in tools are not available on this server yet")
            assert self._stream is not None
            try:
                item = await anext(self._stream)
            except StopAsyncIteration:  # the stream ended with no EngineEnd: the engine broke its contract
                t.receive_end("error", "the engine stream ended without saying how")
                break
            except Exception as exc:  # the engine broke its contract (it must report errors in-band)
                logger.exception("engine stream raised mid-generation")
                t.receive_end("error", f"the engine failed: {exc}")
                break
        events = t.events()
        if events:
            yield self._finish(events)
        await self.aclose()

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
                    events[-1:] = self._fail_schema(last, problem)
                    response = events[-1]["response"]
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

    def _fail_schema(self, terminal: Event, problem: str) -> list[Event]:
        assert self._strict is not None
        message = (
            f"The model's answer does not match the JSON schema '{self._strict[0]}' required by "
            f"'text.format' (strict): {problem}"
        )
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
