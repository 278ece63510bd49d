"""``POST /v1/responses``: parse → validate → render → engine stream → translator → SSE or JSON.

Everything that can be refused is refused here, before anything is sent: body size and JSON (413/400),
validation (``validate.py``), the model name (404 ``model_not_found``), rendering (``RenderError`` → 400)
and the context window (``fit.py``). The response then runs in ``streaming.RunResponse``.

Streaming is decided by the body's ``stream`` alone, never by ``Accept`` (openai-python and the Agents
SDK send ``Accept: application/json`` when streaming; Codex sends ``text/event-stream``).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp

from ..engine import Engine, GenerateRequest
from ..ids import random_id
from ..render import RenderError, render_request
from ..tool_types import is_web_search
from ..tools import ToolSessions
from ..tools.browser import BrowserSession, WebSearch
from ..tools.code_interpreter import ContainerNotFound, code_interpreter_session
from ..tools.mcp import McpPlan, McpRequestError, prepare_mcp
from ..translate import RecipientMap, Translator, response_skeleton
from ..vocab import Vocabulary
from .config import Config
from .echo import echo_fields
from .errors import APIError
from .fit import render_to_fit
from .run import ResponseRun
from .sealed import ReasoningSealer
from .state import State
from .validate import RequestOptions, validate_request

__all__ = ["Services", "create_response", "model_not_found", "read_json_body"]

logger = logging.getLogger("harmony_responses.api")

# Requests up to this size (JSON bytes, conversation included) are rendered on the event loop: a few
# hundred microseconds at most, less than handing them to a worker thread costs, and most of their
# messages come from the render cache anyway (render/_cache.py).
INLINE_RENDER_BYTES = 8_192


@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    """What the endpoints share, built once per app (``app.state.services``)."""

    config: Config
    engine: Engine
    vocab: Vocabulary
    sealer: ReasoningSealer
    started_at: int


def model_not_found(model: str) -> APIError:
    # The API's wording, backticks included.
    return APIError(
        f"The model `{model}` does not exist or you do not have access to it.", status=404, code="model_not_found"
    )


def _too_large(limit: int) -> APIError:
    return APIError(f"Request body too large: the limit is {limit} bytes.", status=413, code="request_too_large")


async def read_json_body(request: Request, limit: int) -> Any:
    """The request's JSON body, read without ever holding more than ``limit`` bytes.

    Raises:
        APIError: 413 over the limit, 415 for a compressed body, 400 for a body that is not JSON.
    """
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
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise APIError("The client disconnected before sending the whole request body.") from None
    try:
        return orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as exc:
        raise APIError(
            f"We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
            f"HTTP library correctly. The API expects a JSON payload, but what was sent was not valid JSON: "
            f"{exc})",
        ) from None


def _for_render(body: Mapping[str, Any], sealer: ReasoningSealer, *, web_search: bool = False) -> dict[str, Any]:
    """The request as the renderer should see it.

    - ``web_search`` tools are dropped when the server has no search backend: accepted (Codex sends them
      with every request) but not offered to the model (validate.py).
    - reasoning items whose ``encrypted_content`` this server sealed get their text back as
      ``reasoning_text`` content (the renderer reads content, not blobs).
    """
    request = dict(body)
    tools = body.get("tools")
    if tools and not web_search:
        request["tools"] = [t for t in tools if not is_web_search(t.get("type"))]
    items = body.get("input")
    if isinstance(items, list):
        restored: list[Any] = []
        for item in items:
            if item.get("type") == "reasoning" and item.get("encrypted_content") and not item.get("content"):
                text = sealer.open(item["encrypted_content"])
                if text is not None:
                    item = {**item, "content": [{"type": "reasoning_text", "text": text}]}
            restored.append(item)
        request["input"] = restored
    return request


def _browser_session(request: Request, body: Mapping[str, Any]) -> BrowserSession | None:
    """The response's browser (web search) when the request declares ``web_search`` and the server has a backend.

    Without a backend ``web_search`` stays hidden from the model, and forcing it is refused with a 400 rather
    than rendered as a call to a tool the model was never given.
    """
    web_search: WebSearch | None = getattr(request.app.state, "web_search", None)
    declared = [t for t in body.get("tools") or () if is_web_search(t.get("type"))]
    if web_search is None:
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and is_web_search(choice.get("type")):
            raise APIError(
                f"Invalid value for 'tool_choice.type': '{choice['type']}' cannot be forced: this server has no "
                "search backend configured (harmony-responses serve --search-dir or --search-backend).",
                param="tool_choice.type",
                code="unsupported_value",
            )
        return None
    if not declared:
        return None
    include = body.get("include") or ()
    return web_search.session(declared[0], include_sources="web_search_call.action.sources" in include)


async def _prepare_mcp(model_request: dict[str, Any], config: Config) -> McpPlan:
    """The request's MCP servers listed (or their listing reused from the conversation), for render and the loop.

    ``model_request``'s mcp tools get their tools (``_mcp_tools``), which render declares. A server the client
    may not reach (``--mcp-allowed-hosts``, an unknown ``stdio:NAME``) is a 400; one that is down is not.
    """
    items = model_request.get("input")
    try:
        plan = await prepare_mcp(model_request.get("tools"), items if isinstance(items, list) else (), config.mcp)
    except McpRequestError as exc:
        raise APIError(exc.message, param=exc.param, code=exc.code) from None
    if plan.tools is not None:
        model_request["tools"] = plan.tools
    return plan


def _json_size(obj: Any) -> float:
    """The size of ``obj`` as JSON; infinite when it is not plain JSON (e.g. an MCP listing's objects)."""
    try:
        return len(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))
    except TypeError:
        return float("inf")


