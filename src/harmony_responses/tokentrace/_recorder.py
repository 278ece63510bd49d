"""The recorder of one response's trace: every token, the translator's state at it, the events it caused.

The run layer (``run/loop.py``, ``run/start.py``) owns a ``Recorder`` when the response is traced and tells
it what happens, in order: the rendered prompt, each engine call (its request body, when it was admitted,
its first token, its end), each chunk and each token in it with the translator's state after the token and
the sequence numbers of the events the token caused, each recovery the translator made (its
``on_recovery``), each built-in tool call, and the events the client was sent. A compaction's summary is its
own run with its own translator: it records into a ``compaction()`` recorder, whose engine call is then kept
(``compaction_call``) as an engine call of its own, ``purpose: "compaction"``, holding its prompt, timing and
generated tokens, apart from the answer's tokens. The translator stays
sans-I/O: it only calls ``on_recovery``; the clock and everything else are here.

The document (``document()``) is bounded: past ``max_bytes`` (an estimate of the JSON's size) tokens,
events and prompt tokens are no longer kept, only counted, and ``truncated`` says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

import orjson

__all__ = ["TRACE_VERSION", "Recorder"]

TRACE_VERSION = 1
Event = dict[str, Any]
# What a token's record costs beyond its text, in the JSON (keys, numbers): the bound's estimate.
_TOKEN_OVERHEAD = 120


def _jsonable(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, default=lambda v: asdict(v) if is_dataclass(v) else str(v)))


class Recorder:
    """Collects one response's trace; see the module docstring.

    Args:
        response_id, model: the response traced.
        token_text: token id → its text (``Vocabulary.token_text``; special tokens by name).
        max_bytes: about how large the document may grow.
        clock: monotonic seconds (offsets in the document are from the recorder's creation).
        t0: the clock's origin instead (a compaction's recorder shares its response's).
    """

    def __init__(
        self,
        *,
        response_id: str,
        model: str,
        token_text: Sequence[str],
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
        t0: float | None = None,
    ) -> None:
        self._clock = clock
        self._t0 = clock() if t0 is None else t0
        self._text = token_text
        self._max = max_bytes
        self._size = 0
        self.truncated = False
        self._dropped = {"tokens": 0, "events": 0, "prompt_tokens": 0}
        self.prompt: dict[str, Any] = {"messages": [], "tokens": [], "count": 0, "prefill": []}
        self.calls: list[dict[str, Any]] = []
        self.tokens: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.recoveries: list[dict[str, Any]] = []
        self._response_id = response_id
        self._model = model
        self._chunk = -1
        self._chunk_at = 0.0
        self._seq_token: dict[int, int] = {}  # event sequence number → index of the token that caused it
        self._header_from: int | None = None  # first token of the header being read (recoveries' span)
        self._current: int | None = None  # the token being processed (a recovery is about it)
        self._pending_recoveries: list[tuple[str, str]] = []
        self._tool: dict[str, Any] | None = None
        self.on_complete: Callable[[dict[str, Any]], None] | None = None  # the terminal event was recorded

    def _now(self) -> float:
        return round(self._clock() - self._t0, 6)

    def _fits(self, size: int, what: str) -> bool:
        if self._size + size > self._max:
            self.truncated = True
            self._dropped[what] += 1
            return False
        self._size += size
        return True

    def _token_text(self, token: int) -> str:
        return self._text[token] if 0 <= token < len(self._text) else f"<{token}>"

    # ------------------------------------------------------------------ the prompt

    def record_prompt(self, messages: Sequence[Any], token_ids: Sequence[int], prefill: Sequence[int] = ()) -> None:
        """The rendered prompt: its Harmony messages (``Message.to_dict()`` form) and token ids."""
        rendered = [m.to_dict() if hasattr(m, "to_dict") else m for m in messages]
        kept = _jsonable(rendered)
        if self._fits(len(orjson.dumps(kept)), "prompt_tokens"):
            self.prompt["messages"] = kept
        budget = self._max // 2  # the output's tokens and events get the other half at least
        tokens = self.prompt["tokens"]
        for token in token_ids:
            text = self._token_text(token)
            size = len(text) + 16
            if self._size + size > budget or not self._fits(size, "prompt_tokens"):
                self.truncated = True
                self._dropped["prompt_tokens"] += 1
                continue
            tokens.append([token, text])
        self.prompt["count"] = len(token_ids)
        self.prompt["prefill"] = [[t, self._token_text(t)] for t in prefill]

    # ------------------------------------------------------------------ engine calls

    def engine_call(self, request: dict[str, Any], body: dict[str, Any] | None) -> None:
        """An engine call is sent: ``request`` (the engine-independent GenerateRequest, prompt ids left out),
        ``body`` (the HTTP body an HTTP engine posts, its prompt's ids left out), when known."""
        call = {
            "index": len(self.calls),
            "purpose": "response",
            "request": _jsonable(request),
            "body": _jsonable(body),
            "sent": self._now(),
        }
        call.update(admitted=None, first_token=None, ended=None, finish=None, chunks=0, tokens=0)
        self._fits(len(orjson.dumps(call)), "events")
        self.calls.append(call)
        self._chunk = -1

    def compaction(self, messages: Sequence[Any], token_ids: Sequence[int], prefill: Sequence[int] = ()) -> Recorder:
        """The recorder of a compaction's summary run, its prompt recorded: same clock and origin, the room left
        in this trace as its bound. Its engine call joins this trace with ``compaction_call``."""
        child = Recorder(
            response_id=self._response_id,
            model=self._model,
            token_text=self._text,
            max_bytes=max(self._max - self._size, 0),
            clock=self._clock,
            t0=self._t0,
        )
        child.record_prompt(messages, token_ids, prefill)
        return child

    def compaction_call(self, child: Recorder) -> None:
        """The summary run (``child``) ended: its engine call becomes one of this trace's, marked
        ``purpose: "compaction"``, with its own prompt, generated tokens and recoveries (not the answer's)."""
        for call in child.calls:
            call.update(
                index=len(self.calls),
                purpose="compaction",
                prompt=child.prompt,
                generated=child.tokens,
                recoveries=child.recoveries,
            )
            self.calls.append(call)
        self._size += child._size
        self.truncated = self.truncated or child.truncated
        for what, count in child._dropped.items():
            self._dropped[what] += count

    def engine_admitted(self) -> None:
        if self.calls and self.calls[-1]["admitted"] is None:
            self.calls[-1]["admitted"] = self._now()

    def engine_end(self, reason: str, *, prompt_tokens: int | None = None, cached_tokens: int | None = None) -> None:
        if self.calls and self.calls[-1]["ended"] is None:
            self.calls[-1].update(
                ended=self._now(), finish=reason, prompt_tokens=prompt_tokens, cached_tokens=cached_tokens
            )

    def chunk(self) -> None:
        """An engine chunk arrived: the tokens that follow came in it."""
        self._chunk += 1
        self._chunk_at = self._now()
        if self.calls:
            call = self.calls[-1]
            call["chunks"] += 1
            if call["first_token"] is None:
                call["first_token"] = self._chunk_at

    # ------------------------------------------------------------------ tokens and what they caused

    def feed(self, translator: Any, ids: Sequence[int], logprobs: Sequence[Any] | None) -> list[Event]:
        """An engine chunk's tokens through ``translator`` one at a time, each token's state and events noted;
        returns the chunk's events (the same as the chunk fed at once: the translator is chunking-invariant).

        Raises what ``Translator.receive_tokens`` raises for logprobs that do not match the tokens.
        """
        if logprobs is not None and len(logprobs) != len(ids):
            translator.receive_tokens(ids, logprobs)  # raises LocalProtocolError, as an untraced run's does
        if not ids:
            return []  # tokens.ADMITTED: no chunk of the model's
        self.chunk()
        events: list[Event] = []
        for k, token in enumerate(ids):
            lp = logprobs[k] if logprobs is not None else None
            self.before_token()
            translator.receive_tokens((token,), None if lp is None else (lp,))
            caused = translator.events()
            self.token(token, lp, translator.trace_state(), caused)
            events += caused
        return events

    def feed_buffered(self, translator: Any) -> list[Event]:
        """The translator's first events: those it made already (lifecycle, prelude items; no token's), then its
        buffered prefill (a forced call's header) one token at a time, each token's state and events noted.
        Returns them all, as ``translator.events()`` would."""
        events = translator.taken()
        while True:
            self.before_token()
            token = translator.step_buffered()
            if token is None:
                self._current = None
                return events + translator.events()  # (nothing is left to process: the same as taking them)
            caused = translator.taken()
            self.token(token, None, translator.trace_state(), caused, prefill=True)
            events += caused

    def before_token(self) -> None:
        """The next token is about to be processed (recoveries from now on are about it)."""
        self._current = len(self.tokens) + self._dropped["tokens"]

    def token(
        self,
        token: int,
        logprob: Any,
        state: tuple[str, str | None, str | None, str | None],
        events: Sequence[Event],
        *,
        prefill: bool = False,
    ) -> None:
        """One token was processed: ``state`` after it (``Translator.trace_state``), its events; ``prefill``: the
        prompt wrote it after ``<|start|>assistant`` (a forced call's header), the engine did not generate it."""
        index = self._current if self._current is not None else len(self.tokens) + self._dropped["tokens"]
        self._current = None
        seqs = [e["sequence_number"] for e in events]
        for seq in seqs:
            self._seq_token[seq] = index
        if self.calls and not prefill:
            self.calls[-1]["tokens"] += 1
        text = self._token_text(token)
        record: dict[str, Any] = {
            "i": index,
            "id": token,
            "text": text,
            "t": self._chunk_at,
            "call": len(self.calls) - 1,
            "chunk": self._chunk,
            "state": state[0],
            "header": state[1],
            "channel": state[2],
            "item": state[3],
            "events": seqs,
        }
        if logprob is not None:
            record["logprob"] = getattr(logprob, "logprob", logprob)
        if prefill:
            record["prefill"] = True
        if self._fits(len(text) + len(state[1] or "") + _TOKEN_OVERHEAD + 8 * len(seqs), "tokens"):
            self.tokens.append(record)
        for rule, detail in self._pending_recoveries:
            self._add_recovery(rule, detail, index)
        self._pending_recoveries.clear()
        if state[0] == "HEADER":
            if self._header_from is None:
                self._header_from = index
        else:
            self._header_from = None

    def recovery(self, rule: str, detail: str) -> None:
        """The translator's ``on_recovery``: a rule it applied to malformed Harmony, at the current token."""
        if self._current is not None:
            self._pending_recoveries.append((rule, detail))  # the token's record follows
        else:  # at the end of an engine call: about the last token
            self._add_recovery(rule, detail, None)

    def _add_recovery(self, rule: str, detail: str, index: int | None) -> None:
        last = len(self.tokens) + self._dropped["tokens"] - 1
        at = index if index is not None else last
        start = self._header_from if self._header_from is not None else at
        entry = {"rule": rule, "detail": detail, "token": at, "tokens": list(range(start, at + 1)) if at >= 0 else []}
        entry["t"] = self._now()
        self.recoveries.append(entry)

    # ------------------------------------------------------------------ tools

    def tool_started(self, call: Any) -> None:
        self._tool = {
            "item": getattr(call, "item_id", None),
            "kind": getattr(getattr(call, "kind", None), "name", None),
            "name": getattr(call, "name", None),
            "namespace": getattr(call, "namespace", None),
            "input": getattr(call, "arguments", None),
            "started": self._now(),
        }

    def tool_ended(self, result: Any) -> None:
        tool, self._tool = self._tool, None
        if tool is None:
            return
        ended = self._now()
        output = getattr(result, "text", None)
        tool.update(ended=ended, duration=round(ended - tool["started"], 6), output=output)
        tool["error"] = getattr(result, "error", None)
        if not self._fits(len(orjson.dumps(tool)), "events"):
            tool["output"] = (output or "")[:1000]
        self.tools.append(tool)

    # ------------------------------------------------------------------ events sent

    def sent(self, events: Sequence[Event]) -> None:
        """Events as the client gets them (after the run's additions: sealed reasoning, schema checks)."""
        now = self._now()
        for event in events:
            seq = event.get("sequence_number")
            encoded = orjson.dumps(event)
            if self._fits(len(encoded) + 40, "events"):
                self.events.append({"seq": seq, "t": now, "token": self._seq_token.get(seq), "event": event})
            if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
                if self.on_complete is not None:
                    self.on_complete(self.document())

    def document(self) -> dict[str, Any]:
        """The trace as JSON-ready data (``TRACE_VERSION``)."""
        return {
            "object": "response.trace",
            "version": TRACE_VERSION,
            "response_id": self._response_id,
            "model": self._model,
            "prompt": self.prompt,
            "engine_calls": self.calls,
            "tokens": self.tokens,
            "events": self.events,  # JSON already: the events as sent
            "tools": self.tools,
            "recoveries": self.recoveries,
            "truncated": self.truncated,
            "dropped": dict(self._dropped),
            "max_bytes": self._max,
        }
