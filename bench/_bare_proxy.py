"""A bare pass-through proxy in front of the vLLM fake: the floor of any Python layer on our stack.

Run by ``engine_bench.py`` as ``python _bare_proxy.py PORT ENGINE_URL``. ``POST /v1/completions`` is sent
on to the engine as it came (aiohttp, one pooled session, as our adapters do) and the engine's bytes are
streamed back as they arrive (uvicorn with httptools, as our server runs): no validation, no rendering, no
token parsing, no translation. Reading through it costs what the HTTP hops alone cost on this machine, so
``ours − bare proxy`` is what harmony-responses itself adds and ``bare proxy − direct`` what no Python
layer on this stack can avoid.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


def engine_post(engine: str) -> Callable[[bytes], Awaitable[aiohttp.ClientResponse]]:
    """POST a body to the engine's ``/v1/completions``: one pooled session, made at the first request (in the
    server's loop), as our adapters do."""
    session: aiohttp.ClientSession | None = None

    async def post(body: bytes) -> aiohttp.ClientResponse:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
        return await session.post(engine + "/v1/completions", data=body, headers={"content-type": "application/json"})

    return post


def serve(port: int, path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> None:
    """Serve ``POST path`` and ``/health`` on 127.0.0.1:``port`` (uvicorn, with httptools as our server)."""

    async def health(request: Request) -> Response:
        return Response(b"ok")

    app = Starlette(routes=[Route(path, endpoint, methods=["POST"]), Route("/health", health)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    port, engine = int(sys.argv[1]), sys.argv[2].rstrip("/")
    post = engine_post(engine)

    async def completions(request: Request) -> StreamingResponse:
        response = await post(await request.body())

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for data in response.content.iter_any():
                    yield data
            finally:
                response.release()

        return StreamingResponse(relay(), media_type="text/event-stream")

    serve(port, "/v1/completions", completions)


if __name__ == "__main__":
    main()
