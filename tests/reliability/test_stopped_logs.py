"""A stored response stopped mid-stream logs only what it streamed: every ``.done`` text is its deltas joined.

A starting stream's first delta goes out before the tokens behind it in the same engine chunk are translated
(``Translator.events(to_first_delta=True)``); those wait for the stream's next turn. A client leaving (or a
cancel, or a shutdown) in that wait used to translate them only to drop their deltas, while the item kept
their text: the log had delta ``"Thinking"`` and then ``reasoning_text.done`` ``"Thinking about word"``
(47 of 320 streams under bursts of 64). The producer here is real (``run.live.produce``), with a real
translator and store; the run is held where the server's fairness holds a stream after its first delta.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from harmony_responses.run.live import LiveResponse, produce
from harmony_responses.store import Writer, store_from_spec
from translate.helpers import make_translator, tokens
from translate.invariants import check_stream

# One engine chunk: a reasoning message, then the start of the answer.
CHUNK = (
    "<|channel|>analysis<|message|>Thinking about word counts.<|end|><|start|>assistant<|channel|>final<|message|>It"
)


class HeldRun:
    """A run that streams one chunk up to its first delta, then is held (as ``Turns.done`` holds it)."""

    request_id = "resp_held"
    span = None  # its --otel span (ResponseRun.span): tracing is off

    def __init__(self) -> None:
        self.translator = make_translator()
        self.held = asyncio.Event()

    async def start(self, *, at_admission: bool = False) -> None:
        return None

    def count_unreported_prompt(self) -> None:
        return None

    async def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        t = self.translator
        t.receive_tokens(tokens(CHUNK))
        yield t.events(to_first_delta=True)
        assert t.buffered, "the chunk's later tokens wait behind the first delta"
        self.held.set()
        await asyncio.Event().wait()  # held until the stop cancels the producer
        yield t.events()

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("reason", ["cancel", "shutdown"])
def test_a_stream_stopped_behind_its_first_delta_logs_what_it_streamed(store_spec: str, reason: str) -> None:
    async def run() -> list[dict[str, Any]]:
        store = store_from_spec(store_spec)
        await store.open()
        writer = Writer(store)
        writer.start()
        try:
            live = LiveResponse(response_id="resp_held", owner="", created_at=1, writer=writer, persist=False)
            held = HeldRun()
            live.task = asyncio.get_running_loop().create_task(produce(live, held))  # type: ignore[arg-type]
            await asyncio.wait_for(held.held.wait(), 30)
            await asyncio.wait_for(live.stop(reason), 30)
            logged: list[dict[str, Any]] = []
            async for _, encoded in live.follow():
                logged += [orjson.loads(data) for data in encoded]
            return logged
        finally:
            await writer.aclose()
            await store.aclose()

    events = asyncio.run(run())
    check_stream(events)
    final = events[-1]["response"]
    assert final["status"] == {"cancel": "cancelled", "shutdown": "failed"}[reason], final
    text = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert text == "Thinking about word counts."  # what the model wrote is kept, and streamed
