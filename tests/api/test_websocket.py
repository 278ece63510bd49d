"""WebSocket mode on ``/v1/responses`` through openai's own ``client.responses.connect()`` (and raw sockets
for what the SDK does not send): the events are SSE's, one per message; errors, lanes, connection-local
``previous_response_id``, ``generate: false``, a closed socket cancelling, auth and the Origin check."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx
import openai
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding
from translate.invariants import check_stream

from .conftest import Serve
from .helpers import ANSWER, CALL_WEATHER, MODEL, WEATHER_TOOL, Live, openai_client, post, sse_events

TERMINAL = ("response.completed", "response.failed", "response.incomplete")


def _tokens(text: str) -> list[int]:
    return load_encoding().encode(text, allowed_special="all")


class Recorder:
    """Answers "OK" and keeps every prompt (decoded)."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        self.prompts.append(load_encoding().decode(request.prompt_ids))
        yield TokenChunk(token_ids=_tokens("<|channel|>final<|message|>OK<|return|>"))
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


def _ws_url(live: Live) -> str:
    return live.base_url.replace("http://", "ws://") + "/responses"


def _one_response(connection: Any) -> list[dict[str, Any]]:
    """The raw events of one response (to its terminal event), as JSON objects."""
    events = []
    while True:
        event = json.loads(connection.recv_bytes() if hasattr(connection, "recv_bytes") else connection.recv())
        events.append(event)
        if event["type"] in TERMINAL or (event["type"] == "error" and "status" in event):
            return events


def _comparable(events: list[dict[str, Any]]) -> list[Any]:
    return [(e["type"], e.get("delta"), e.get("output_index"), e.get("item", {}).get("type")) for e in events]


def test_sdk_connect_streams_the_sse_events(serve: Serve) -> None:
    live = serve([ANSWER, CALL_WEATHER, ANSWER, CALL_WEATHER])
    client = openai_client(live)
    with client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Hi", store=False)
        answer = _one_response(connection)
        connection.response.create(model=MODEL, input="Weather?", tools=[WEATHER_TOOL])  # type: ignore[list-item]
        call = _one_response(connection)
    for events in (answer, call):
        check_stream(events)
    assert answer[-1]["response"]["output"][-1]["content"][0]["text"] == "Hello there!"
    assert call[-1]["response"]["output"][-1]["type"] == "function_call"
    # The very events SSE sends for the same requests.
    sse_answer = sse_events(post(live, {"model": MODEL, "input": "Hi", "stream": True, "store": False}).content)
    body = {"model": MODEL, "input": "Weather?", "tools": [WEATHER_TOOL], "stream": True}
    sse_call = sse_events(post(live, body).content)
    assert _comparable(answer) == _comparable(sse_answer)
    assert _comparable(call) == _comparable(sse_call)
    # The stored one is the stored response, retrievable over HTTP.
    stored = client.responses.retrieve(call[-1]["response"]["id"])
    assert stored.output[-1].type == "function_call"


def test_sdk_typed_events_and_iteration(serve: Serve) -> None:
    live = serve([ANSWER])
    with openai_client(live).responses.connect() as connection:
        connection.response.create(model=MODEL, input="Hi")
        text = ""
        for event in connection:
            if event.type == "response.output_text.delta":
                text += event.delta
            if event.type == "response.completed":
                assert event.response.output_text == "Hello there!"
                break
    assert text == "Hello there!"


def test_previous_response_id_on_the_connection_without_store(serve: Serve) -> None:
    recorder = Recorder()
    live = serve(recorder.engine)
    client = openai_client(live)
    with client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="My name is Ada.", store=False)
        first = _one_response(connection)[-1]["response"]["id"]
        connection.response.create(model=MODEL, input="What is my name?", previous_response_id=first, store=False)
        second = _one_response(connection)
    check_stream(second)
    assert "My name is Ada." in recorder.prompts[-1] and "What is my name?" in recorder.prompts[-1]
    # Not stored: another connection (or HTTP) does not know it.
    with client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Again?", previous_response_id=first)
        [error] = _one_response(connection)
    assert error["status"] == 400 and error["error"]["code"] == "previous_response_not_found"


def test_generate_false_prepares_state_without_output(serve: Serve) -> None:
    recorder = Recorder()
    live = serve(recorder.engine)
    with connect(_ws_url(live)) as socket:
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hello", "generate": False}))
        warm = _one_response(socket)
        check_stream(warm)
        assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
        assert warm[-1]["response"]["output"] == [] and warm[-1]["response"]["usage"]["input_tokens"] > 0
        assert recorder.prompts == []  # nothing was generated
        # Codex's next request continues from it with no new input: the model reads the warmed-up input.
        warm_id = warm[-1]["response"]["id"]
        follow = {"type": "response.create", "model": MODEL, "input": [], "previous_response_id": warm_id}
        socket.send(json.dumps(follow))
        answer = _one_response(socket)
    check_stream(answer)
    assert "Hello" in recorder.prompts[-1]


