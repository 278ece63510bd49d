"""``FirstTokensFirst``: the endpoint's requests count as starting until their first delta is written.

The bookkeeping of who is starting and who is held is the run layer's (run/turns.py); this ASGI wrapper
only tells it when a request arrives and when the first delta event went out on the socket.

A request asks for its place in the start lane (``turns.enter_lane``) once its body is in: here, before
the middleware and the endpoint run, when the body came with the head (a burst's requests do), else in
the endpoint once it has read it (a body that trickles in must not keep the lane). Asked here, the
request's whole handling up to its engine call is start work in the lane: a burst of 64 otherwise ran every
request's middleware, routing and body read as it arrived, all before the median request's first token.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..run.turns import starting, tier_rank
from .connection import body_received

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
            if body_received(receive):
                await start.enter_lane(tier_rank(getattr(getattr(receive, "__self__", None), "body", b"")))

            async def send_watching(message: Message) -> None:
                await send(message)
                if (
                    not start.delivered
                    and message["type"] == "http.response.body"
                    and DELTA_FRAME in message.get("body", b"")
                ):
                    start.finish()

            await self.app(scope, receive, send_watching)
