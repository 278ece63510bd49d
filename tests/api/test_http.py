"""HTTP behaviour around the endpoint: auth, routing, limits, engine failures and client disconnects."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import openai
import pytest
from starlette.routing import Route

from harmony_responses.engine import EngineError, EngineStream, GenerateRequest, MockEngine
from harmony_responses.http.connection import api_http_protocol
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding

from .conftest import Serve
from .helpers import ANSWER, MODEL, Live, openai_client, post, sse_events


def _tokens(text: str) -> list[int]:
    return load_encoding().encode(text, allowed_special="all")


def _error(response: httpx.Response, status: int, code: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert error["type"] == ("server_error" if status >= 500 else "invalid_request_error")
    assert "Traceback" not in response.text
    return error


# ------------------------------------------------------------------------------------ routes and auth


def test_health_and_models(shared_server: Live) -> None:
    assert httpx.get(f"{shared_server.root}/health").json() == {"status": "ok"}
    models = httpx.get(f"{shared_server.base_url}/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [MODEL, "other-model"]
    assert all(m["object"] == "model" and isinstance(m["created"], int) for m in models["data"])
    client = openai_client(shared_server)
    assert [m.id for m in client.models.list()] == [MODEL, "other-model"]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-7")


def test_responses_posts_go_straight_to_their_route_and_answer_as_routed(
    shared_server: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /v1/responses`` skips the router (http/hot_route.py): the same answers, refusals included,
    while every other request is still routed."""
    routed: list[str] = []
    handle = Route.handle

    async def counted(self: Route, scope: Any, receive: Any, send: Any) -> None:
        routed.append(f"{scope['method']} {scope['path']}")
        await handle(self, scope, receive, send)

    monkeypatch.setattr(Route, "handle", counted)
    answered = post(shared_server, {"model": MODEL, "input": "Hi", "stream": True})
    assert answered.status_code == 200 and answered.headers["x-request-id"].startswith("req_")
    assert sse_events(answered.content)[-1]["type"] == "response.completed"
    refused = post(shared_server, {"model": MODEL, "input": "Hi", "temperature": 9})
    assert _error(refused, 400, "decimal_above_max_value")["param"] == "temperature"
    assert refused.headers["x-request-id"].startswith("req_")
    assert httpx.get(f"{shared_server.base_url}/models").status_code == 200
    _error(httpx.get(f"{shared_server.base_url}/responses"), 405, None)
    assert routed == ["GET /v1/models", "GET /v1/responses"]


def test_unknown_route_and_wrong_method(shared_server: Live) -> None:
    error = _error(httpx.get(f"{shared_server.base_url}/nothing"), 404, None)
    assert error["message"] == "Invalid URL (GET /v1/nothing)"
    error = _error(httpx.get(f"{shared_server.base_url}/responses"), 405, None)
    assert "POST" in error["message"]


def test_unknown_model(shared_server: Live) -> None:
    error = _error(post(shared_server, {"model": "gpt-7", "input": "Hi"}), 404, "model_not_found")
    assert error["message"] == "The model `gpt-7` does not exist or you do not have access to it."
    with pytest.raises(openai.NotFoundError):
        openai_client(shared_server).responses.create(model="gpt-7", input="Hi")
    # Every configured name is served, not only the first.
    assert post(shared_server, {"model": "other-model", "input": "Hi"}).json()["model"] == "other-model"


def test_api_keys(serve: Serve) -> None:
    live = serve([ANSWER], api_keys=("sk-first-key-123456", "sk-second-key-654321"))
    assert httpx.get(f"{live.root}/health").status_code == 200  # open for probes
    missing = _error(httpx.get(f"{live.base_url}/models"), 401, "invalid_api_key")
    assert "didn't provide an API key" in missing["message"]
    wrong = _error(
        post(live, {"model": MODEL, "input": "Hi"}, headers={"Authorization": "Bearer sk-wrong-key-000000"}),
        401,
        "invalid_api_key",
    )
    assert "sk-wrong-key-000000" not in wrong["message"]  # masked
    with pytest.raises(openai.AuthenticationError):
        openai_client(live, api_key="nope").responses.create(model=MODEL, input="Hi")
    good = openai_client(live, api_key="sk-second-key-654321").responses.create(model=MODEL, input="Hi")
    assert good.output_text == "Hello there!"


