"""SIGTERM ends a server within its grace period, with every response it was running ended (issue 16 #2)."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.helpers import MODEL

from .server_process import server_process


def test_sigterm_mid_stream_exits_promptly_and_ends_what_ran(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'store.sqlite3'}"
    script = tmp_path / "slow.jsonl"
    script.write_text(
        json.dumps({"harmony": "<|channel|>final<|message|>" + "tick " * 600 + "<|return|>", "delay_ms": 50})
    )
    args = ["--store", store, "--engine", f"replay:{script}", "--model", MODEL, "--shutdown-grace", "2"]
    streamed: list[str] = []
    with server_process(args) as server:
        root = server.root
        background = httpx.post(f"{root}/v1/responses", json={"model": MODEL, "input": "bg", "background": True})
        background_id = background.json()["id"]

        def stream() -> None:
            body: dict[str, Any] = {"model": MODEL, "input": "fg", "stream": True}
            with httpx.stream("POST", f"{root}/v1/responses", json=body, timeout=60) as r:
                streamed.extend(line[7:] for line in r.iter_lines() if line.startswith("event: "))

        reader = threading.Thread(target=stream)
        reader.start()
        time.sleep(1.5)  # both mid-generation
        started = time.monotonic()
        code = server.stop(signal.SIGTERM, timeout=30)
        took = time.monotonic() - started
        reader.join(10)
    # uvicorn ends a graceful shutdown by re-raising the signal it caught: exit status -SIGTERM.
    assert code in (0, -signal.SIGTERM) and took < 15, (code, took)
    assert streamed and streamed[-1] == "response.failed"  # the client was told, the body ended

    with server_process(args) as again:
        stored = httpx.get(f"{again.root}/v1/responses/{background_id}").json()
        assert stored["status"] == "failed" and "shut down" in stored["error"]["message"]
        with httpx.stream("GET", f"{again.root}/v1/responses/{background_id}", params={"stream": "true"}) as r:
            replay = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
        assert replay[-1] == "response.failed"


def test_sigterm_gives_a_websocket_response_the_same_grace(tmp_path: Path) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    script = tmp_path / "slow.jsonl"
    script.write_text(
        json.dumps({"harmony": "<|channel|>final<|message|>" + "tick " * 60 + "<|return|>", "delay_ms": 30})
    )
    args = ["--store", f"sqlite:{tmp_path / 'store.sqlite3'}", "--engine", f"replay:{script}", "--model", MODEL]
    received: list[dict[str, Any]] = []
    closed: list[int | None] = []
    # websockets 17.1 warns on a connection not used as a context manager (the warning is an error here).
    with (
        server_process([*args, "--shutdown-grace", "10"]) as server,
        connect(server.root.replace("http://", "ws://") + "/v1/responses") as socket,
    ):

        def read() -> None:
            try:
                while True:
                    received.append(json.loads(socket.recv()))
            except ConnectionClosed as exc:
                closed.append(exc.rcvd.code if exc.rcvd else None)

        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi"}))
        reader = threading.Thread(target=read)
        reader.start()
        while not any(e["type"] == "response.output_text.delta" for e in received):
            time.sleep(0.01)
        server.stop(signal.SIGTERM, timeout=30)
        reader.join(10)
    # The response went on to its end within the grace (60 ticks at 30 ms), then the socket closed.
    assert received[-1]["type"] == "response.completed", [e["type"] for e in received[-3:]]
    assert "tick " * 60 in received[-1]["response"]["output"][-1]["content"][0]["text"]
    assert closed == [1012]


def _ask(connection: http.client.HTTPConnection, method: str, path: str) -> tuple[int, dict[str, str], Any]:
    connection.request(method, path, body=json.dumps({"model": MODEL, "input": "hi"}) if method == "POST" else None)
    answer = connection.getresponse()
    return answer.status, {k.lower(): v for k, v in answer.getheaders()}, json.loads(answer.read())


def test_sigterm_answers_new_requests_503_through_the_grace_while_a_response_runs(tmp_path: Path) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    script = tmp_path / "slow.jsonl"
    script.write_text(
        json.dumps({"harmony": "<|channel|>final<|message|>" + "tick " * 6000 + "<|return|>", "delay_ms": 20})
    )
    args = ["--store", f"sqlite:{tmp_path / 'store.sqlite3'}", "--engine", f"replay:{script}", "--model", MODEL]
    deltas: list[str] = []
    flowing, stop = threading.Event(), threading.Event()
    with server_process([*args, "--shutdown-grace", "300"]) as server:

        def stream() -> None:
            body: dict[str, Any] = {"model": MODEL, "input": "fg", "stream": True}
            with httpx.stream("POST", f"{server.root}/v1/responses", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("event: response.output_text.delta"):
                        deltas.append(line)
                        flowing.set()
                    if stop.is_set():
                        return  # the client goes away: the response is cancelled, and nothing runs any more

        reader = threading.Thread(target=stream)
        reader.start()
        assert flowing.wait(60)
        kept_alive = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        assert _ask(kept_alive, "GET", "/v1/models")[0] == 200
        server.process.send_signal(signal.SIGTERM)
        # Asked on and on, so that uvicorn's keep-alive timeout never closes it, until the shutdown has begun: the
        # connection stays open and is answered, not cut.
        deadline = time.monotonic() + 60
        while (answer := _ask(kept_alive, "GET", "/v1/models"))[0] == 200:
            assert time.monotonic() < deadline, "the server did not start shutting down"
            time.sleep(0.05)
        status, headers, body = answer
        assert (status, body["error"]["code"], body["error"]["type"]) == (503, "shutting_down", "server_error")
        assert headers["connection"] == "close"
        # A new connection: the socket still listens, and the request gets the same answer.
        fresh = httpx.post(f"{server.root}/v1/responses", json={"model": MODEL, "input": "hi"}, timeout=30)
        assert fresh.status_code == 503 and fresh.json()["error"]["code"] == "shutting_down"
        assert set(fresh.json()["error"]) == {"message", "type", "param", "code"}
        # A WebSocket handshake too.
        with pytest.raises(InvalidStatus) as refused:
            connect(server.root.replace("http://", "ws://") + "/v1/responses", open_timeout=30)
        assert refused.value.response.status_code == 503
        assert json.loads(refused.value.response.body)["error"]["code"] == "shutting_down"
        # The probes still answer: alive, not ready.
        assert httpx.get(f"{server.root}/health", timeout=30).status_code == 200
        ready = httpx.get(f"{server.root}/ready", timeout=30)
        assert ready.status_code == 503 and "shutting down" in ready.json()["reason"]
        # Meanwhile the running response goes on.
        seen = len(deltas)
        while len(deltas) == seen:
            assert reader.is_alive() and time.monotonic() < deadline + 60
            time.sleep(0.05)
        assert server.process.poll() is None
        stop.set()
        reader.join(60)
        code = server.process.wait(60)  # nothing runs any more: the grace ends there
    assert code in (0, -signal.SIGTERM), code


def test_sigterm_gives_a_background_response_the_grace_too(tmp_path: Path) -> None:
    script = tmp_path / "slow.jsonl"
    script.write_text(
        json.dumps({"harmony": "<|channel|>final<|message|>" + "tick " * 300 + "<|return|>", "delay_ms": 20})
    )
    store = f"sqlite:{tmp_path / 'store.sqlite3'}"
    args = ["--store", store, "--engine", f"replay:{script}", "--model", MODEL, "--shutdown-grace", "300"]
    with server_process(args) as server:
        created = httpx.post(f"{server.root}/v1/responses", json={"model": MODEL, "input": "bg", "background": True})
        assert created.json()["status"] in ("queued", "in_progress")
        code = server.stop(signal.SIGTERM, timeout=120)  # no stream open: only the background response runs
    assert code in (0, -signal.SIGTERM), code
    with server_process(args) as again:
        stored = httpx.get(f"{again.root}/v1/responses/{created.json()['id']}").json()
    assert stored["status"] == "completed", stored.get("error")
    assert "tick " * 300 in stored["output"][-1]["content"][0]["text"]
