"""Reads taken where they come in (engine/_reading.py): a steady stream's chunks translated, framed and written from
the engine connection's data callback instead of the stream loop. The client must not be able to tell: the same
events, in the same order, whatever the engine, its chunking, and however the stream ends (its end, a budget, a
cut connection, a bad line, an error object, a stall). Each case runs both ways, the direct path on and off, and
checks that it was taken when on.
"""

from __future__ import annotations

import gc
import socket
import time
from typing import Any

import httpx
import orjson
import pytest

from harmony_responses.engine import HTTPEngine
from harmony_responses.engine._stream_client import Answer
from harmony_responses.http.connection import api_http_protocol
from harmony_responses.run import ResponseRun

from .fakes import FAKES, Fake, Scenario, VLLMFake, harmony
from .helpers import MODEL, dechunked, sse_events, stack, without_ids

ENGINES = list(FAKES)
# Reasoning, then an answer with characters cut across tokens (an emoji, CJK): the decoder holds bytes between
# them, which the inline paths must leave to the translator's step.
TEXT = (
    "<|channel|>analysis<|message|>Think: 東京 is far, über 9,000 km 🚀 away.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>The answer — 42 🎉, with ümlauts and 東京 again.<|return|>"
)
TOKENS = harmony(TEXT)


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many chunks were taken where they were read (a list the test reads)."""
    count = [0]
    take = ResponseRun._take_read

    def counting(self: ResponseRun, chunk: Any) -> bool:
        done = take(self, chunk)
        count[0] += done
        return done

    monkeypatch.setattr(ResponseRun, "_take_read", counting)
    return count


def _events(kind: str, scenario: Scenario, body: dict[str, Any] | None = None, **config: Any) -> list[dict[str, Any]]:
    # The server's own protocol, whose socket the events are written to past uvicorn's send (as served).
    with stack(kind, FAKES[kind](scenario), http=api_http_protocol(), **config) as s:
        response = s.post({"input": "Hi", "stream": True, "store": False, **(body or {})})
    assert response.status_code == 200, response.text
    # The fake's address (in a failure's message) is another each time.
    return without_ids(sse_events(response.content.replace(s.fake.url.encode(), b"FAKE")))


def _both_ways(
    monkeypatch: pytest.MonkeyPatch, taken: list[int], kind: str, scenario: Scenario, **kwargs: Any
) -> list[dict[str, Any]]:
    direct = _events(kind, scenario, **kwargs)
    assert taken[0] > 0, "no chunk was taken where it was read"
    with monkeypatch.context() as m:
        m.setattr(HTTPEngine, "direct_reads", False)
        looped = _events(kind, scenario, **kwargs)
    assert direct == looped
    assert [e["sequence_number"] for e in direct] == list(range(len(direct)))
    return direct


def _text(events: list[dict[str, Any]], kind: str = "response.output_text.delta") -> str:
    return "".join(e["delta"] for e in events if e["type"] == kind)


@pytest.mark.parametrize("chunk", [1, 3])
@pytest.mark.parametrize("kind", ENGINES)
def test_a_paced_stream_reads_the_same_taken_where_it_is_read(
    monkeypatch: pytest.MonkeyPatch, taken: list[int], kind: str, chunk: int
) -> None:
    events = _both_ways(monkeypatch, taken, kind, Scenario(tokens=TOKENS, chunk=chunk, delay=0.003))
    assert events[-1]["type"] == "response.completed"
    assert _text(events) == "The answer — 42 🎉, with ümlauts and 東京 again."
    assert _text(events, "response.reasoning_text.delta") == "Think: 東京 is far, über 9,000 km 🚀 away."


@pytest.mark.parametrize(
    ("what", "says"),
    [
        ("error_after", "an error in the stream: CUDA error"),
        ("drop_after", "the connection was cut mid-response"),
        ("garbage_after", "sent a line that is not JSON"),
    ],
)
def test_a_failure_after_reads_taken_directly_fails_the_response_the_same(
    monkeypatch: pytest.MonkeyPatch, taken: list[int], what: str, says: str
) -> None:
    # After 30 tokens: well inside the answer, its deltas flowing directly by then.
    scenario = Scenario(tokens=TOKENS, delay=0.003, **{what: 30})
    events = _both_ways(monkeypatch, taken, "vllm", scenario)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert says in events[-1]["response"]["error"]["message"]


def test_the_output_budget_cuts_a_stream_taken_directly_at_the_same_token(
    monkeypatch: pytest.MonkeyPatch, taken: list[int]
) -> None:
    # An engine that goes past the budget it was given (one streamed 49,844 tokens for a limit of 200).
    plan = Fake.plan
    monkeypatch.setattr(Fake, "plan", lambda self, s, stops, max_tokens: plan(self, s, stops, 1_000_000))
    scenario = Scenario(tokens=TOKENS, delay=0.003)
    events = _both_ways(monkeypatch, taken, "vllm", scenario, body={"max_output_tokens": 32})
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["usage"]["output_tokens"] == 32


def test_a_stall_after_reads_taken_directly_hits_the_timeout(monkeypatch: pytest.MonkeyPatch, taken: list[int]) -> None:
    scenario = Scenario(tokens=TOKENS, delay=0.003, stall_after=30)
    events = _both_ways(monkeypatch, taken, "vllm", scenario, engine_stall_timeout=0.4)
    assert "the stream stalled: no data for 0.4 s" in events[-1]["response"]["error"]["message"]


def test_a_stream_taken_directly_for_longer_than_the_stall_timeout_is_no_stall(taken: list[int]) -> None:
    # Each read taken where it came in is news from the engine: the watchdog must hear of it.
    answer = "<|channel|>final<|message|>" + "word " * 150 + "<|return|>"
    scenario = Scenario(tokens=harmony(answer), delay=0.006)  # about a second of tokens, 6 ms apart
    events = _events("vllm", scenario, engine_stall_timeout=0.3)
    assert taken[0] > 100
    assert events[-1]["type"] == "response.completed"
    assert _text(events) == "word " * 150


def test_a_client_that_stops_reading_gets_every_event_in_order_once_it_reads(taken: list[int]) -> None:
    # Its socket's buffer fills while the stream is taken directly: the events left then go through the writer,
    # in order, and the stream loop takes over until the backlog is gone.
    answer = "<|channel|>final<|message|>" + "word " * 3_000 + "<|return|>"
    with stack(
        "vllm",
        VLLMFake(Scenario(tokens=harmony(answer), chunk=4, delay=0.0005)),
        sndbuf=16 * 1024,
        http=api_http_protocol(),
    ) as s:
        host, port = s.root.removeprefix("http://").split(":")
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect((host, int(port)))
        body = orjson.dumps({"model": MODEL, "input": "Hi", "stream": True, "store": False})
        client.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        client.settimeout(30)
        raw = bytearray(client.recv(2048))  # the head and the first events, then nothing for a while
        deadline = time.monotonic() + 10
        while taken[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # the server's writes back up behind the unread socket
        while data := client.recv(1 << 16):
            raw += data
        client.close()
    assert taken[0] > 0
    events = sse_events(dechunked(bytes(raw)))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert _text(events) == "word " * 3_000


def test_streams_taken_directly_leave_no_answer_behind_ended_or_cut(taken: list[int]) -> None:
    # A client gone mid-stream cancels the stream loop while the connection's callback may take its reads: the
    # answer holds the callback, which holds the answer, unless the loop lets go; nothing may be left in a cycle.
    answer = "<|channel|>final<|message|>" + "word " * 200 + "<|return|>"
    fake = VLLMFake(Scenario(tokens=harmony(answer), delay=0.003))
    with stack("vllm", fake, http=api_http_protocol()) as s:
        body = {"model": MODEL, "input": "Hi", "stream": True, "store": False}
        url = f"{s.base_url}/responses"
        assert httpx.post(url, json=body, timeout=30).status_code == 200  # one-time work is not a request's
        gc.collect()
        gc.disable()
        try:
            for _ in range(2):
                assert b"response.completed" in httpx.post(url, json=body, timeout=30).content
            for cut in range(2):
                with httpx.stream("POST", url, json=body, timeout=30) as response:
                    deltas = 0
                    for line in response.iter_lines():
                        deltas += line == "event: response.output_text.delta"
                        if deltas == 20:
                            break
                deadline = time.monotonic() + 10
                while len(fake.disconnects) <= cut and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert len(fake.disconnects) == cut + 1
            assert taken[0] > 100
            time.sleep(0.2)  # the server's side of the cut streams winds down (the fake saw them go already)
            # Answers a cancelled timer's context still reaches (asyncio keeps it until the timer's time) are alive:
            # none may hold its stream's callback. Any other is gone, or in a cycle, which the collector finds.
            alive = [o for o in gc.get_objects() if type(o) is Answer]
            assert [a for a in alive if a.direct is not None] == []
            gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage to be looked at
            gc.collect()
            assert [o for o in gc.garbage if type(o) is Answer] == []
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
