"""SIGTERM ends a server within its grace period, with every response it was running ended (issue 16 #2)."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx

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
    with server_process([*args, "--shutdown-grace", "10"]) as server:
        socket = connect(server.root.replace("http://", "ws://") + "/v1/responses")

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
