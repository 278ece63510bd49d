"""``POST /v1/responses``: read the body → the request (validated, resolved) → the run → SSE or JSON.

The body is read here (413 above the size limit, 415 compressed, 400 not JSON); everything else that can be
refused is refused by ``request.read_request`` (validation, the model name, stored items) and
``Server.create_response`` (tools, rendering, the context window), before anything is sent. The response
then streams through ``streaming.RunResponse`` (or, in the background, ``FollowStream``).

Streaming is decided by the body's ``stream`` alone, never by ``Accept`` (openai-python and the Agents
SDK send ``Accept: application/json`` when streaming; Codex sends ``text/event-stream``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp

from .. import tracing
from ..errors import APIError
from ..request import ResponseRequest, read_request
from ..run import Background, Server
from ..run.turns import enter_lane, tier_rank
from ..tokentrace import HEADER as TRACE_HEADER
from ..tokentrace import REQUESTED as TRACE_REQUESTED
from ..tokentrace import requested as trace_requested
from .auth import owner_of
from .connection import body_received
from .errors import json_response
from .quotas import admit_response, hold_for
from .streaming import FollowStream, RunResponse

__all__ = ["compact_response", "count_input_tokens", "create_response", "read_json_body"]


def _too_large(limit: int) -> APIError:
    return APIError(f"Request body too large: the limit is {limit} bytes.", status=413, code="request_too_large")


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").partition(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def read_json_body(request: Request, limit: int) -> Any:
    """The request's JSON body, read without ever holding more than ``limit`` bytes.

    Only ``application/json`` bodies are read: a web page can send a form or ``text/plain`` to a local
    server without the browser asking first (no CORS preflight), but not JSON.

    Raises:
        APIError: 413 over the limit, 415 for a compressed body or one that is not JSON, 400 for a body
            that does not parse.
    """
    content_type = request.headers.get("content-type")
    if not _is_json(content_type):
        shown = content_type or "none"
        raise APIError(
            f"Unsupported content type: '{shown}'. This API method only accepts 'application/json' requests, but "
            f"you specified the header 'Content-Type: {shown}'. Please try again with a supported content type.",
            status=415,
            code="unsupported_content_type",
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise APIError(
            f"Unsupported Content-Encoding '{encoding}': send the request body uncompressed.",
            status=415,
            code="unsupported_content_encoding",
        )
    if body_received(request.receive):
        # The whole body came with the head (a burst's requests do): one receive that does not wait, so no
        # timer to arm and no stream to iterate, on the path every request of a burst takes before its start.
        message = await request.receive()
        if message["type"] != "http.request":
            raise APIError("The client disconnected before sending the whole request body.")
        data = message.get("body", b"")
        if len(data) > limit:
            raise _too_large(limit)
        return _parsed(data)
    chunks: list[bytes] = []
    size = 0
    try:
        # A trickled body would otherwise hold its connection and its task for good.
        async with asyncio.timeout(request.app.state.body_timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
    except ClientDisconnect:
        raise APIError("The client disconnected before sending the whole request body.") from None
    except TimeoutError:
        raise APIError(
            f"The request body was not received within {request.app.state.body_timeout:g} seconds.",
            status=408,
            code="timeout",
        ) from None
    return _parsed(b"".join(chunks))


def _parsed(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise APIError(
            f"We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
            f"HTTP library correctly. The API expects a JSON payload, but what was sent was not valid JSON: "
            f"{exc})",
        ) from None


async def _read(request: Request, body: Any) -> ResponseRequest:
    server: Server = request.app.state.server
    return await read_request(
        body,
        owner=owner_of(request),
        models=server.models,
        history=server.stored,
        sealer=server.sealer,
        web_search=server.web_search is not None,
    )


async def count_input_tokens(request: Request) -> ASGIApp:
    """``POST /v1/responses/input_tokens``: ``{"object": "response.input_tokens", "input_tokens": N}``.

    The body is a create body (``model`` optional: the server's default model); it is read and rendered as
    create reads and renders it, so the count is the prompt create would send, and what create refuses
    with a 4xx is refused the same way here.
    """
    server: Server = request.app.state.server
    body = await read_json_body(request, request.app.state.max_body_bytes)
    if isinstance(body, dict) and body.get("model") is None:
        body = {**body, "model": server.models[0]}
    prepared = await _read(request, body)
    tokens = await server.count_input_tokens(prepared)
    return json_response({"object": "response.input_tokens", "input_tokens": tokens})


async def compact_response(request: Request) -> ASGIApp:
    """``POST /v1/responses/compact``: a ``CompactedResponse`` (the summary is the model's, run/compact.py).

    The body is a create body without the answer's parameters (the openai SDK's ``responses.compact``); it is
    read as create reads it, never stored, and answered as JSON whatever its ``stream``.
    """
    server: Server = request.app.state.server
    body = await read_json_body(request, request.app.state.max_body_bytes)
    if isinstance(body, dict):
        body = {**body, "store": False, "stream": False, "background": False}
    prepared = await _read(request, body)
    return json_response(await server.compact(prepared))


async def create_response(request: Request) -> ASGIApp:
    server: Server = request.app.state.server
    body = await read_json_body(request, request.app.state.max_body_bytes)
    with tracing.span("start lane"):  # the start work, in arrival order by tier, one lot at a time (run/turns.py)
        await enter_lane(tier_rank(body))
    with tracing.span("validate"):
        prepared = await _read(request, body)
    await admit_response(prepared.body)  # the tier used, and a limited key's slot (quotas.py)
    if TRACE_HEADER in request.headers:  # honoured only with --trace-header (tokentrace.TraceOptions)
        TRACE_REQUESTED.set(trace_requested(request.headers[TRACE_HEADER]))
    outcome = await server.create_response(prepared)
    stream = prepared.options.stream
    if isinstance(outcome, Background):
        hold_for(outcome.live.task)
        return FollowStream(outcome.events()) if stream else json_response(outcome.response)
    return RunResponse(outcome, stream=stream)
