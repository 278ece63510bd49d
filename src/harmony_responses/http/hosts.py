"""Loopback servers answer only to loopback names: a web page cannot drive a local server (DNS rebinding).

A server listening on 127.0.0.1 without API keys trusts whoever can reach it, and a browser on the same
machine can: a page whose domain is re-pointed at 127.0.0.1 sends requests with its own domain in
``Host``. On a loopback bind only loopback names are accepted (``localhost`` and ``*.localhost``,
127.0.0.0/8, ``::1``) plus the operator's ``--allowed-host`` names; any other ``Host`` is a 400 before
anything runs. (Cross-origin form posts, which carry a loopback ``Host``, are refused for not being JSON:
``responses.read_json_body``.) On any other bind the names are unknowable here and nothing is checked.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import APIError
from .errors import error_response

__all__ = ["LoopbackHosts", "is_loopback"]


@functools.lru_cache(maxsize=256)  # once per name: every request asks, and ipaddress is slow to parse
def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address, without port) names this machine's loopback interface."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _name(host_header: str) -> str:
    if host_header.startswith("["):  # [::1]:8000
        return host_header[1:].partition("]")[0]
    return host_header.rpartition(":")[0] if host_header.count(":") == 1 else host_header


class LoopbackHosts:
    """ASGI middleware: 400 for a ``Host`` that is neither a loopback name nor one of ``allowed``."""

    def __init__(self, app: ASGIApp, *, allowed: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = frozenset(name.lower() for name in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and "*" not in self.allowed:
            header = Headers(scope=scope).get("host")
            if header is not None:
                name = _name(header.strip()).lower()
                if not is_loopback(name) and name not in self.allowed:
                    error = APIError(
                        f"Invalid Host header {header!r}: this server listens on a loopback address and answers "
                        "only to loopback names (start it with --allowed-host NAME to accept another).",
                        code="invalid_host",
                    )
                    await error_response(error)(scope, receive, send)
                    return
        await self.app(scope, receive, send)