# ------------------------------------------------------------------------------------ bodies


def test_body_too_large(serve: Serve) -> None:
    live = serve([ANSWER], max_body_bytes=2000)
    body = {"model": MODEL, "input": "x" * 3000}
    _error(post(live, body), 413, "request_too_large")

    def chunks() -> Any:  # no Content-Length: the limit holds while reading
        yield b'{"model": "gpt-oss-20b", "input": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}'

    json_type = {"Content-Type": "application/json"}
    _error(httpx.post(f"{live.base_url}/responses", content=chunks(), headers=json_type), 413, "request_too_large")
    assert post(live, {"model": MODEL, "input": "small"}).status_code == 200


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"{not json", "could not parse the JSON body"),
        (b"", "could not parse the JSON body"),
        (b"[1, 2]", "expected a JSON object, but got an array"),
        (b'"text"', "expected a JSON object, but got a string"),
        (b'{"model": "gpt-oss-20b", "input": "\xff"}', "could not parse the JSON body"),
    ],
)
def test_invalid_json(shared_server: Live, content: bytes, fragment: str) -> None:
    error = _error(post(shared_server, content, headers={"Content-Type": "application/json"}), 400, error_code(content))
    assert fragment in error["message"]


def error_code(content: bytes) -> str | None:
    return "invalid_type" if content.startswith((b"[", b'"')) else None


