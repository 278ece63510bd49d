"""How much an MCP server may send: a response body, or one event of an event stream, of at most N bytes.

Any API user can name an MCP URL, so what it answers is read with a bound: a JSON body that never ends (an
array streamed for as long as the call's timeout allows) once took 1.5 GB in 10 s. The SDK bounds each event
of a streamable-HTTP event stream (1 MiB) but reads a JSON body whole; the legacy SSE transport bounds
nothing. Every HTTP response of an MCP client gets a byte stream that counts (``bound_response``, an httpx
response hook, so that it holds whichever transport or proxy the client uses): past the bound it raises
``BodyTooLarge``, an ``httpx2.StreamError``, which the SDK reports as the call's JSON-RPC error and which
ends the connection for the listing. An event stream is bounded per event (the bytes since the last blank
line), so a long-lived stream of small events goes on.

The bound is on the bytes as they arrive: compression would put an unbounded body behind a few bytes (a
zip bomb), so the clients ask for ``identity`` and a compressed body other than an event stream is refused
as it is read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

__all__ = ["DEFAULT_MCP_MAX_BODY_BYTES", "IDENTITY", "BodyTooLarge", "bound_response"]

DEFAULT_MCP_MAX_BODY_BYTES = 4 * 1024 * 1024
IDENTITY = {"accept-encoding": "identity"}
_EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")


class BodyTooLarge(httpx2.StreamError):
    """An MCP server sent more than the bound (or a compressed body, whose size cannot be bounded)."""


class _BoundedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, *, events: bool, refuse: str | None) -> None:
        self._inner = inner
        self._limit = limit
        self._events = events
        self._refuse = refuse

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._refuse is not None:
            raise BodyTooLarge(self._refuse)
        counted = 0  # the body's bytes, or the current event's
        tail = b""  # an event's end may be split between two chunks
        async for chunk in self._inner:
            if self._events:
                seen = tail + chunk
                end = max(seen.rfind(mark) + len(mark) if mark in seen else -1 for mark in _EVENT_ENDS)
                counted = len(seen) - end if end >= 0 else counted + len(chunk)
                tail = seen[-3:]
            else:
                counted += len(chunk)
            if counted > self._limit:
                what = "one event of its event stream" if self._events else "its response body"
                raise BodyTooLarge(
                    f"The MCP server sent more than {self._limit} bytes in {what} (--mcp-max-body-bytes)"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def bound_response(response: httpx2.Response, limit: int) -> None:
    """Make reading ``response`` raise ``BodyTooLarge`` past ``limit`` bytes (per event for an event stream)."""
    content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    events = content_type == "text/event-stream"
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    refuse = None
    if not events and encoding not in ("", "identity"):
        refuse = f"The MCP server sent a compressed body ({encoding}): not accepted, its size cannot be bounded"
    stream = response.stream
    assert isinstance(stream, httpx2.AsyncByteStream), "MCP clients are async"
    response.stream = _BoundedStream(stream, limit, events=events, refuse=refuse)
