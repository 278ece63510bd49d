"""One MCP client connection (streamable HTTP, SSE or stdio), owned by a task of its own.

The ``mcp`` SDK's ``Client`` is an async context manager built on anyio task groups: it must be entered and
left in the same task. A response's tool calls do not all happen in one task (tools are listed while the
request is being prepared, called while the response streams, and the connection is closed when it ends),
so the connection lives in a dedicated task and the others send it jobs. That task is the only one that
touches the ``Client``; it also owns the HTTP client or the stdio subprocess, which go when it ends.

Failures are turned into the API's ``mcp_call`` error objects (openai 3.57 ``McpToolCallError``):
``mcp_protocol_error`` (a JSON-RPC error: unknown method, bad params, timeout), ``http_error`` (the MCP
endpoint answered with an HTTP error status, or could not be reached: 502), and
``mcp_tool_execution_error`` (the tool ran and reported an error: ``isError`` results).

A target the operator did not list (``McpTarget.trusted`` false: the default mode) connects through the SSRF
guard (``_guard``) and must not become an oracle for what answers where: any failure to connect, to list
its tools or to speak MCP at all is the one ``UNIFORM_FAILURE``, whatever happened (refused address, closed
port, a non-HTTP service, an HTTP service that is not MCP, an error status, a timeout); what happened goes
to the log. Once a server has listed its tools it has shown it speaks MCP: its calls' JSON-RPC errors and
tool errors are its own words, but errors the SDK writes from a body it could not parse still say nothing
of the body, and HTTP errors carry the status code with its standard phrase, not the server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import PARSE_ERROR, REQUEST_TIMEOUT, CallToolResult, Implementation, Tool

from ._bounded import DEFAULT_MCP_MAX_BODY_BYTES, IDENTITY, bound_response
from ._guard import guarded_transport
from ._options import StdioServer

__all__ = ["UNIFORM_FAILURE", "McpConnection", "McpFailure", "McpTarget"]

logger = logging.getLogger("harmony_responses.tools.mcp")

T = TypeVar("T")
_CLOSE_GRACE = 5.0  # seconds a closing connection gets to end its session before it is cancelled
_CLIENT_INFO = Implementation(name="harmony-responses", version="0.1")
_UNREACHABLE = "Could not reach the MCP server"
UNIFORM_FAILURE: dict[str, Any] = {
    "type": "http_error",
    "code": 502,
    "message": f"{_UNREACHABLE}, or it did not answer as an MCP server (the reason is in this server's log)",
}


@dataclass(frozen=True, slots=True)
class McpTarget:
    """Where one MCP server is: an http(s) URL (with the request's headers) or an operator's stdio server.

    ``trusted``: the operator listed the URL's host (``--mcp-allowed-hosts``): it is connected to wherever it
    resolves and its failures are reported in detail. Otherwise the SSRF guard applies (module docstring).
    """

    label: str
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    stdio: StdioServer | None = None
    trusted: bool = False

    @property
    def transport(self) -> str:
        if self.stdio is not None:
            return "stdio"
        # The API has no transport field. Servers of the older HTTP+SSE transport conventionally serve it at
        # /sse; everything else gets the current streamable HTTP transport.
        path = urlsplit(self.url or "").path.rstrip("/")
        return "sse" if path.endswith("/sse") else "streamable-http"


class McpFailure(Exception):
    """A failure talking to an MCP server, with the API's error object for it."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.error = error
        super().__init__(error.get("message") or str(error))

    @property
    def message(self) -> str:
        error = self.error
        if error["type"] == "http_error" and error["message"].startswith(_UNREACHABLE):
            return error["message"]
        if error["type"] == "http_error":
            return f"Http status code: {error['code']} ({error['message']})"
        if error["type"] == "mcp_protocol_error":
            return f"{error['message']} (MCP error {error['code']})"
        return str(error)


@dataclass
class _Status:
    """The last HTTP error status the MCP endpoint answered with (the SDK keeps only a JSON-RPC stand-in)."""

    code: int | None = None
    reason: str = ""


@dataclass
class _Job:
    run: Callable[[Client], Awaitable[Any]]
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class McpConnection:
    """A connection to one MCP server, opened on first use and kept until ``aclose``.

    ``list_tools`` and ``call_tool`` raise ``McpFailure`` (never anything else for a server's failure);
    after a connection-level failure the next job connects again.
    """

    def __init__(self, target: McpTarget, *, timeout: float, max_body_bytes: int = DEFAULT_MCP_MAX_BODY_BYTES) -> None:
        self.target = target
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self._task: asyncio.Task[None] | None = None
        self._jobs: asyncio.Queue[_Job | None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._status = _Status()
        self._busy = False  # a job is running in the connection's task
        self.instructions: str | None = None

    # ------------------------------------------------------------------ jobs

    @property
    def guarded(self) -> bool:
        """Connections go through the SSRF guard and failures are uniform (an http(s) URL not listed)."""
        return self.target.stdio is None and not self.target.trusted

    async def list_tools(self) -> list[Tool]:
        async def run(client: Client) -> list[Tool]:
            tools: list[Tool] = []
            cursor: str | None = None
            for _ in range(100):  # a paginator that never ends must not hang the response
                page = await client.list_tools(cursor=cursor)
                tools += page.tools
                cursor = page.next_cursor
                if cursor is None:
                    break
            return tools

        return await self._submit(run, self.timeout, listing=True)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        async def run(client: Client) -> CallToolResult:
            return await client.call_tool(name, arguments, read_timeout_seconds=self.timeout)

        # The SDK times the call out itself (a JSON-RPC timeout error); the outer limit catches a stuck transport.
        return await self._submit(run, self.timeout + _CLOSE_GRACE, listing=False)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        if self._busy:
            # A call still runs (its caller gave up: the client went away): don't wait for it.
            task.cancel()
        elif self._jobs is not None:
            self._jobs.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(task), _CLOSE_GRACE)
        except (TimeoutError, asyncio.CancelledError, Exception):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _submit(self, run: Callable[[Client], Awaitable[T]], timeout: float, *, listing: bool) -> T:
        """Run a job on the connection. ``listing``: the job shows whether the server speaks MCP at all (for
        a guarded target, every failure of it is the uniform one)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self._task is None or self._task.done():
            self._start()
        assert self._ready is not None and self._jobs is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), max(deadline - loop.time(), 0))
        except TimeoutError:
            await self._reset()
            raise self._failure(self._timeout_error("connecting"), speaking=False) from None
        except McpFailure as failure:
            await self._reset()
            raise self._failure(failure.error, speaking=False) from None
        job = _Job(run)
        self._jobs.put_nowait(job)
        try:
            return await asyncio.wait_for(asyncio.shield(job.future), max(deadline - loop.time(), 0))
        except TimeoutError:
            job.future.cancel()
            await self._reset()  # the connection is stuck: drop it, the next job connects again
            raise self._failure(self._timeout_error("waiting for an answer"), speaking=not listing) from None
        except McpFailure as failure:
            raise self._failure(failure.error, speaking=not listing) from None
        except asyncio.CancelledError:
            job.future.cancel()
            raise

    def _failure(self, error: dict[str, Any], *, speaking: bool) -> McpFailure:
        """The failure the caller (and so the client) sees. ``speaking``: the server has shown it speaks MCP."""
        if not self.guarded:
            return McpFailure(error)
        # What really happened is for the operator only: a client could otherwise map the private network.
        logger.info("MCP server '%s' (%s) failed: %s", self.target.label, self.target.url, error.get("message"))
        if not speaking or error.get("type") == "mcp_protocol_error" and error.get("code") == PARSE_ERROR:
            return McpFailure(dict(UNIFORM_FAILURE))
        if error.get("type") == "http_error":
            code = error.get("code")
            if not isinstance(code, int) or error.get("message", "").startswith(_UNREACHABLE):
                return McpFailure(dict(UNIFORM_FAILURE))
            return McpFailure({"type": "http_error", "code": code, "message": _reason(code)})
        return McpFailure(error)

    def _timeout_error(self, doing: str) -> dict[str, Any]:
        return {
            "type": "mcp_protocol_error",
            "code": REQUEST_TIMEOUT,
            "message": f"Timed out after {self.timeout:g} s {doing} (MCP server '{self.target.label}')",
        }

    async def _reset(self) -> None:
        if self._ready is not None:
            self._ready.cancel()  # nobody waits for it any more (no-op once it has a result)
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    # ------------------------------------------------------------------ the connection's own task

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._jobs = asyncio.Queue()
        self._status = _Status()
        self._task = loop.create_task(self._serve(self._ready, self._jobs), name=f"mcp:{self.target.label}")

    async def _serve(self, ready: asyncio.Future[None], jobs: asyncio.Queue[_Job | None]) -> None:
        current: _Job | None = None
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(await self._client(stack))
                self.instructions = client.instructions
                _settle(ready)
                while (current := await jobs.get()) is not None:
                    if current.future.done():  # the caller gave up waiting
                        continue
                    self._busy = True
                    try:
                        result = await current.run(client)
                    except MCPError as exc:
                        _settle(current.future, exc=McpFailure(self._protocol_error(exc)))
                    except Exception as exc:
                        # Inside the session the transport failed on this job; it may still be usable.
                        _settle(current.future, exc=McpFailure(self._transport_error(exc)))
                    else:
                        _settle(current.future, result=result)
                    finally:
                        self._busy = False
                    current = None
        except BaseException as exc:  # connecting failed, or the transport broke under a job
            failure = McpFailure(self._transport_error(exc))
            _settle(ready, exc=failure)
            if current is not None:
                _settle(current.future, exc=failure)
            while not jobs.empty():
                job = jobs.get_nowait()
                if job is not None:
                    _settle(job.future, exc=failure)
            if isinstance(exc, asyncio.CancelledError):
                raise
            logger.info("MCP server '%s': connection ended: %s", self.target.label, failure.message)

    async def _client(self, stack: AsyncExitStack) -> Client:
        target = self.target
        if target.stdio is not None:
            server = target.stdio
            params = StdioServerParameters(
                command=server.command, args=list(server.args), env=dict(server.env) or None, cwd=server.cwd
            )
            transport: Any = stdio_client(params, errlog=sys.stderr)
        else:
            assert target.url is not None
            headers = {k: v for k, v in target.headers if k.lower() != "host"}  # Host is the URL's
            status = self._status
            guarded = self.guarded

            async def remember(response: httpx2.Response) -> None:
                if response.status_code >= 400:
                    status.code, status.reason = response.status_code, response.reason_phrase

            if target.transport == "sse":
                transport = sse_client(
                    target.url,
                    headers=headers,
                    timeout=self.timeout,
                    sse_read_timeout=max(self.timeout, 300.0),
                    httpx_client_factory=_http_client_factory(remember, guarded=guarded, limit=self.max_body_bytes),
                )
            else:
                factory = _http_client_factory(remember, guarded=guarded, limit=self.max_body_bytes)
                http = factory(headers=headers, timeout=_timeouts(self.timeout))
                await stack.enter_async_context(http)
                transport = streamable_http_client(target.url, http_client=http)
        return Client(transport, client_info=_CLIENT_INFO, read_timeout_seconds=self.timeout)

    # ------------------------------------------------------------------ errors

    def _protocol_error(self, exc: MCPError) -> dict[str, Any]:
        http = self._http_error()
        if http is not None:
            return http
        return {"type": "mcp_protocol_error", "code": exc.code, "message": exc.message}

    def _http_error(self) -> dict[str, Any] | None:
        status = self._status
        if status.code is None:
            return None
        code, status.code = status.code, None
        reason = status.reason or _reason(code)
        return {"type": "http_error", "code": code, "message": reason}

    def _transport_error(self, exc: BaseException) -> dict[str, Any]:
        """The error object for a connection-level failure (unwrapping anyio's exception groups)."""
        http = self._http_error()
        if http is not None:
            return http
        leaf = _leaf(exc)
        if isinstance(leaf, MCPError):
            return {"type": "mcp_protocol_error", "code": leaf.code, "message": leaf.message}
        if isinstance(leaf, httpx2.HTTPStatusError):
            code = leaf.response.status_code
            return {"type": "http_error", "code": code, "message": leaf.response.reason_phrase or _reason(code)}
        if isinstance(leaf, asyncio.CancelledError):
            return {"type": "mcp_protocol_error", "code": -32000, "message": "Connection closed"}
        detail = str(leaf) or type(leaf).__name__
        if self.target.stdio is not None:
            return {
                "type": "mcp_protocol_error",
                "code": -32000,
                "message": f"The stdio MCP server '{self.target.stdio.name}' failed: {detail}",
            }
        # No HTTP status: the endpoint could not be reached. 502 is what a gateway says about that.
        return {"type": "http_error", "code": 502, "message": f"{_UNREACHABLE}: {detail}"}


def _settle(future: asyncio.Future[Any], *, result: Any = None, exc: BaseException | None = None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(code: int) -> str:
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return "HTTP error"


def _timeouts(seconds: float) -> httpx2.Timeout:
    # The read timeout bounds the wait for a streamed answer: long enough for the slowest allowed call.
    return httpx2.Timeout(min(seconds, 30.0), read=max(seconds, 300.0))


def _http_client_factory(
    on_response: Callable[[httpx2.Response], Awaitable[None]], *, guarded: bool, limit: int
) -> Any:
    """An ``httpx2.AsyncClient`` factory like the SDK's, which also records error statuses and reads every body
    within ``limit`` bytes (``_bounded``); ``guarded``: every connection through the SSRF guard, no proxy from
    the environment."""

    async def bound(response: httpx2.Response) -> None:
        bound_response(response, limit)

    def factory(
        headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None
    ) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers={**IDENTITY, **(headers or {})},
            timeout=timeout if timeout is not None else _timeouts(30.0),
            auth=auth,
            event_hooks={"response": [on_response, bound]},
            transport=guarded_transport() if guarded else None,
            trust_env=not guarded,
        )

    return factory