def test_generate_false_with_store_is_stored_and_continued_from_elsewhere(serve: Serve) -> None:
    recorder = Recorder()
    live = serve(recorder.engine)
    client = openai_client(live)
    with connect(_ws_url(live)) as socket:
        warm_up = {"model": MODEL, "input": "My name is Ada.", "generate": False, "store": True}
        socket.send(json.dumps({"type": "response.create", **warm_up}))
        warm = _one_response(socket)[-1]["response"]
        socket.send(json.dumps({"type": "response.create", **warm_up, "store": False}))
        unstored = _one_response(socket)[-1]["response"]
    assert warm["store"] is True and warm["status"] == "completed"
    # Retrievable over HTTP, with its input, and its log replays the events the socket sent.
    stored = client.responses.retrieve(warm["id"])
    assert stored.status == "completed" and stored.output == []
    assert [item.content[0].text for item in client.responses.input_items.list(warm["id"])] == ["My name is Ada."]  # type: ignore[union-attr]
    replayed = sse_events(httpx.get(f"{live.base_url}/responses/{warm['id']}?stream=true", timeout=10).content)
    assert [e["type"] for e in replayed] == ["response.created", "response.in_progress", "response.completed"]
    # Continued from on a new socket, and over HTTP: the model reads the warmed-up input.
    with client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="What is my name?", previous_response_id=warm["id"])
        answer = _one_response(connection)
    check_stream(answer)
    assert answer[-1]["type"] == "response.completed"
    assert "My name is Ada." in recorder.prompts[-1] and "What is my name?" in recorder.prompts[-1]
    # store: false stays the connection's own.
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored["id"])
    assert len(recorder.prompts) == 1  # the warm-ups generated nothing


def test_errors_as_the_api_sends_them_and_the_socket_stays_open(serve: Serve) -> None:
    live = serve([ANSWER])
    with connect(_ws_url(live)) as socket:
        socket.send("not json")
        bad_json = json.loads(socket.recv())
        socket.send(json.dumps({"type": "session.update"}))
        bad_type = json.loads(socket.recv())
        socket.send(json.dumps({"type": "response.create", "model": "gpt-7", "input": "Hi"}))
        unknown_model = json.loads(socket.recv())
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi", "temperature": "hot"}))
        invalid = json.loads(socket.recv())
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi", "background": True}))
        background = json.loads(socket.recv())
        socket.send(json.dumps({"type": "response.processed", "response_id": "resp_x"}))  # Codex's ack: no answer
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi"}))
        answer = _one_response(socket)
    assert bad_json["type"] == "error" and bad_json["status"] == 400
    assert bad_type["status"] == 400 and bad_type["error"]["param"] == "type"
    assert unknown_model["status"] == 404 and unknown_model["error"]["code"] == "model_not_found"
    assert invalid["status"] == 400 and invalid["error"]["param"] == "temperature"
    assert invalid["error"]["type"] == "invalid_request_error"
    assert background["status"] == 400 and background["error"]["param"] == "background"
    check_stream(answer)
    # The SDK raises on an error event it has no handler for.
    with openai_client(live).responses.connect() as connection:
        connection.response.create(model="gpt-7", input="Hi")
        with pytest.raises(openai.OpenAIError, match="model_not_found"):
            connection.dispatch_events()


def test_an_engine_failure_mid_stream_is_in_band(serve: Serve) -> None:
    async def failing(request: GenerateRequest) -> EngineStream:
        yield TokenChunk(token_ids=_tokens("<|channel|>final<|message|>Hel"))
        raise RuntimeError("boom")

    live = serve(MockEngine(failing))
    with openai_client(live).responses.connect() as connection:
        connection.response.create(model=MODEL, input="Hi")
        events = _one_response(connection)
    check_stream(events)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]


def test_lanes_echo_their_stream_id_and_run_in_order(serve: Serve) -> None:
    live = serve([{"harmony": ANSWER, "delay_ms": 5}] * 3)
    with connect(_ws_url(live)) as socket:
        for lane in ("a", "a", "b"):
            socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi", "stream_id": lane}))
        events = [json.loads(socket.recv()) for _ in range(3 * 18)]
    by_lane: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    for event in events:
        by_lane[event.pop("stream_id")].append(event)
    a_first = by_lane["a"][: len(by_lane["a"]) // 2]
    a_second = by_lane["a"][len(by_lane["a"]) // 2 :]
    for response in (a_first, a_second, by_lane["b"]):
        check_stream(response)  # whole, in order: lane a's second response started after its first ended


def test_closing_the_socket_cancels_the_response(serve: Serve) -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def endless(request: GenerateRequest) -> EngineStream:
        try:
            yield TokenChunk(token_ids=_tokens("<|channel|>final<|message|>"))
            started.set()
            while True:
                await asyncio.sleep(0.01)
                yield TokenChunk(token_ids=_tokens(" and"))
        except (asyncio.CancelledError, GeneratorExit):
            cancelled.set()
            raise
        yield EngineEnd(reason="stop")  # pragma: no cover

    live = serve(MockEngine(endless))
    with connect(_ws_url(live)) as socket:
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi"}))
        response_id = json.loads(socket.recv())["response"]["id"]
        while "output_text.delta" not in socket.recv():
            pass
    assert started.is_set()
    assert cancelled.wait(5), "the engine generation was not cancelled after the socket closed"
    for _ in range(100):
        status = httpx.get(f"{live.base_url}/responses/{response_id}").json()["status"]
        if status != "in_progress":
            break
        threading.Event().wait(0.05)
    assert status == "cancelled"


def test_api_keys_and_origins(serve: Serve) -> None:
    live = serve([ANSWER], api_keys=("sk-the-right-key-1234",))
    with pytest.raises(InvalidStatus) as refused:
        connect(_ws_url(live))
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
    with openai_client(live, api_key="sk-the-right-key-1234").responses.connect() as connection:
        connection.response.create(model=MODEL, input="Hi")
        check_stream(_one_response(connection))

    open_live = serve([ANSWER])
    # A web page elsewhere cannot drive a loopback server through a WebSocket (browsers send Origin).
    with pytest.raises(InvalidStatus) as foreign:
        connect(_ws_url(open_live), origin="https://evil.example")  # type: ignore[arg-type]
    assert foreign.value.response.status_code == 403
    with connect(_ws_url(open_live), origin="http://localhost:3000") as socket:  # type: ignore[arg-type]
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi"}))
        check_stream(_one_response(socket))