def _render(request: dict[str, Any], *, config: Config, python_description: str | None = None) -> Any:
    current_date = config.current_date or datetime.datetime.now(datetime.UTC).date().isoformat()
    try:
        return render_request(
            request,
            current_date=current_date,
            knowledge_cutoff=config.knowledge_cutoff,
            python_description=python_description,
        )
    except RenderError:
        raise
    except Exception as exc:
        # The renderer should answer every bad request with RenderError; anything else is its bug, but
        # still caused by this request's content, so the client gets a 400 (never a 500) and we get the
        # traceback in the log.
        logger.exception("render_request failed with an unexpected exception; answering 400")
        raise APIError(
            f"The request could not be rendered into the model's prompt format ({type(exc).__name__}: {exc}).",
            code="invalid_value",
        ) from exc


async def create_response(request: Request) -> ASGIApp:
    services: Services = request.app.state.services
    config = services.config
    body = await read_json_body(request, config.max_body_bytes)
    options: RequestOptions = validate_request(body)
    if options.model not in config.models:
        raise model_not_found(options.model)

    browser = _browser_session(request, body)
    tool_sessions = ToolSessions()
    containers = request.app.state.containers
    try:
        code = code_interpreter_session(
            body.get("tools"), containers, include_outputs="code_interpreter_call.outputs" in options.include
        )
    except ContainerNotFound as exc:
        raise APIError(str(exc), param=exc.param, code="invalid_value") from None
    if code is not None:
        tool_sessions.add(code)

    # Stored state: previous_response_id / conversation items, item references, ids for the input items.
    state: State = request.app.state.stateful
    prepared = await state.prepare(request, body)
    if browser is not None:
        tool_sessions.add(browser)
    model_request = _for_render(prepared.render_body, services.sealer, web_search=browser is not None)
    mcp = await _prepare_mcp(model_request, config)  # lists the MCP servers' tools: the prompt declares them
    for session in mcp.sessions:
        tool_sessions.add(session)
    render = functools.partial(
        render_to_fit,
        model_request,
        functools.partial(_render, config=config, python_description=containers.description()),
        context_window=config.context_window,
        truncation=options.truncation,
    )
    if _json_size(model_request) <= INLINE_RENDER_BYTES:
        rendered = render()
    else:
        # Rendering new text takes about a millisecond per thousand tokens: keep long requests off the event
        # loop. (A worker thread does not render in parallel, harmony holds the GIL, but the loop gets it
        # back every switch interval instead of waiting for the whole render.)
        rendered = await anyio.to_thread.run_sync(render)
    try:
        mcp_prelude = mcp.prelude(rendered.pending_mcp_call)
    except McpRequestError as exc:
        raise APIError(exc.message, param=exc.param, code=exc.code) from None
    room = config.context_window - len(rendered.token_ids)
    max_tokens = room if options.max_output_tokens is None else min(options.max_output_tokens, room)

    response_id = random_id("resp")
    created_at = int(time.time())
    translator = Translator(
        vocab=services.vocab,
        new_id=random_id,
        clock=lambda: int(time.time()),
        response=response_skeleton(
            id=response_id, created_at=created_at, model=options.model, **{**echo_fields(body), **prepared.echo}
        ),
        recipients=dataclasses.replace(
            RecipientMap.from_tools(model_request.get("tools")),
            # The item's container_id is the real container's, also for {"type": "auto"}.
            container_id=code.container.id if code is not None else None,
        ),
        logprobs=options.top_logprobs is not None,
        citations=browser.cite if browser is not None else None,
        queued=prepared.background,
    )
    translator.receive_prefill(rendered.prefill_ids)
    run = ResponseRun(
        translator=translator,
        engine=services.engine,
        request=GenerateRequest(
            prompt_ids=list(rendered.token_ids),
            max_tokens=max_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
            top_logprobs=options.top_logprobs,
            response_schema=options.response_schema,
            request_id=response_id,
        ),
        sealer=services.sealer if options.encrypted_reasoning else None,
        strict_schema=options.strict_schema,
        tools=tool_sessions,
        max_output_tokens=options.max_output_tokens,
        max_tool_calls=options.max_tool_calls,
        context_window=config.context_window,
        prelude=mcp_prelude,
    )
    # Not stored: RunResponse as is; stored: its events logged as they are sent; background: detached.
    return await state.respond(prepared, run, response_id=response_id, created_at=created_at, stream=options.stream)
