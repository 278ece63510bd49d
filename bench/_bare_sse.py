"""A bare Starlette SSE endpoint that sends pre-built events: the floor the server benchmark compares with.

Run by ``server_bench.py`` as ``python _bare_sse.py PORT EVENTS_FILE``; EVENTS_FILE holds the SSE frames
(``event:``/``data:``/blank line) our server sends for the same completion, so both send the same bytes.
"""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route


def main() -> None:
    port = int(sys.argv[1])
    with open(sys.argv[2], "rb") as f:
        frames = [frame + b"\n\n" for frame in f.read().split(b"\n\n") if frame]

    async def stream(request: Request) -> StreamingResponse:
        await request.body()

        async def frames_one_by_one():  # one ASGI message per event, as the server flushes per event
            for frame in frames:
                yield frame

        return StreamingResponse(frames_one_by_one(), media_type="text/event-stream")

    async def health(request: Request) -> StreamingResponse:
        return StreamingResponse(iter([b"ok"]))

    app = Starlette(routes=[Route("/v1/responses", stream, methods=["POST"]), Route("/health", health)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
