"""``QuotaLimits``: a limited API key's requests admitted, counted and answered with OpenAI's rate-limit headers.

Every HTTP request under ``/v1/`` whose bearer key has limits (the config file's ``[[keys]]``,
``harmony_responses.quotas``) takes one request from its key's bucket before anything else runs, and
its answer, whatever it is, carries ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for the
key's limits. Over a limit: 429 in the API's shape (``type`` ``requests`` or ``tokens``, ``code``
``rate_limit_exceeded``) with ``retry-after`` and ``retry-after-ms``, the wait the openai SDKs honour
before they retry. The request runs with its ``quotas.Grant`` as ``quotas.CURRENT`` (its concurrency slot
is taken in ``responses.py``, once the body says whether it runs in the background) and as
``metrics.TOKEN_SINK`` (its response's tokens are taken as they are produced).

It runs outside ``FirstTokensFirst``: the counters are a database round trip, which must not be spent
inside the start lane. A key that is not a limited one (an ``--api-key`` key, a wrong one) passes through
untouched, to ``BearerAuth``'s 401 if it is wrong. WebSocket handshakes pass too: each ``response.create``
on the socket is admitted as its own request (``websocket.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import APIError
from ..metrics import TOKEN_SINK
from ..quotas import CURRENT, Quotas, resolve_tier
from .errors import error_response

__all__ = ["QuotaLimits", "admit_response", "hold_for"]


class QuotaLimits:
    def __init__(self, app: ASGIApp, *, quotas: Quotas) -> None:
        self.app = app
        self.quotas = quotas

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        limits = self.quotas.limits_for(Headers(scope=scope).get("authorization", ""))
        if limits is None:
            await self.app(scope, receive, send)
            return
        try:
            # A create takes its concurrency slot in the admission's transaction (one round trip, not two).
            response = scope["path"] == "/v1/responses" and scope.get("method") == "POST"
            grant = await self.quotas.admit(limits, response=response)
        except APIError as exc:
            await error_response(exc)(scope, receive, send)
            return
        extra = [(name.encode(), value.encode()) for name, value in grant.headers()]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                added = [(n, v) for n, v in extra if n not in present]  # a 429 from inside carries them already
                message = {**message, "headers": [*message.get("headers", ()), *added]}
            await send(message)

        current = CURRENT.set(grant)
        sink = TOKEN_SINK.set(grant if limits.tokens_per_minute is not None else None)
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            TOKEN_SINK.reset(sink)
            CURRENT.reset(current)
            await grant.close()


async def admit_response(body: dict[str, Any]) -> None:
    """A validated create body's tier and slot, before its response starts: ``service_tier`` becomes the tier
    used (echoed; 403 for one the key may not use), and a limited key's response takes a concurrency slot
    (429 over ``max_concurrent`` or, in the background, ``max_concurrent_background``)."""
    body["service_tier"] = resolve_tier(body.get("service_tier"))
    grant = CURRENT.get()
    if grant is not None:
        await grant.acquire(background=bool(body.get("background")))


def hold_for(task: asyncio.Future[Any] | None) -> None:
    """The request's response runs on in ``task`` (background): its slot and tokens go with it."""
    grant = CURRENT.get()
    if grant is not None and task is not None:
        grant.hold_until(task)
