"""Helpers for the api tests: a live uvicorn server in a thread, clients, raw requests, SSE parsing."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from openai import AsyncOpenAI, OpenAI
from starlette.applications import Starlette
from starlette.types import ASGIApp

MODEL = "gpt-oss-20b"
START_TIMEOUT = 20.0


# Harmony completions used across the tests.
ANSWER = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hello there!<|return|>"
CALL_WEATHER = (
    "<|channel|>analysis<|message|>Need the weather.<|end|>"
    '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}'
    "<|call|>"
)
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


@dataclass
class Live:
    app: Starlette
    server: uvicorn.Server
    thread: threading.Thread
    base_url: str  # http://127.0.0.1:PORT/v1
    root: str  # http://127.0.0.1:PORT
    clients: list[OpenAI | AsyncOpenAI] = field(default_factory=list)

    @property
    def port(self) -> int:
        """The port it listens on, for raw-socket clients."""
        return int(self.root.rsplit(":", 1)[1])

    def stop(self) -> None:
        for client in self.clients:
            # Unclosed clients leave sockets for the GC to find: a ResourceWarning, an error under pytest.
            if isinstance(client, OpenAI):
                client.close()
        self.server.should_exit = True
        self.thread.join(10)
        assert not self.thread.is_alive(), "uvicorn did not stop"


def start_live(app: Starlette, asgi: ASGIApp | None = None, *, http: Any = "auto") -> Live:
    """Serve ``app`` (or ``asgi``, a wrapper around it) with uvicorn in a thread on a free port; ``http``: the
    connection's protocol (uvicorn's own by default; the server's is ``api_http_protocol()``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(asgi or app, http=http, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        if not thread.is_alive():
            raise AssertionError("uvicorn exited during startup (see the log above)")
        if time.monotonic() > deadline:
            raise AssertionError("uvicorn did not start in time")
        time.sleep(0.005)
    root = f"http://127.0.0.1:{port}"
    return Live(app=app, server=server, thread=thread, base_url=f"{root}/v1", root=root)


def stop_process(process: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    """Send a server process ``sig`` and wait for it to exit; killed if it has not within ``timeout``."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def write_script(path: Path, lines: list[dict[str, Any] | str]) -> str:
    objects = [{"harmony": line} if isinstance(line, str) else line for line in lines]
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return f"replay:{path}"


def openai_client(live: Live, **kwargs: Any) -> OpenAI:
    """A sync client with retries off, closed when the server stops."""
    kwargs.setdefault("api_key", "unused")
    client = OpenAI(base_url=live.base_url, max_retries=0, timeout=20, **kwargs)
    live.clients.append(client)
    return client


def async_openai_client(live: Live, **kwargs: Any) -> AsyncOpenAI:
    """An async client with retries off: use it as ``async with`` inside the test's event loop."""
    kwargs.setdefault("api_key", "unused")
    return AsyncOpenAI(base_url=live.base_url, max_retries=0, timeout=20, **kwargs)


def post(live: Live, body: Any, **kwargs: Any) -> httpx.Response:
    """A raw POST /v1/responses (``body`` dict → JSON; bytes sent as they are)."""
    if isinstance(body, bytes):
        kwargs["content"] = body
    else:
        kwargs["json"] = body
    return httpx.post(f"{live.base_url}/responses", timeout=20, **kwargs)


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    """Parse an SSE body strictly: every block is exactly ``event: T`` + one ``data:`` line."""
    text = raw.decode()
    assert "\r" not in text, "CR in the SSE stream"
    assert text.endswith("\n\n"), "the stream does not end with a complete event"
    events = []
    for block in text[:-2].split("\n\n"):
        lines = block.split("\n")
        assert len(lines) == 2, f"an event must be two lines, got {lines!r}"
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), lines
        data = json.loads(lines[1][len("data: ") :])
        assert lines[0][len("event: ") :] == data["type"]
        events.append(data)
    return events
