"""Traces kept beside their responses, on SQLite and PostgreSQL: read through the response's owner, gone with
the response (DELETE, retention), and a traced server's trace readable as soon as the client saw the end."""

from __future__ import annotations

import asyncio

import httpx
import orjson

from api.helpers import MODEL, post, sse_events
from harmony_responses.store import InsertResponse, PutTrace, StoredResponse, UpdateResponse, store_from_spec

from .conftest import Serve

ANSWER = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi!<|return|>"


def _record(response_id: str, owner: str) -> StoredResponse:
    return StoredResponse(
        id=response_id,
        owner=owner,
        created_at=1,
        status="in_progress",
        background=False,
        previous_response_id=None,
        conversation_id=None,
        process_id="proc",
        cancel_requested=False,
        response=b"{}",
    )


def test_a_trace_is_read_through_its_owner_and_goes_with_its_response(store_spec: str) -> None:
    async def run() -> None:
        store = store_from_spec(store_spec)
        await store.open()
        try:
            await store.write(
                [
                    InsertResponse(record=_record("resp_a", "alice"), updated_at=1.0),
                    InsertResponse(record=_record("resp_b", "alice"), updated_at=1.0),
                    PutTrace(response_id="resp_a", data=b'{"v":1}'),
                    PutTrace(response_id="resp_b", data=b'{"v":"b"}'),
                ]
            )
            await store.write([PutTrace(response_id="resp_a", data=b'{"v":2}')])  # a rewrite replaces it
            assert await store.get_trace("resp_a", "alice") == b'{"v":2}'
            assert await store.get_trace("resp_a", "bob") is None  # another key's: as if there were none
            assert await store.get_trace("resp_c", "alice") is None
            assert await store.delete_response("resp_a", "alice")
            assert await store.get_trace("resp_a", "alice") is None
            done = UpdateResponse(id="resp_b", status="completed", response=b"{}", updated_at=2.0, finished=True)
            await store.write([done])
            assert await store.purge(before=2) == 1  # retention: created_at 1 < 2
            assert await store.get_trace("resp_b", "alice") is None
        finally:
            await store.aclose()

    asyncio.run(run())


def test_a_traced_response_has_its_trace_once_the_client_saw_its_end(serve: Serve) -> None:
    live = serve([ANSWER] * 3, trace=True)
    for _ in range(3):  # each time at once: the trace commits in its terminal event's round, or before it
        sent = sse_events(post(live, {"model": MODEL, "input": "Hi", "stream": True}).content)
        response_id = sent[-1]["response"]["id"]
        answer = httpx.get(f"{live.base_url}/responses/{response_id}/trace", params={"format": "json"})
        assert answer.status_code == 200, answer.text
        assert [e["event"] for e in answer.json()["events"]] == sent
    assert httpx.delete(f"{live.base_url}/responses/{response_id}").status_code == 200
    assert httpx.get(f"{live.base_url}/responses/{response_id}/trace").status_code == 404


def test_a_background_response_is_traced_too(serve: Serve) -> None:
    live = serve([ANSWER], trace=True)
    created = post(live, {"model": MODEL, "input": "Hi", "background": True, "stream": True})
    sent = sse_events(created.content)
    trace = httpx.get(f"{live.base_url}/responses/{sent[-1]['response']['id']}/trace?format=json").json()
    assert [e["event"] for e in trace["events"]] == sent
    assert "".join(t["text"] for t in trace["tokens"]).endswith("<|channel|>final<|message|>Hi!<|return|>")


def test_a_cancelled_response_keeps_its_trace_to_its_end(serve: Serve) -> None:
    slow = {"harmony": "<|channel|>final<|message|>" + "tick " * 400 + "<|return|>", "delay_ms": 20}
    live = serve([slow], trace=True)
    body = {"model": MODEL, "input": "Hi", "background": True, "stream": True}
    events: list[dict] = []
    cancelled = False
    with httpx.stream("POST", f"{live.base_url}/responses", json=body, timeout=30) as answer:
        for line in answer.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(orjson.loads(line[6:]))
            if events[-1]["type"] == "response.output_text.delta" and not cancelled:  # generating: cancel it
                cancel = httpx.post(f"{live.base_url}/responses/{events[0]['response']['id']}/cancel")
                assert cancel.status_code == 200
                cancelled = True
    assert events[-1]["type"] == "response.incomplete" and events[-1]["response"]["status"] == "cancelled"
    trace = httpx.get(f"{live.base_url}/responses/{events[0]['response']['id']}/trace?format=json").json()
    assert [e["event"] for e in trace["events"]] == events  # the stop's events are there, as sent
    assert 0 < len(trace["tokens"]) < 400
