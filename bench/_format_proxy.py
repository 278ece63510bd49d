"""The bare proxy sending our bytes: the floor of any server that speaks the Responses stream on this stack.

Run by ``burst_cost_bench.py`` as ``python _format_proxy.py PORT ENGINE_URL BODY_FILE FRAMES_FILE``. As
``_bare_proxy.py`` it sends a completion request on to the engine (BODY_FILE: the one our server sends it) and
streams back as the engine's bytes arrive, but what it writes are our server's SSE frames for the same tokens
(FRAMES_FILE: one response as our server streamed it): the frames before the first text delta at once, then per
engine read one delta per text token it held, and the closing frames with the last token. No validation,
rendering or translation: only counting the tokens of each read (the client's marker, ``_latency_client.py``)
and joining frames made beforehand. Its client reads what ours reads, so ``proxy → this`` is what the Responses
stream costs the machine (the client, the kernel, the engine beside them) and ``this → ours`` what our server's
own work costs.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from _bare_proxy import engine_post, serve

HEADER_TOKENS = 3  # <|channel|> final <|message|>: no frame of their own
MARKER = b'"token_ids":['
DELTA = b"event: response.output_text.delta\n"


def per_token_frames(body: bytes) -> tuple[bytes, list[bytes]]:
    """Our stream ``body`` as what goes out at once and what goes out with each engine token, header tokens and
    ``<|return|>`` included (the closing frames)."""
    frames = [frame + b"\n\n" for frame in body.split(b"\n\n") if frame.strip()]
    deltas = [k for k, frame in enumerate(frames) if frame.startswith(DELTA)]
    if not deltas:
        raise SystemExit("FRAMES_FILE holds no text delta")
    first, last = deltas[0], deltas[-1]
    head = b"".join(frames[:first])
    tail = b"".join(frames[last + 1 :])
    return head, [b""] * HEADER_TOKENS + frames[first : last + 1] + [tail]


def main() -> None:
    port, engine = int(sys.argv[1]), sys.argv[2].rstrip("/")
    with open(sys.argv[3], "rb") as f:
        engine_body = f.read()
    with open(sys.argv[4], "rb") as f:
        head, by_token = per_token_frames(f.read())
    post = engine_post(engine)

    async def responses(request: Request) -> StreamingResponse:
        await request.body()
        response = await post(engine_body)

        async def relay() -> AsyncIterator[bytes]:
            yield head
            seen, tail = 0, b""
            try:
                async for data in response.content.iter_any():
                    # A marker split between two reads is counted in the second; the tail kept is one byte too
                    # short to hold a whole one counted already.
                    window = tail + data
                    count = window.count(MARKER)
                    tail = window[-(len(MARKER) - 1) :]
                    if count:
                        yield b"".join(by_token[seen : seen + count])
                        seen += count
            finally:
                response.release()

        return StreamingResponse(relay(), media_type="text/event-stream")

    serve(port, "/v1/responses", responses)


if __name__ == "__main__":
    main()