def test_compressed_body_is_refused(shared_server: Live) -> None:
    body = gzip.compress(b'{"model": "gpt-oss-20b", "input": "Hi"}')
    response = post(shared_server, body, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    _error(response, 415, "unsupported_content_encoding")


# ------------------------------------------------------------------------------------ engine failures


def _engine(handler: Callable[[GenerateRequest], AsyncIterator[Any]]) -> MockEngine:
    return MockEngine(handler)  # type: ignore[arg-type]


def test_engine_refusing_before_the_stream_is_503(serve: Serve) -> None:
    async def refuse(request: GenerateRequest) -> EngineStream:
        raise EngineError("the engine at http://gpu:8000 is unreachable")
        yield  # pragma: no cover

    live = serve(_engine(refuse))
    for stream in (False, True):
        error = _error(post(live, {"model": MODEL, "input": "Hi", "stream": stream}), 503, "engine_unavailable")
        assert "unreachable" in error["message"]


def test_engine_bug_before_the_stream_is_a_json_500(serve: Serve) -> None:
    async def broken(request: GenerateRequest) -> EngineStream:
        raise ZeroDivisionError("secret internals")
        yield  # pragma: no cover

    live = serve(_engine(broken))
    error = _error(post(live, {"model": MODEL, "input": "Hi", "stream": True}), 500, "server_error")
    assert "secret internals" not in error["message"]


@pytest.mark.parametrize("ending", ["raise", "no end"])
def test_engine_breaking_its_contract_mid_stream_fails_in_band(serve: Serve, ending: str) -> None:
    async def handler(request: GenerateRequest) -> EngineStream:
        yield TokenChunk(token_ids=_tokens("<|channel|>final<|message|>Hel"))
        if ending == "raise":
            raise RuntimeError("engine exploded")

    live = serve(_engine(handler))
    events = sse_events(post(live, {"model": MODEL, "input": "Hi", "stream": True}).content)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    message = events[-1]["response"]["error"]["message"]
    assert ("engine exploded" in message) if ending == "raise" else ("ended without" in message)


def test_a_turn_ended_without_stop_token_stops_the_engine(serve: Serve) -> None:
    stopped = threading.Event()

    async def handler(request: GenerateRequest) -> EngineStream:
        try:
            # A tool result written by the model itself ends its turn (the translator ignores the rest), but
            # the engine never stops on its own: the server must stop it and end the response.
            yield TokenChunk(token_ids=_tokens("<|start|>functions.x to=assistant<|channel|>commentary<|message|>"))
            while True:
                yield TokenChunk(token_ids=_tokens("more"))
        finally:
            stopped.set()

    live = serve(_engine(handler))
    events = sse_events(post(live, {"model": MODEL, "input": "Hi", "stream": True}).content)
    assert events[-1]["type"] == "response.completed"
    assert stopped.wait(5)


# ------------------------------------------------------------------------------------ disconnects


def _endless(started: threading.Event, cancelled: threading.Event) -> MockEngine:
    async def handler(request: GenerateRequest) -> EngineStream:
        import asyncio

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

    return MockEngine(handler)


# The server's own connections tell a response its client is gone; uvicorn's, through receive().
PROTOCOLS = pytest.mark.parametrize("http", [api_http_protocol(), "auto"], ids=["ours", "uvicorn's"])


@PROTOCOLS
def test_disconnect_cancels_a_stream(serve: Serve, http: Any) -> None:
    started, cancelled = threading.Event(), threading.Event()
    live = serve(_endless(started, cancelled), http=http)
    with httpx.Client(timeout=5) as client:
        body = {"model": MODEL, "input": "Hi", "stream": True}
        with client.stream("POST", f"{live.base_url}/responses", json=body) as r:
            for line in r.iter_lines():
                if "output_text.delta" in line:
                    break
    assert started.is_set()
    assert cancelled.wait(5), "the engine generation was not cancelled after the client left"


@PROTOCOLS
@pytest.mark.parametrize("size", [10, 300_000], ids=["small body", "large body"])
def test_disconnect_cancels_a_non_streaming_request(serve: Serve, http: Any, size: int) -> None:
    # A large body pauses the connection's reading while it arrives: it must be on again for the loss to be seen.
    started, cancelled = threading.Event(), threading.Event()
    live = serve(_endless(started, cancelled), http=http)
    body = json.dumps({"model": MODEL, "input": "Hi there. " * (size // 10)}).encode()
    head = "POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", live.port), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        assert started.wait(10)
    # Gone while the engine generates, before the response's first byte.
    assert cancelled.wait(5), "the engine generation was not cancelled after the client left"


def test_many_concurrent_streams(serve: Serve) -> None:
    live = serve([{"harmony": ANSWER, "delay_ms": 2}])
    results: list[str] = []
    client = httpx.Client(timeout=20)  # one pool: creating 16 clients costs more than the streams

    def one() -> None:
        response = client.post(f"{live.base_url}/responses", json={"model": MODEL, "input": "Hi", "stream": True})
        results.append(sse_events(response.content)[-1]["response"]["output"][-1]["content"][0]["text"])

    threads = [threading.Thread(target=one) for _ in range(16)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    client.close()
    assert results == ["Hello there!"] * 16
    assert time.monotonic() - started < 10


def test_a_renderer_crash_is_still_a_400(shared_server: Live) -> None:
    # A role that is not a string once crashed the renderer with a TypeError; whatever the renderer does
    # with odd input, the client gets a 400 and never a 500.
    body = {"model": MODEL, "input": [{"type": "message", "role": ["user"], "content": "Hi"}]}
    response = post(shared_server, body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_malformed_engine_chunk_fails_in_band(serve: Serve) -> None:
    async def handler(request: GenerateRequest) -> EngineStream:
        yield TokenChunk(token_ids=_tokens("<|channel|>final<|message|>Hi"), logprobs=[])  # one logprob short
        yield EngineEnd(reason="stop")

    live = serve(_engine(handler))
    events = sse_events(post(live, {"model": MODEL, "input": "Hi", "stream": True}).content)
    assert events[-1]["type"] == "response.failed"
    assert "malformed chunk" in events[-1]["response"]["error"]["message"]
