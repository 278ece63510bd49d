"""A minimal vLLM ``/v1/completions`` fake for the engine benchmark, streaming as fast as it can.

Run by ``engine_bench.py`` as ``python _vllm_fake.py PORT TOKENS_FILE PACE_MS [PREFILL_MS]``: every
completion streams the ids in TOKENS_FILE (a JSON list), one id per SSE chunk in vLLM's shape (engines.md
§2.1), every PACE_MS milliseconds after the first (0: back to back, each chunk its own write). With
PREFILL_MS the first chunk comes that long after the status line and headers, as a real engine's prefill
of a long prompt (the headers go out at once). It answers the start-up check's ``/health``,
``/v1/models`` and ``/detokenize`` too.
"""

from __future__ import annotations

import asyncio
import json
import sys

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "openai/gpt-oss-20b"


def main() -> None:
    port, tokens_file, pace_ms = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    prefill = float(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0.0
    with open(tokens_file) as f:
        tokens: list[int] = json.load(f)

    async def completions(request: Request) -> Response:
        body = orjson.loads(await request.body())
        prompt = body["prompt"]

        async def chunks():  # type: ignore[no-untyped-def]
            loop = asyncio.get_running_loop()
            if prefill:
                await asyncio.sleep(prefill)
            start = loop.time()
            last = len(tokens) - 1
            for k, token in enumerate(tokens):
                if pace_ms:
                    delay = start + k * pace_ms / 1000 - loop.time()
                    await asyncio.sleep(max(0.0, delay))
                else:
                    await asyncio.sleep(0)  # one decode step per chunk: other streams get their turn
                choice = {
                    "index": 0,
                    "text": "",
                    "logprobs": None,
                    "finish_reason": "stop" if k == last else None,
                    "stop_reason": token if k == last else None,
                    "token_ids": [token],
                }
                if k == 0:
                    choice["prompt_token_ids"] = prompt
                obj = {"id": "cmpl-b", "object": "text_completion", "created": 0, "model": MODEL, "choices": [choice]}
                yield b"data: " + orjson.dumps(obj) + b"\n\n"
            usage = {"prompt_tokens": len(prompt), "completion_tokens": len(tokens), "total_tokens": 0}
            yield b"data: " + orjson.dumps({"id": "cmpl-b", "choices": [], "usage": usage}) + b"\n\ndata: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def detokenize(request: Request) -> Response:
        return JSONResponse({"prompt": "<|start|><|message|><|return|>"})

    routes = [
        Route("/health", lambda r: Response(b"")),
        Route("/v1/models", lambda r: JSONResponse({"data": [{"id": MODEL, "max_model_len": 131072}]})),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
    ]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
