"""``FirstTokensFirst``: the endpoint's requests count as starting until their first delta is written.

The bookkeeping of who is starting and who is held is the run layer's (run/turns.py); this ASGI wrapper
only tells it when a request arrives and when the first delta event went out on the socket (the endpoint
asks for its place in the start lane once it has read the body: ``turns.enter_lane``).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..run.turns import starting

__all__ = ["DELTA_FRAME", "FirstTokensFirst"]

# What a streamed body's first delta event looks like: SSE ``event:`` lines are the only place a raw
# newline follows ``.delta`` (JSON escapes newlines inside ``data:``).
DELTA_FRAME = b".delta\n"


class FirstTokensFirst:
    """ASGI wrapper: the wrapped app's requests (``POST path`` only, given a ``path``) count as starting until
    their first delta is written."""

    def __init__(self, app: ASGIApp, *, path: str | None = None) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.path is not None and (
            scope["type"] != "http" or scope["path"] != self.path or scope.get("method") != "POST"
        ):
            await self.app(scope, receive, send)
            return
        with starting() as start:

            async def send_watching(message: Message) -> None:
                await send(message)
                if (
                    not start.delivered
                    and message["type"] == "http.response.body"
                    and DELTA_FRAME in message.get("body", b"")
                ):
                    start.finish()

            await self.app(scope, receive, send_watching)
