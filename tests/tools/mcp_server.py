"""An MCP server for the tests, built with the ``mcp`` SDK (``MCPServer``, v1's FastMCP), run as its own process.

``python mcp_server.py streamable-http PORT [KEY]`` serves ``/mcp`` on 127.0.0.1; with KEY every request
must carry ``X-Api-Key: KEY`` (else 401). ``python mcp_server.py sse PORT`` serves the older HTTP+SSE
transport at ``/sse``. ``python mcp_server.py stdio`` speaks MCP on stdin/stdout. ``McpServerProcess`` starts
an HTTP form on a free port and stops it.

Tools: ``add`` (read-only), ``weather`` (read-only), ``save_note`` (writes: approval tests), ``fail`` (the tool
raises: an ``isError`` result), ``slow`` (sleeps: timeouts), and ``bad.name`` (a name Harmony cannot address).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
TOOL_NAMES = ("add", "weather", "save_note", "fail", "slow")


def build_server():  # type: ignore[no-untyped-def]
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("test-tools", instructions="Arithmetic, weather and notes for the tests.")
    notes: dict[str, str] = {}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def weather(city: str) -> str:
        """Current weather in a city."""
        return f"Sunny in {city}, 21 °C."

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def save_note(name: str, text: str) -> str:
        """Save a note under a name."""
        notes[name] = text
        return f"Saved note '{name}' ({len(notes)} in total)."

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        raise ValueError(reason)

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answers after a while."""
        await anyio.sleep(seconds)
        return "done"

    @server.tool(name="bad.name")
    def bad_name() -> str:
        """A tool whose name has a dot."""
        return "unreachable"

    return server


def _http_app(transport: str, key: str | None):  # type: ignore[no-untyped-def]
    from starlette.responses import PlainTextResponse

    server = build_server()
    app = server.sse_app() if transport == "sse" else server.streamable_http_app()

    async def guarded(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and key is not None and dict(scope["headers"]).get(b"x-api-key") != key.encode():
            await PlainTextResponse("no key", status_code=401)(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class InternalService:
    """What an SSRF aims at: a plain HTTP service on 127.0.0.1 answering every request with a JSON secret.

    ``requests`` keeps each request's headers (lower-cased names), so a test can tell whether it was reached.
    """

    SECRET = "internal-token-7f3a"

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        requests = self.requests = []  # type: list[dict[str, str]]
        body = json.dumps({"secret": self.SECRET}).encode()

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                requests.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class BannerService:
    """A TCP service that is not HTTP (an SSH-like banner, then close) on 127.0.0.1."""

    def __init__(self) -> None:
        import threading

        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            with connection:
                connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    def stop(self) -> None:
        self._socket.close()


class McpServerProcess:
    """The streamable-HTTP server in a child process on a free port (``url``: its ``/mcp`` endpoint)."""

    def __init__(self, transport: str = "streamable-http", key: str | None = None) -> None:
        self.port = free_port()
        args = [sys.executable, str(HERE), transport, str(self.port)] + ([key] if key else [])
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        path = "/sse" if transport == "sse" else "/mcp"
        self.url = f"http://127.0.0.1:{self.port}{path}"
        deadline = time.monotonic() + 20
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the MCP test server exited: {self.process.stderr.read().decode()}")  # type: ignore[union-attr]
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the MCP test server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


if __name__ == "__main__":
    transport = sys.argv[1]
    if transport == "stdio":
        build_server().run("stdio")
    else:
        import uvicorn

        port, key = int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else None)
        uvicorn.run(_http_app(transport, key), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
