"""While the server shuts down, new requests get 503 ``shutting_down``, as pure ASGI middleware.

On SIGTERM or Ctrl-C the server goes on listening through ``--shutdown-grace`` while its running responses
finish (``serve/cli.py``). A request that arrives meanwhile, on a new connection or a kept-alive one, gets
the API's 503 ``shutting_down`` with ``Connection: close`` rather than a refused connection or a cut one, so
that the client is told why (the openai SDK retries a 503; behind a load balancer the retry finds another
server). WebSocket handshakes get the same 503; a socket already open refuses new creates itself
(``websocket.py``). The probes still answer: ``/health`` 200 (the process is alive) and ``/ready`` 503 with
its reason (``Server.readiness``), and so does ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import shutting_down
from ..run import Server
from .errors import json_response

__all__ = ["RefuseWhileClosing"]

OPEN_PATHS = frozenset({"/health", "/ready", "/metrics"})


class RefuseWhileClosing:
    def __init__(self, app: ASGIApp, *, server: Server, open_paths: Iterable[str] = OPEN_PATHS) -> None:
        self.app = app
        self.server = server
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.server.closing and scope["type"] in ("http", "websocket") and scope["path"] not in self.open_paths:
            error = shutting_down()
            # Not kept alive: the listening socket closes at the end of the grace, and the connection with it.
            await json_response(error.body(), error.status, {"connection": "close"})(scope, receive, send)
            return
        await self.app(scope, receive, send)
