"""Reasoning summaries (``reasoning.summary``) in every mode: not streamed, streamed, stored, background, resumed.

gpt-oss writes no summaries; asked for one, a reasoning item's own text is its summary (``--reasoning-summaries
reasoning``, the default), and ``--reasoning-summaries none`` leaves ``summary: []``. Against SQLite and a real
PostgreSQL, with the ``openai`` client.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai

from api.helpers import ANSWER, MODEL, openai_client, sse_events
from translate.invariants import check_stream

from .conftest import Serve

SUMMARY: Any = {"effort": "low", "summary": "auto"}
REASONING = "Easy."  # the analysis message of api.helpers.ANSWER
SUMMARY_EVENTS = [
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
]


def _summary_events(events: list[dict[str, Any]]) -> list[str]:
    """The summary event types in order, a run of deltas counted once."""
    types = [e["type"] for e in events if e["type"].startswith("response.reasoning_summary")]
    return [t for i, t in enumerate(types) if not (i and t == types[i - 1] and t.endswith(".delta"))]


def _wait(client: openai.OpenAI, response_id: str) -> Any:
    deadline = time.monotonic() + 20
    while (response := client.responses.retrieve(response_id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, response.status
        time.sleep(0.02)
    return response


def test_summary_in_every_mode(serve: Serve) -> None:
    live = serve([ANSWER] * 4)
    client = openai_client(live)
    expected = [{"type": "summary_text", "text": REASONING}]

    # Not streamed, and stored.
    response = client.responses.create(model=MODEL, input="Hi", reasoning=SUMMARY)
    reasoning = response.output[0].model_dump()
    assert reasoning["summary"] == expected and reasoning["content"][0]["text"] == REASONING
    assert client.responses.retrieve(response.id).output[0].model_dump()["summary"] == expected
    assert response.reasoning is not None and response.reasoning.summary == "auto"

    # Streamed: the summary events in the API's order, typed by the openai package.
    events = list(client.responses.create(model=MODEL, input="Hi", reasoning=SUMMARY, stream=True))
    raw = [e.model_dump(exclude_unset=True) for e in events]
    assert _summary_events(raw) == SUMMARY_EVENTS
    deltas = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert "".join(deltas) == REASONING
    assert events[-1].type == "response.completed"
    assert events[-1].response.output[0].model_dump()["summary"] == expected

    # Background, replayed from the log, and resumed after the summary part opened.
    queued = client.responses.create(model=MODEL, input="Hi", reasoning=SUMMARY, background=True)
    assert _wait(client, queued.id).output[0].model_dump()["summary"] == expected
    reply = httpx.get(f"{live.base_url}/responses/{queued.id}?stream=true", timeout=30)
    replayed = sse_events(reply.content)
    check_stream(replayed)
    assert _summary_events(replayed) == SUMMARY_EVENTS
    opened = next(e["sequence_number"] for e in replayed if e["type"] == SUMMARY_EVENTS[0])
    reply = httpx.get(f"{live.base_url}/responses/{queued.id}?stream=true&starting_after={opened}", timeout=30)
    resumed = sse_events(reply.content)
    assert resumed == [e for e in replayed if e["sequence_number"] > opened]
    assert _summary_events(resumed) == SUMMARY_EVENTS[1:]

    # Not asked for: no summary.
    plain = client.responses.create(model=MODEL, input="Hi")
    assert plain.output[0].model_dump()["summary"] == []


def test_the_summary_and_the_reasoning_text_stream_together(serve: Serve) -> None:
    # A token at a time (the replay engine's default chunk): each piece of the reasoning is a summary delta and
    # then a reasoning_text delta, so a client showing the raw text gets it as one showing summaries does.
    reasoning = "First add two and two, then check the sum."
    live = serve(
        [f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>"]
    )
    with openai_client(live).responses.stream(model=MODEL, input="2+2?", reasoning=SUMMARY) as stream:
        events = list(stream)
        final = stream.get_final_response()
    summary = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    raw = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert len(summary) > 5 and summary == raw and "".join(raw) == reasoning
    kinds = [e.type for e in events if e.type.startswith("response.reasoning")]
    assert kinds[1:3] == ["response.reasoning_summary_text.delta", "response.reasoning_text.delta"]
    item = final.output[0].model_dump(warnings=False)
    assert item["summary"] == [{"type": "summary_text", "text": reasoning}]
    assert item["content"] == [{"type": "reasoning_text", "text": reasoning}]
    assert final.output_text == "4"


def test_summaries_off_by_the_operator(serve: Serve) -> None:
    live = serve([ANSWER] * 2, reasoning_summaries="none")
    client = openai_client(live)
    response = client.responses.create(model=MODEL, input="Hi", reasoning=SUMMARY)
    assert response.output[0].model_dump()["summary"] == []
    events = [e.model_dump() for e in client.responses.create(model=MODEL, input="Hi", reasoning=SUMMARY, stream=True)]
    assert _summary_events(events) == []
