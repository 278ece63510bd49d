"""Real clients against the real server: ``harmony-responses serve`` in a subprocess on 127.0.0.1.

Fixtures:

- ``serve(engine)``: starts ``harmony-responses serve --engine ENGINE`` on a free loopback port, waits for
  ``GET /health`` and returns the base URL (``http://127.0.0.1:PORT``); every server started in a test is
  stopped when the test ends. ``replay_script(lines)`` writes a replay script (see
  ``harmony_responses.engine._replay``) and returns its ``replay:PATH`` engine spec.
- ``recording_proxy(upstream)``: a tiny reverse proxy on another loopback port that forwards every
  request to the server, streaming the response back as it arrives, and records the request bodies, so a
  test can see what a client sent (e.g. the ``function_call_output`` Codex sends after running a tool).
- ``codex``: the path of the Codex CLI installed from npm by ``scripts/install`` (``package.json``).
  A missing Codex fails the test; set ``HARMONY_RESPONSES_ALLOW_MISSING_CLIENTS=1`` to skip instead.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
CODEX = REPO / "node_modules" / ".bin" / "codex"
MODEL = "gpt-oss-20b"
ALLOW_MISSING_ENV = "HARMONY_RESPONSES_ALLOW_MISSING_CLIENTS"

_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_executable() -> Path:
    # The console script installed with the project, next to the interpreter running the tests.
    exe = Path(sys.executable).parent / "harmony-responses"
    assert exe.exists(), f"{exe} not found: install the project (scripts/install) into this interpreter's env"
    return exe


@dataclass
class Server:
    """One running ``harmony-responses serve`` process."""

    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(_STOP_TIMEOUT)


def start_server(engine: str, workdir: Path, *extra_args: str) -> Server:
    port = _free_port()
    log_path = workdir / f"server-{port}.log"
    cmd = [
        str(_server_executable()),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--engine",
        engine,
        "--model",
        MODEL,
        *extra_args,
    ]
    # The developer's own server settings (HARMONY_RESPONSES_API_KEY, …) stay out of the tests.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_RESPONSES_")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env
        )
    server = Server(base_url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    deadline = time.monotonic() + _START_TIMEOUT
    with httpx.Client(timeout=2.0) as client:
        while True:
            if process.poll() is not None:
                raise AssertionError(f"server exited with {process.returncode} on start:\n$ {cmd}\n{server.log()}")
            try:
                if client.get(f"{server.base_url}/health").status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                server.stop()
                raise AssertionError(f"server not healthy after {_START_TIMEOUT:.0f} s:\n$ {cmd}\n{server.log()}")
            time.sleep(0.05)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``serve(engine, *extra_args)`` → the base URL of a fresh server; all are stopped after the test."""
    servers: list[Server] = []

    def _serve(engine: str, *extra_args: str) -> str:
        server = start_server(engine, tmp_path, *extra_args)
        servers.append(server)
        return server.base_url

    yield _serve
    for server in servers:
        server.stop()
    for server in servers:
        # Whatever a client sent, the server answered without crashing.
        assert "Traceback" not in server.log(), server.log()


@pytest.fixture
def replay_script(tmp_path: Path) -> Callable[[Iterable[dict[str, Any]]], str]:
    """``replay_script(lines)`` → ``replay:PATH`` for a script with one JSON object per engine call."""
    counter = iter(range(1_000_000))

    def _write(lines: Iterable[dict[str, Any]]) -> str:
        path = tmp_path / f"script-{next(counter)}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return f"replay:{path}"

    return _write


# --- a recording reverse proxy ------------------------------------------------------------------------

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host"}
)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class RecordingProxy:
    """Forwards ``http://127.0.0.1:PORT/...`` to the upstream server and keeps every request."""

    upstream: str
    requests: list[Recorded] = field(default_factory=list)
    base_url: str = ""

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self
        host, port = self.upstream.removeprefix("http://").split(":")

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                proxy.requests.append(Recorded(self.command, self.path, headers, body))
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    upstream = conn.getresponse()
                    self.send_response(upstream.status, upstream.reason)
                    for key, value in upstream.getheaders():
                        if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                            self.send_header(key, value)
                    # Re-frame as chunked and pass each piece on as soon as it arrives (SSE).
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    while chunk := upstream.read1(65536):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                finally:
                    conn.close()
                    self.close_connection = True

            do_GET = do_POST = do_DELETE = _forward

        return Handler

    def __enter__(self) -> RecordingProxy:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="recording-proxy", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(_STOP_TIMEOUT)

    def bodies(self, path_suffix: str = "/responses") -> list[Any]:
        """The JSON bodies of the recorded POSTs whose path ends with ``path_suffix``, in order."""
        return [r.json() for r in self.requests if r.method == "POST" and r.path.endswith(path_suffix)]


@pytest.fixture
def recording_proxy() -> Iterator[Callable[[str], RecordingProxy]]:
    """``recording_proxy(upstream_base_url)`` → a started ``RecordingProxy``; stopped after the test."""
    proxies: list[RecordingProxy] = []

    def _start(upstream: str) -> RecordingProxy:
        proxy = RecordingProxy(upstream).__enter__()
        proxies.append(proxy)
        return proxy

    yield _start
    for proxy in proxies:
        proxy.__exit__(None, None, None)


# --- the Codex CLI ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def codex() -> Path:
    """The Codex CLI from npm; a missing one fails (CI installs it) unless the env var allows a skip."""
    if not CODEX.exists():
        reason = f"{CODEX.relative_to(REPO)} is missing: run scripts/install (npm ci installs @openai/codex)"
        if os.environ.get(ALLOW_MISSING_ENV) == "1":
            pytest.skip(f"{reason} [{ALLOW_MISSING_ENV}=1]")
        pytest.fail(f"{reason}; set {ALLOW_MISSING_ENV}=1 to skip the Codex tests instead")
    return CODEX
