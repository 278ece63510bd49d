"""SSE framing and the stream/JSON equivalence, checked on raw bytes with httpx."""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harmony_responses import sse

from .conftest import Serve
from .helpers import ANSWER, CALL_WEATHER, MODEL, WEATHER_TOOL, post, sse_events

TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def _normalise(value: Any) -> Any:
    """Ids and timestamps differ between two runs of the same script; everything else must not."""
    text = re.sub(r'"(resp|msg|rs|fc|call)_[0-9a-f]+"', r'"\1_X"', httpx.Response(200, json=value).text)
    return re.sub(r'"(created_at|completed_at)":\d+', r'"\1":0', text)


def test_sse_framing(serve: Serve) -> None:
    live = serve([{"harmony": ANSWER, "chunk": 3}])
    response = post(live, {"model": MODEL, "input": "Hi", "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    raw = response.content
    assert b"\nid:" not in raw and not raw.startswith(b"id:")
    assert b"[DONE]" not in raw
    events = sse_events(raw)  # event == type, one data line, LF only, blank line after each
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events].count("response.completed") == 1
    assert events[-1]["type"] == "response.completed"
    assert all("error" not in e or not e["error"] for e in events[:-1])


def test_stream_is_decided_by_the_body_not_accept(serve: Serve) -> None:
    live = serve([ANSWER])
    streamed = post(live, {"model": MODEL, "input": "Hi", "stream": True}, headers={"Accept": "application/json"})
    assert streamed.headers["content-type"] == "text/event-stream"
    plain = post(live, {"model": MODEL, "input": "Hi"}, headers={"Accept": "text/event-stream"})
    assert plain.headers["content-type"] == "application/json"
    assert plain.json()["status"] == "completed"


def test_body_ends_right_after_the_terminal_event(serve: Serve) -> None:
    live = serve([{"harmony": ANSWER, "delay_ms": 5}])
    with httpx.Client(timeout=5) as client:
        body = {"model": MODEL, "input": "Hi", "stream": True}
        with client.stream("POST", f"{live.base_url}/responses", json=body) as r:
            received = b""
            for chunk in r.iter_raw():
                received += chunk
                # Each write holds whole events: the body never stops in the middle of one.
                assert received.endswith(b"\n\n")
            # iter_raw returned: the server ended the body; the terminal event is the last thing in it.
    assert sse_events(received)[-1]["type"] == "response.completed"


def test_json_body_equals_the_terminal_event_response(serve: Serve) -> None:
    for completion in (ANSWER, CALL_WEATHER):
        live = serve([completion])
        body = {"model": MODEL, "input": "Weather?", "tools": [WEATHER_TOOL], "metadata": {"k": "v"}}
        plain = post(live, body).json()
        terminal = sse_events(post(live, {**body, "stream": True}).content)[-1]
        assert terminal["type"] in TERMINAL
        assert _normalise(plain) == _normalise(terminal["response"])


def test_chunking_does_not_change_the_events(serve: Serve) -> None:
    streams = []
    for chunk in (1, 4, 1000):
        live = serve([{"harmony": ANSWER, "chunk": chunk}])
        streams.append(_normalise(sse_events(post(live, {"model": MODEL, "input": "Hi", "stream": True}).content)))
    assert streams[0] == streams[1] == streams[2]


def test_error_event_has_both_forms_then_failed(serve: Serve) -> None:
    live = serve([{"harmony": "<|channel|>final<|message|>Hel", "error": "GPU on fire"}])
    events = sse_events(post(live, {"model": MODEL, "input": "Hi", "stream": True}).content)
    error, failed = events[-2:]
    assert error["type"] == "error" and "GPU on fire" in error["message"]
    assert error["error"]["message"] == error["message"]
    assert failed["type"] == "response.failed" and failed["response"]["status"] == "failed"
    # The open message was closed (incomplete) before the error: nothing is left open.
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert done and done[-1]["item"]["status"] == "incomplete"


_TYPES = st.sampled_from(
    ["response.output_text.delta", "response.created", "response.completed", *(f"x.t{i}.delta" for i in range(4))]
)
_EVENTS = st.lists(
    st.fixed_dictionaries({"type": _TYPES, "delta": st.text(), "sequence_number": st.integers(0, 2**31)}),
    max_size=20,
)


@given(batches=st.lists(_EVENTS, max_size=6), fresh=st.booleans())
def test_a_batch_is_framed_as_its_events_one_after_another(batches: list[list[dict[str, Any]]], fresh: bool) -> None:
    # encode_events takes shortcuts (one event alone; one join for many) that must frame exactly as
    # encode_event does event by event, a type's first event (its prefix not yet made) included.
    if fresh:
        sse._EVENT_PREFIX.clear()
    for batch in batches:
        body = sse.encode_events(batch)
        assert body == b"".join(sse.frame(e["type"], orjson.dumps(e)) for e in batch)
        assert not batch or sse_events(body) == batch


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_ANY_EVENTS = st.lists(
    st.builds(lambda kind, rest: {"type": kind, **rest}, _TYPES, st.dictionaries(st.text(max_size=8), _JSON)),
    min_size=2,
    max_size=12,
)


def _pure_python(batch: list[dict[str, Any]]) -> bytes:
    compiled, sse.FRAMES = sse.FRAMES, None
    try:
        return sse.encode_events(batch)
    finally:
        sse.FRAMES = compiled


@given(batch=_ANY_EVENTS)
def test_the_compiled_framing_makes_the_bytes_python_makes(batch: list[dict[str, Any]]) -> None:
    # _sse_frames.c frames a batch whose types have their prefixes already (each type's first event goes
    # through Python, which keeps its prefix): any JSON values, unicode, nesting.
    expected = _pure_python(batch)
    assert sse.encode_events(batch) == expected
    assert sse.encode_events(batch) == expected  # every prefix known now: all of it compiled, where built
    if sse.FRAMES is not None:
        assert sse.FRAMES(batch, sse._EVENT_PREFIX, orjson.dumps) == expected


def test_an_event_orjson_refuses_is_refused_either_way() -> None:
    batch = [{"type": "response.created", "n": 1}, {"type": "response.created", "n": 2**70}]
    sse.encode_events(batch[:1] * 2)  # the type's prefix made
    for encode in (sse.encode_events, _pure_python):
        with pytest.raises(orjson.JSONEncodeError):
            encode(batch)
