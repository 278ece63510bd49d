"""Bearer-token authentication, as pure ASGI middleware.

With API keys configured, every request and WebSocket handshake except ``GET /health`` and ``GET /ready``
(probes carry no key) needs ``Authorization: Bearer <key>`` with one of them; otherwise 401
``invalid_api_key`` in the API's wording.
Keys are compared in constant time. Without keys configured the middleware is not installed at all.

What a request stores belongs to its key: ``owner_of`` names the owner by a hash of the key (never the
key itself), or ``""`` when the server has no keys.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import APIError, error_response

__all__ = ["BearerAuth", "owner_of"]

OPEN_PATHS = frozenset({"/health", "/ready"})


def _masked(key: str) -> str:
    # The API shows the first and last few characters of a wrong key, never the whole of it.
    return f"{key[:3]}{'*' * 4}{key[-4:]}" if len(key) > 10 else "*" * len(key)


class BearerAuth:
    def __init__(self, app: ASGIApp, *, keys: Iterable[str], open_paths: Iterable[str] = OPEN_PATHS) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in keys)
        assert self.keys, "BearerAuth needs at least one key"
        self.open_paths = frozenset(open_paths)

    def _accepts(self, token: str) -> bool:
        candidate = token.encode()
        # No early exit: every key is compared, so timing does not tell which one came close.
        return any([hmac.compare_digest(candidate, key) for key in self.keys])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # WebSocket handshakes too: Codex and openai's responses.connect() send the key on the upgrade request.
        if scope["type"] not in ("http", "websocket") or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and token and self._accepts(token):
            await self.app(scope, receive, send)
            return
        if not token:
            message = (
                "You didn't provide an API key. You need to provide your API key in an Authorization header "
                "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            )
        else:
            message = f"Incorrect API key provided: {_masked(token)}."
        error = APIError(message, status=401, code="invalid_api_key")
        await error_response(error)(scope, receive, send)


def owner_of(request: HTTPConnection) -> str:
    """Who may see what this request stores: a hash of its API key, ``""`` on a server without keys."""
    if not request.app.state.keyed:
        return ""
    token = request.headers.get("authorization", "").partition(" ")[2].strip()
    return hashlib.sha256(token.encode()).hexdigest()
