"""Starting a response: a ``ResponseRequest`` → its tool sessions, its prompt and its ``ResponseRun``.

In order: the built-in tools' sessions (the code interpreter's container, the browser when the server has
a search backend, the file search over the caller's vector stores, the MCP servers' tool listings, which the
prompt declares, a server-run tool search), the
prompt rendered to fit the context window (``fit.py``; large requests off the event loop), and the translator
that will turn the engine's tokens into this response's events, with the prompt's prefill already received.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import time
from typing import Any

import orjson

from .. import tracing
from ..engine import Engine, GenerateRequest, ToolGrammar
from ..errors import APIError
from ..grammar import schema_problem as grammar_schema_problem
from ..ids import random_id
from ..logs import request_arrived
from ..metrics import RunMetrics, engine_label
from ..offload import offload
from ..render import FILE_SEARCH_PARAMETERS, RenderError, render_request
from ..request import ReasoningSealer, ResponseRequest
from ..tokentrace import Recorder, TraceOptions
from ..tool_types import is_web_search
from ..tools import ToolSessions
from ..tools.browser import BrowserSession, WebSearch
from ..tools.code_interpreter import ContainerManager, ContainerNotFound, code_interpreter_session
from ..tools.mcp import McpListingError, McpOptions, McpPlan, McpRequestError, prepare_mcp
from ..translate import RecipientMap, Translator, response_skeleton
from ..vocab import Vocabulary
from .compact import Compaction
from .file_search import file_search_session
from .fit import render_to_fit
from .loop import ResponseRun
from .messages import ResponseMessages, wants_messages
from .tool_search import ToolSearchSession
from .turns import leave_lane
from .vector_stores import VectorStoreService

__all__ = ["Prompting", "build_compact", "build_run", "count_input_tokens", "render_prompt", "summary_run"]

logger = logging.getLogger("harmony_responses.run")

# GenerateRequest.priority of each tier a response runs in (lower first).
TIER_PRIORITY = {"priority": -1, "default": 0, "flex": 1}

# Requests up to this size (JSON bytes, conversation included) are rendered on the event loop: a few
# hundred microseconds at most, less than handing them to a worker thread costs, and most of their
# messages come from the render cache anyway (render/_cache.py).
INLINE_RENDER_BYTES = 8_192


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Prompting:
    """What every prompt is rendered with (``serve``'s options)."""

    context_window: int
    current_date: str | None  # None: today's UTC date, per request
    knowledge_cutoff: str
    # A request asking for reasoning.summary gets each reasoning item's own text as its summary (gpt-oss writes
    # no summaries); False: summary stays [] (--reasoning-summaries none).
    reasoning_summaries: bool = True
    # What a call of a function without strict: true is held to on engines that constrain calls
    # (--constrain-function-arguments): "json" one JSON object, "schema" its schema where a grammar can hold
    # it (as if strict, else one JSON object), "off" nothing. Strict functions are held to their schema always.
    constrain_function_arguments: str = "json"
    # Hold a header's recipient to the declared tools on engines that constrain calls (--constrain-recipients).
    constrain_recipients: bool = True


def wants_summary(body: dict[str, Any]) -> bool:
    """The request asks for reasoning summaries (``reasoning.summary``, or the deprecated ``generate_summary``)."""
    reasoning = body.get("reasoning")
    if not isinstance(reasoning, dict):
        return False
    return any(reasoning.get(key) in ("auto", "concise", "detailed") for key in ("summary", "generate_summary"))


def _browser_session(web_search: WebSearch | None, request: ResponseRequest) -> BrowserSession | None:
    """The response's browser (web search) when the request declares ``web_search`` and the server has a backend."""
    if web_search is None:
        return None
    declared = [t for t in request.body.get("tools") or () if is_web_search(t.get("type"))]
    if not declared:
        return None
    include_sources = "web_search_call.action.sources" in request.options.include
    return web_search.session(declared[0], include_sources=include_sources)


def _function_grammar(tool: Any, namespace: str, mode: str) -> ToolGrammar | None:
    """What a function's arguments are held to: a ``strict: true`` function's schema (request/validate.py
    refused what cannot be held to one), another's as ``mode`` says (``Prompting``)."""
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
        return None
    name, parameters = tool["name"], tool.get("parameters")
    strict = tool.get("strict") is True
    if isinstance(parameters, dict) and strict:
        definition = orjson.dumps(parameters).decode()
        return ToolGrammar(name=name, syntax="json_schema", definition=definition, namespace=namespace)
    closed = _closed(parameters)
    if mode == "schema" and isinstance(closed, dict) and grammar_schema_problem(closed, optional=True) is None:
        definition = orjson.dumps(closed).decode()
        return ToolGrammar(name=name, syntax="json_schema_optional", definition=definition, namespace=namespace)
    if mode in ("json", "schema"):
        return ToolGrammar(name=name, syntax="json_object", definition="", namespace=namespace)
    return None


def _closed(schema: Any) -> Any:
    """``schema`` with every object that does not say ``additionalProperties`` closed to its properties: what
    an MCP tool's arguments are held to (a subset of what its schema allows, so every call still matches)."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if (schema.get("type") == "object" or "properties" in schema) and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    return out


def _mcp_grammars(tool: dict[str, Any], mode: str) -> list[ToolGrammar]:
    """An MCP server's listed tools (``_mcp_tools``, from ``_prepare_mcp``): each held to its ``inputSchema``
    where a grammar can hold it (its optional properties may be left out, in declared order), else as
    ``mode`` holds a non-strict function; nothing under ``off`` (an MCP tool promises no strict schema)."""
    if mode == "off":
        return []
    label, out = tool.get("server_label"), []
    for entry in tool.get("_mcp_tools") or ():
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(label, str) or not isinstance(name, str):
            continue
        schema = _closed(entry.get("input_schema", entry.get("parameters")))
        if isinstance(schema, dict) and grammar_schema_problem(schema, optional=True) is None:
            definition = orjson.dumps(schema).decode()
            out.append(ToolGrammar(name=name, syntax="json_schema_optional", definition=definition, namespace=label))
        elif mode in ("json", "schema"):
            out.append(ToolGrammar(name=name, syntax="json_object", definition="", namespace=label))
    return out


def _tool_grammars(model_request: dict[str, Any], mode: str = "json") -> tuple[ToolGrammar, ...]:
    """The grammars of the custom tools and strict functions the prompt declares (and MCP tools' and
    file_search's arguments), for engines that constrain a call's input."""
    if model_request.get("tool_choice") == "none":
        return ()
    out = []
    for tool in model_request.get("tools") or ():
        if not isinstance(tool, dict):
            continue
        fmt = tool.get("format") if tool.get("type") == "custom" else None
        if isinstance(fmt, dict) and fmt.get("type") == "grammar" and fmt.get("syntax") in ("lark", "regex"):
            name, definition = tool.get("name"), fmt.get("definition")
            if isinstance(name, str) and isinstance(definition, str):
                out.append(ToolGrammar(name=name, syntax=fmt["syntax"], definition=definition))
        function = _function_grammar(tool, "functions", mode)
        if function is not None:
            out.append(function)
        if tool.get("type") == "mcp" and mode != "off":
            out += _mcp_grammars(tool, mode)
        if tool.get("type") == "file_search" and mode != "off":
            # {"queries": [...]}, as an MCP tool's arguments are held to its listed schema
            definition = orjson.dumps(_closed(FILE_SEARCH_PARAMETERS)).decode()
            syntax = "json_schema_optional"
            out.append(ToolGrammar(name="msearch", syntax=syntax, definition=definition, namespace="file_search"))
        if tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            for member in tool.get("tools") or ():
                member = {"type": "function", **member} if isinstance(member, dict) else member
                function = _function_grammar(member, tool["name"], mode)
                if function is not None:
                    out.append(function)
    return tuple(out)


_BROWSER = ("browser.search", "browser.open", "browser.find")


def _declared_recipients(model_request: dict[str, Any]) -> tuple[str, ...] | None:
    """The recipients a header may name, for engines that hold ``to=`` to them (``GenerateRequest.recipients``):
    each function and custom tool (and those loaded by ``tool_search``) as ``functions.NAME``, a namespace's as
    ``N.NAME``, an MCP server's listed tools as ``LABEL.NAME``, ``python``, ``browser.*``,
    ``file_search.msearch``, ``functions.tool_search``; ``()`` under ``tool_choice: "none"``; None when no tools
    are declared."""
    tools = [t for t in model_request.get("tools") or () if isinstance(t, dict)]
    if not tools:
        return None
    if model_request.get("tool_choice") == "none":
        return ()
    out: dict[str, None] = {}  # declaration order, once each
    for tool in [*tools, *_loaded_tools(model_request.get("input"))]:
        kind, name = tool.get("type"), tool.get("name")
        if kind in ("function", "custom") and isinstance(name, str):
            out[f"functions.{name}"] = None
        elif kind == "namespace" and isinstance(name, str):
            for member in tool.get("tools") or ():
                if isinstance(member, dict) and isinstance(member.get("name"), str):
                    out[f"{name}.{member['name']}"] = None
        elif kind == "mcp" and isinstance(tool.get("server_label"), str):
            for entry in tool.get("_mcp_tools") or ():
                if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                    out[f"{tool['server_label']}.{entry['name']}"] = None
        elif kind == "code_interpreter":
            out["python"] = None
        elif is_web_search(kind):
            out.update(dict.fromkeys(_BROWSER))
        elif kind == "file_search":
            out["file_search.msearch"] = None
        elif kind == "tool_search":
            out["functions.tool_search"] = None
    return tuple(out)


async def _prepare_mcp(model_request: dict[str, Any], options: McpOptions) -> McpPlan:
    """The request's MCP servers listed (or their listing reused from the conversation), for render and the loop.

    ``model_request``'s mcp tools get their tools (``_mcp_tools``), which render declares. A server the client
    may not reach (``--mcp-allowed-hosts``, an unknown ``stdio:NAME``) is a 400; one whose tools cannot be
    listed (it refused, failed, is down) is a 424, as the API answers: the client declared tools it expects.
    """
    items = model_request.get("input")
    tools = model_request.get("tools")
    if isinstance(tools, list) and any(isinstance(t, dict) and t.get("type") == "mcp" for t in tools):
        leave_lane()  # listing may wait for the servers: the next requests start meanwhile (run/turns.py)
    try:
        plan = await prepare_mcp(model_request.get("tools"), items if isinstance(items, list) else (), options)
    except McpRequestError as exc:
        raise APIError(exc.message, param=exc.param, code=exc.code) from None
    except McpListingError as exc:
        # 424 Failed Dependency with the API's message (what openai-python, openai-node and .NET clients
        # report from the API for a listing that failed); the type and code are this server's choice.
        raise APIError(
            exc.message, status=424, type="external_connector_error", param="tools", code="http_error"
        ) from None
    if plan.tools is not None:
        model_request["tools"] = plan.tools
    return plan


def _json_size(obj: Any) -> float:
    """The size of ``obj`` as JSON; infinite when it is not plain JSON (e.g. an MCP listing's objects)."""
    try:
        return len(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))
    except TypeError:
        return float("inf")


def _render(
    request: dict[str, Any], *, prompting: Prompting, python_description: str | None = None, summarize: bool = False
) -> Any:
    current_date = prompting.current_date or datetime.datetime.now(datetime.UTC).date().isoformat()
    try:
        return render_request(
            request,
            current_date=current_date,
            knowledge_cutoff=prompting.knowledge_cutoff,
            python_description=python_description,
            summarize=summarize,
        )
    except RenderError as exc:
        raise APIError(exc.message, param=exc.param, code=exc.code) from None
    except Exception as exc:
        # The renderer should answer every bad request with RenderError; anything else is its bug, but
        # still caused by this request's content, so the client gets a 400 (never a 500) and we get the
        # traceback in the log.
        logger.exception("render_request failed with an unexpected exception; answering 400")
        raise APIError(
            f"The request could not be rendered into the model's prompt format ({type(exc).__name__}: {exc}).",
            code="invalid_value",
        ) from exc


async def render_prompt(
    request: ResponseRequest,
    *,
    prompting: Prompting,
    python_description: str | None,
    mcp_options: McpOptions,
    fit: bool = True,
    summarize: bool = False,
) -> tuple[dict[str, Any], McpPlan, Any]:
    """The request's prompt as create renders it: ``(model_request, mcp plan, rendered)``.

    Shared by ``build_run`` and ``count_input_tokens``, so that a count is exactly the prompt a create would
    send. ``fit`` False renders the whole request even when it does not fit the window (a count of a prompt
    too long for it is still a count; with ``truncation: "auto"`` the count is that of the prompt kept).

    ``summarize``: the prompt that asks the model for the conversation's summary (compaction).

    Raises:
        APIError: 400 for an MCP server the client may not use, a request that cannot be rendered, or (``fit``)
            one that does not fit the context window.
    """
    model_request = dict(request.model_request)
    mcp = await _prepare_mcp(model_request, mcp_options)  # lists the MCP servers' tools: the prompt declares them
    fit_all = not fit and request.options.truncation != "auto"
    with tracing.span("render"):
        rendered = await _render_prepared(
            model_request,
            prompting=prompting,
            python_description=python_description,
            truncation=request.options.truncation,
            fit=not fit_all,
            summarize=summarize,
        )
    return model_request, mcp, rendered


async def _render_prepared(
    model_request: dict[str, Any],
    *,
    prompting: Prompting,
    python_description: str | None,
    truncation: str,
    fit: bool = True,
    summarize: bool = False,
) -> Any:
    """``model_request`` (its MCP tools listed) rendered to fit the context window."""
    render = functools.partial(
        render_to_fit,
        model_request,
        functools.partial(_render, prompting=prompting, python_description=python_description, summarize=summarize),
        # Without fitting: a window no prompt exceeds, so the whole request renders once.
        context_window=prompting.context_window if fit else 2**62,
        truncation=truncation,
    )
    if _json_size(model_request) <= INLINE_RENDER_BYTES:
        return render()
    # Rendering new text takes about a millisecond per thousand tokens: keep long requests off the event
    # loop. (A worker thread does not render in parallel, harmony holds the GIL, but the loop gets it
    # back every switch interval instead of waiting for the whole render.)
    leave_lane()  # the next requests start meanwhile (run/turns.py)
    return await offload(render)


async def count_input_tokens(
    request: ResponseRequest, *, prompting: Prompting, python_description: str | None, mcp_options: McpOptions
) -> int:
    """The prompt token count of ``request``: what create would send the engine, prefill included.

    Nothing runs: no container is created and no MCP session stays open (listing a server's tools is part of
    rendering its declaration, so MCP servers are listed).
    """
    _, mcp, rendered = await render_prompt(
        request, prompting=prompting, python_description=python_description, mcp_options=mcp_options, fit=False
    )
    for session in mcp.sessions:
        await session.aclose()
    return len(rendered.token_ids)


def _loaded_tools(items: Any) -> list[dict[str, Any]]:
    """The tools the conversation's ``tool_search_output`` items loaded: the model may call them."""
    if not isinstance(items, list):
        return []
    return [
        tool
        for item in items
        if isinstance(item, dict) and item.get("type") == "tool_search_output" and isinstance(item.get("tools"), list)
        for tool in item["tools"]
        if isinstance(tool, dict)
    ]


def summary_run(
    rendered: Any,
    *,
    response_id: str,
    model: str,
    engine: Engine,
    vocab: Vocabulary,
    prompting: Prompting,
    affinity: tuple[str, ...] = (),
    trace: Recorder | None = None,
) -> ResponseRun:
    """The run that writes a compaction's summary from its prompt (``render_prompt(..., summarize=True)``).

    Its translator is its own (``run/compact.py``: nobody sees its events); it declares the conversation's
    tools but runs none (the final channel is prefilled). ``trace``: the response is traced, the summary's
    engine call records into this (``Recorder.compaction``).
    """
    translator = Translator(
        vocab=vocab,
        new_id=random_id,
        clock=lambda: int(time.time()),
        response=response_skeleton(id=response_id, created_at=int(time.time()), model=model),
    )
    translator.receive_prefill(rendered.prefill_ids)
    return ResponseRun(
        translator=translator,
        engine=engine,
        request=GenerateRequest(
            prompt_ids=list(rendered.token_ids),
            max_tokens=prompting.context_window - len(rendered.token_ids),
            request_id=f"{response_id}-compaction",
            affinity=affinity,  # the conversation's replica holds its prefix
        ),
        context_window=prompting.context_window,
        trace=None if trace is None else trace.compaction(rendered.messages, rendered.token_ids, rendered.prefill_ids),
    )


async def build_compact(
    request: ResponseRequest,
    *,
    response_id: str,
    engine: Engine,
    vocab: Vocabulary,
    prompting: Prompting,
    python_description: str | None,
    mcp_options: McpOptions,
    trace: Recorder | None = None,
) -> ResponseRun:
    """``POST /v1/responses/compact``: the summary run over ``request``'s conversation (also a
    ``compaction_trigger`` response's, then ``trace``d with it when it is traced).

    Raises:
        APIError: what create refuses before it runs (an MCP server the client may not use, a conversation that
            cannot be rendered or does not fit the context window).
    """
    _, mcp, rendered = await render_prompt(
        request, prompting=prompting, python_description=python_description, mcp_options=mcp_options, summarize=True
    )
    for session in mcp.sessions:
        await session.aclose()  # the listing was for the prompt's declarations: no tool runs
    return summary_run(
        rendered,
        response_id=response_id,
        model=request.options.model,
        engine=engine,
        vocab=vocab,
        prompting=prompting,
        affinity=affinity_keys(request),
        trace=trace,
    )


def affinity_keys(request: ResponseRequest) -> tuple[str, ...]:
    """What ties the request to earlier engine calls, most specific first (``GenerateRequest.affinity``).

    The previous response's prompt is this one's prefix; a conversation's or a ``prompt_cache_key``'s last
    response most likely too. An engine with replicas sends the call where those went. ``chain:`` names a
    ``previous_response_id`` chain by the id of its first stored item, the same for every response of the
    chain (and for its first, when stored): another process, which does not know the previous response,
    finds the chain's replica by hashing it.
    """
    keys = []
    if request.previous_response_id:
        keys.append(f"response:{request.previous_response_id}")
    if request.conversation_id:
        keys.append(f"conversation:{request.conversation_id}")
    cache_key = request.body.get("prompt_cache_key")
    if isinstance(cache_key, str) and cache_key:
        keys.append(f"prompt_cache_key:{cache_key}")
    if request.conversation_id is None and (request.previous_response_id or request.store):
        items = request.model_request.get("input")
        first = items[0] if isinstance(items, list) and items else None
        if isinstance(first, dict) and isinstance(first.get("id"), str):
            keys.append(f"chain:{first['id']}")
    return tuple(keys)


async def build_run(
    request: ResponseRequest,
    *,
    response_id: str,
    created_at: int,
    engine: Engine,
    vocab: Vocabulary,
    sealer: ReasoningSealer,
    prompting: Prompting,
    containers: ContainerManager,
    web_search: WebSearch | None,
    mcp_options: McpOptions,
    trace: TraceOptions | None = None,
    vector_stores: VectorStoreService | None = None,
) -> ResponseRun:
    """The response's run, ready to start.

    ``trace``: which responses are traced (``tokentrace``); only a stored response is (its trace is kept beside
    it); a compaction's summary call is traced as one of its engine calls (``Recorder.compaction``).

    A request ending with a ``compaction_trigger`` item gets a run that only compacts; one whose prompt is
    longer than its ``context_management`` threshold, a run that compacts first (``compact.py``).

    ``vector_stores``: what a ``file_search`` tool searches (``file_search.py``).

    Raises:
        APIError: 400 for an unknown container, an MCP server the client may not use, a request that cannot
            be rendered or does not fit the context window; 404 for a ``file_search`` vector store the caller
            does not have.
    """
    options = request.options
    tool_sessions = ToolSessions()
    python_description = containers.description()
    messages: ResponseMessages | None = None  # enable_response_messages (messages.py), once the prompt is rendered

    def response_translator(recipients: RecipientMap, citations: Any = None, file_citations: Any = None) -> Translator:
        echo = {**request.echo, **(messages.fields() if messages is not None else {})}
        return Translator(
            vocab=vocab,
            new_id=random_id,
            clock=lambda: int(time.time()),
            response=response_skeleton(id=response_id, created_at=created_at, model=options.model, **echo),
            recipients=recipients,
            logprobs=options.top_logprobs is not None,
            citations=citations,
            queued=request.background,
            summaries=prompting.reasoning_summaries and wants_summary(request.body),
            file_citations=file_citations,
        )

    recorder = _recorder(trace, request, response_id, vocab)
    if request.compaction_trigger:
        # The response is the compaction: no tool runs, so no container or browser is set up.
        summary = await build_compact(
            request,
            response_id=response_id,
            engine=engine,
            vocab=vocab,
            prompting=prompting,
            python_description=python_description,
            mcp_options=mcp_options,
            trace=recorder,
        )
        return ResponseRun(
            translator=response_translator(RecipientMap()),
            engine=engine,
            request=GenerateRequest(prompt_ids=[], request_id=response_id),  # no engine call of its own
            compaction=Compaction(summary=summary, sealer=sealer),
            trace=recorder,  # (no prompt of its own: the summary's engine call has its prompt)
        )
    # First: it holds nothing to release, and refuses (404) before a container is made for the response.
    file_search = await file_search_session(request, vector_stores)
    if file_search is not None:
        tool_sessions.add(file_search)
    try:
        code = code_interpreter_session(
            request.body.get("tools"),
            containers,
            include_outputs="code_interpreter_call.outputs" in options.include,
            owner=request.owner,  # a container is its creator's, like every stored object
        )
    except ContainerNotFound as exc:
        raise APIError(str(exc), param=exc.param, code="invalid_value") from None
    if code is not None:
        tool_sessions.add(code)
    browser = _browser_session(web_search, request)
    if browser is not None:
        tool_sessions.add(browser)
    model_request, mcp, rendered = await render_prompt(
        request, prompting=prompting, python_description=python_description, mcp_options=mcp_options
    )
    for session in mcp.sessions:
        tool_sessions.add(session)
    if wants_messages(request.body):
        threshold = options.compact_threshold
        # A response that compacts first answers from another rendering, with a prefill of its own.
        compacting = threshold is not None and len(rendered.token_ids) > threshold
        messages = ResponseMessages(rendered.messages, () if compacting else rendered.prefill_ids)
    recipients = RecipientMap.from_tools(model_request.get("tools"), loaded=_loaded_tools(model_request.get("input")))
    if recipients.tool_search == "server":
        tool_sessions.add(ToolSearchSession(model_request.get("tools") or []))
    try:
        mcp_prelude = mcp.prelude(rendered.pending_mcp_call)
    except McpRequestError as exc:
        raise APIError(exc.message, param=exc.param, code=exc.code) from None

    def generate_request(prompt: Any) -> GenerateRequest:
        room = prompting.context_window - len(prompt.token_ids)
        return GenerateRequest(
            prompt_ids=list(prompt.token_ids),
            max_tokens=room if options.max_output_tokens is None else min(options.max_output_tokens, room),
            temperature=options.temperature,
            top_p=options.top_p,
            top_logprobs=options.top_logprobs,
            response_schema=options.response_schema,
            tool_grammars=_tool_grammars(model_request, prompting.constrain_function_arguments),
            recipients=_declared_recipients(model_request) if prompting.constrain_recipients else None,
            request_id=response_id,
            affinity=affinity_keys(request),
            priority=TIER_PRIORITY.get(request.body.get("service_tier"), 0),  # the tier used (http/quotas.py)
        )

    translator = response_translator(
        dataclasses.replace(
            recipients,
            # The item's container_id is the real container's, also for {"type": "auto"}.
            container_id=code.container.id if code is not None else None,
        ),
        browser.cite if browser is not None else None,
        file_search.cite if file_search is not None else None,
    )
    compaction: Compaction | None = None
    threshold = options.compact_threshold
    if threshold is not None and len(rendered.token_ids) > threshold:
        summarizing = await _render_prepared(
            model_request,
            prompting=prompting,
            python_description=python_description,
            truncation=options.truncation,
            summarize=True,
        )
        summary = summary_run(
            summarizing,
            response_id=response_id,
            model=options.model,
            engine=engine,
            vocab=vocab,
            prompting=prompting,
            affinity=affinity_keys(request),
            trace=recorder,
        )

        async def answer(item: dict[str, Any]) -> tuple[GenerateRequest, list[int]]:
            # The conversation as a client would resend it with the item (render drops what the item replaced).
            compacted = await _render_prepared(
                {**model_request, "input": [*(model_request.get("input") or ()), item]},
                prompting=prompting,
                python_description=python_description,
                truncation=options.truncation,
            )
            if recorder is not None:  # the answer's prompt is this one, not the conversation's before compacting
                recorder.record_prompt(compacted.messages, compacted.token_ids, compacted.prefill_ids)
            return generate_request(compacted), list(compacted.prefill_ids)

        compaction = Compaction(summary=summary, sealer=sealer, answer=answer)
    else:
        translator.receive_prefill(rendered.prefill_ids)
        if recorder is not None:
            recorder.record_prompt(rendered.messages, rendered.token_ids, rendered.prefill_ids)
    return ResponseRun(
        translator=translator,
        engine=engine,
        request=generate_request(rendered),
        sealer=sealer if options.encrypted_reasoning else None,
        strict_schema=options.strict_schema,
        tools=tool_sessions,
        max_output_tokens=options.max_output_tokens,
        max_tool_calls=options.max_tool_calls,
        context_window=prompting.context_window,
        prelude=mcp_prelude,
        compaction=compaction,
        metrics=RunMetrics(model=options.model, engine=engine_label(engine), arrived=request_arrived()),
        messages=messages,
        trace=recorder,
    )


def _recorder(
    trace: TraceOptions | None, request: ResponseRequest, response_id: str, vocab: Vocabulary
) -> Recorder | None:
    """The response's trace recorder when it is traced (its prompt is recorded once it is rendered)."""
    if trace is None or not request.store or not trace.wanted():
        return None
    return Recorder(
        response_id=response_id, model=request.options.model, token_text=vocab.token_text, max_bytes=trace.max_bytes
    )
