"""WebSocket mode on ``/v1/responses``: ``response.create`` messages run responses, each event is a message.

What openai-python's ``client.responses.connect()`` and Codex (``OpenAI-Beta: responses_websockets=2026-02-06``)
speak. Each text message the client sends is one JSON object:

- ``{"type": "response.create", …}``: a create body (``stream`` implied, ``background`` refused) plus the
  WebSocket-only ``stream_id`` (a lane: creates on one lane run in order, lanes run side by side, and
  every event of a lane's response echoes its ``stream_id``; at most ``MAX_STREAM_ID_LENGTH`` characters)
  and ``generate`` (``false``: the response is made without model output, ``Server.prepared_response``,
  and stored as any response with ``store``; Codex warms a connection up this way). The
  request is read and run exactly as ``POST /v1/responses`` reads and runs it (``read_request`` →
  ``Server.create_response`` → the run's batches), so every event is the one SSE would carry, in its own
  message, with the same sequence numbers.
- ``{"type": "response.processed", "response_id"}``: Codex's acknowledgement; nothing to do.

A request refused before its response starts (validation, the model, the engine refusing) is one ``error``
message as the API sends it over WebSocket: ``{"type": "error", "status": 400, "error": {"type", "code",
"message", "param"}}``; the connection stays open. Errors after ``response.created`` are in-band, as over
SSE (``error`` + ``response.failed``; the ``error`` event carries the nested ``error`` object too).

``previous_response_id`` also names the connection's recent responses that were not stored (``store:
false``, what Codex sends): the API keeps them for the connection, and Codex's requests after the first
send only the new items. A client that closes the socket cancels its running responses, like a closed
HTTP stream (stored ones end ``cancelled``). When the server shuts down, running responses get the grace an
SSE stream gets (``connection.ApiWebSocketProtocol``), new ``response.create`` messages a 503 ``error``, and the
socket closes (1012) once they have ended.

A browser can open a WebSocket to any address without asking (no CORS), so on a loopback bind a handshake
whose ``Origin`` is not a loopback or ``--allowed-host`` name gets 403 (API clients send no ``Origin``).
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from .. import tracing
from ..errors import APIError, shutting_down
from ..logs import current_request_id, request_scope
from ..metrics import STREAMS_IN_FLIGHT, TOKEN_SINK
from ..quotas import CURRENT
from ..request import History, read_request
from ..request.validate import string_too_long
from ..run import ResponseRun, Server, StoredRun
from ..run.turns import Turns, starting, tier_rank
from ..tokentrace import HEADER as TRACE_HEADER
from ..tokentrace import REQUESTED as TRACE_REQUESTED
from ..tokentrace import requested as trace_requested
from .auth import owner_of
from .connection import DRAIN_EXTENSION
from .errors import error_response, to_api_error
from .hosts import is_loopback
from .quotas import admit_response

__all__ = ["responses_socket"]

logger = logging.getLogger("harmony_responses.http")

# Responses a connection remembers for previous_response_id (store: false ones included): Codex continues
# from the last one; a few more let lanes continue their own.
REMEMBERED = 4
# A lane's id is echoed into every event of its responses: a 1 MiB one made every delta a megabyte.
MAX_STREAM_ID_LENGTH = 128
_DELTA = b'.delta"'
_SOCKET_STREAMS = STREAMS_IN_FLIGHT.labels("websocket")


class _ConnectionHistory:
    """``History`` over the store, plus the connection's own recent responses (which may not be stored)."""

    def __init__(self, stored: History) -> None:
        self._stored = stored
        self.recent: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def remember(self, response_id: str, items: list[dict[str, Any]]) -> None:
        self.recent[response_id] = items
        while len(self.recent) > REMEMBERED:
            self.recent.popitem(last=False)

    async def find_item(self, item_id: str, owner: str) -> dict[str, Any] | None:
        for items in reversed(self.recent.values()):
            for item in items:
                if item.get("id") == item_id:
                    return item
        return await self._stored.find_item(item_id, owner)

    async def previous_items(self, response_id: str, owner: str) -> list[dict[str, Any]]:
        items = self.recent.get(response_id)
        if items is not None:
            return list(items)
        return await self._stored.previous_items(response_id, owner)

    async def conversation_items(self, conversation_id: str, owner: str) -> list[dict[str, Any]] | None:
        return await self._stored.conversation_items(conversation_id, owner)


def _origin_problem(websocket: WebSocket) -> str | None:
    allowed: Sequence[str] | None = websocket.app.state.loopback_hosts
    origin = websocket.headers.get("origin")
    if origin is None or allowed is None or "*" in allowed:
        return None
    host = urlsplit(origin).hostname or ""
    if is_loopback(host) or host.lower() in allowed:
        return None
    return (
        f"WebSocket connections from the web page at {origin!r} are refused: this server listens on a loopback "
        "address and accepts pages only from loopback names (start it with --allowed-host NAME to accept another)."
    )


def _error_event(error: APIError, stream_id: str | None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "error", "status": error.status, **error.body()}
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def _framed_payloads(batch: bytes) -> list[bytes]:
    """The JSON of each event in SSE frames (``sse.frame``: ``event: T\\ndata: JSON\\n\\n``), as logged."""
    return [frame.partition(b"\ndata: ")[2] for frame in batch.split(b"\n\n") if frame]


class _Connection:
    def __init__(self, websocket: WebSocket, server: Server) -> None:
        self.websocket = websocket
        self.server = server
        self.history = _ConnectionHistory(server.stored)
        self.owner = owner_of(websocket)
        self.lanes: dict[str | None, deque[dict[str, Any]]] = {}
        self.send_lock = anyio.Lock()
        self.group: anyio.abc.TaskGroup | None = None
        # The server is shutting down: the protocol's close, called once the running responses have ended.
        self._close: Callable[[], None] | None = None
        websocket.scope.setdefault("extensions", {})[DRAIN_EXTENSION] = self

    def busy(self) -> bool:
        """Responses are running or waiting on this socket (``ApiWebSocketProtocol.shutdown`` asks)."""
        return bool(self.lanes)

    def close_when_idle(self, close: Callable[[], None]) -> None:
        """The server is shutting down: refuse new responses, and ``close`` once the running ones have ended."""
        self._close = close
        if not self.lanes:
            self._closing()

    def _closing(self) -> None:
        close, self._close = self._close, lambda: None  # once: later lanes find it done
        if close is not None:
            close()

    async def serve(self) -> None:
        async with anyio.create_task_group() as group:
            self.group = group
            try:
                while True:
                    message = await self.websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        break
                    text = message.get("text")
                    if text is None:
                        text = (message.get("bytes") or b"").decode("utf-8", "replace")
                    self._receive(text, group)
            finally:
                # The client is gone: its responses end as a closed HTTP stream ends them (the runs' aclose).
                group.cancel_scope.cancel()

    def _receive(self, text: str, group: anyio.abc.TaskGroup) -> None:
        try:
            message = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            group.start_soon(self._send_error, APIError(f"The message is not valid JSON: {exc}"), None)
            return
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "response.processed":
            return  # Codex acknowledging a response it has handled
        if kind != "response.create":
            error = APIError(
                f"Invalid value for 'type': {kind!r}. Supported values are: 'response.create'.",
                param="type",
                code="invalid_value",
            )
            group.start_soon(self._send_error, error, None)
            return
        lane = message.get("stream_id") if isinstance(message.get("stream_id"), str) else None
        if lane is not None and len(lane) > MAX_STREAM_ID_LENGTH:
            error = string_too_long("stream_id", MAX_STREAM_ID_LENGTH, len(lane))
            group.start_soon(self._send_error, error, None)  # not echoed: the id is what is refused
            return
        if self._close is not None:
            group.start_soon(self._send_error, shutting_down(), lane)
            return
        queue = self.lanes.get(lane)
        if queue is not None:
            queue.append(message)  # its lane's worker takes it after the response before it
            return
        self.lanes[lane] = deque([message])
        group.start_soon(self._run_lane, lane)

    async def _run_lane(self, lane: str | None) -> None:
        queue = self.lanes[lane]
        try:
            while queue:
                await self._create(queue[0], lane)
                queue.popleft()
        except (WebSocketDisconnect, OSError, RuntimeError) as exc:
            if isinstance(exc, RuntimeError) and "send" not in str(exc):
                raise
            # The socket failed under a send (the client went away): the whole connection is over.
            assert self.group is not None
            self.group.cancel_scope.cancel()
        finally:
            del self.lanes[lane]
            if self._close is not None and not self.lanes:
                self._closing()  # shutting down, and this was the last response running here

    async def _send(self, payload: bytes | dict[str, Any], stream_id: str | None) -> None:
        if isinstance(payload, dict):
            if stream_id is not None:
                payload = {**payload, "stream_id": stream_id}
            data = orjson.dumps(payload)
        elif stream_id is not None:
            # Logged JSON objects end with "}": the lane's id goes in as the last key, without a parse.
            data = payload[:-1] + b',"stream_id":' + orjson.dumps(stream_id) + b"}"
        else:
            data = payload
        async with self.send_lock:
            await self.websocket.send_text(data.decode())

    async def _send_error(self, error: APIError, stream_id: str | None) -> None:
        with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
            await self._send(_error_event(error, stream_id), None)

    async def _create(self, message: dict[str, Any], stream_id: str | None) -> None:
        # A limited key's response.create is admitted as its HTTP twin is (http/quotas.py): a request taken,
        # a slot held, its tokens taken as produced; over a limit, a 429 error event.
        quotas = self.websocket.app.state.quotas
        limits = quotas.limits_for(self.websocket.headers.get("authorization", "")) if quotas else None
        if limits is None:
            await self._create_admitted(message, stream_id)
            return
        try:
            grant = await quotas.admit(limits, response=True)
        except APIError as exc:
            await self._send_error(exc, stream_id)
            return
        current = CURRENT.set(grant)
        sink = TOKEN_SINK.set(grant if limits.tokens_per_minute is not None else None)
        try:
            await self._create_admitted(message, stream_id)
        finally:
            TOKEN_SINK.reset(sink)
            CURRENT.reset(current)
            await grant.close()

    async def _create_admitted(self, message: dict[str, Any], stream_id: str | None) -> None:
        body = {k: v for k, v in message.items() if k not in ("type", "stream_id", "generate")}
        # Each response.create arrives now (its time to first token counts from here), under the handshake's id.
        with (
            request_scope(current_request_id() or "-"),
            starting() as start,
            tracing.turn("websocket turn", {"harmony.stream_id": stream_id}),  # --otel: under the connection's span
        ):
            await start.enter_lane(tier_rank(body))  # the start work by tier and arrival, one lot at a time
            try:
                if body.get("background"):
                    raise APIError(
                        "Background mode is not supported over WebSocket: send 'background': true with POST "
                        "/v1/responses instead.",
                        param="background",
                        code="unsupported_value",
                    )
                body["stream"] = True  # implied over WebSocket
                prepared = await read_request(
                    body,
                    owner=self.owner,
                    models=self.server.models,
                    history=self.history,
                    sealer=self.server.sealer,
                    web_search=self.server.web_search is not None,
                )
                await admit_response(prepared.body)  # the tier used, a limited key's slot (quotas.py)
                if message.get("generate") is False:
                    events = await self.server.prepared_response(prepared)
                    for event in events:
                        await self._send(event, stream_id)
                    self.history.remember(events[-1]["response"]["id"], list(prepared.model_request["input"]))
                    return
                if TRACE_HEADER in self.websocket.headers:  # the handshake's x-harmony-trace (--trace-header)
                    TRACE_REQUESTED.set(trace_requested(self.websocket.headers[TRACE_HEADER]))
                outcome = await self.server.create_response(prepared)
            except Exception as exc:
                await self._send_error(to_api_error(exc), stream_id)
                return
            assert isinstance(outcome, ResponseRun | StoredRun), "background is refused above"
            try:
                try:
                    await outcome.start(at_admission=True)
                except Exception as exc:
                    await self._send_error(to_api_error(exc), stream_id)
                    return
                await self._stream(outcome, stream_id, start)
            finally:
                with anyio.CancelScope(shield=True):
                    await outcome.aclose()
            final = outcome.final
            if final is not None and final.get("status") != "failed":
                self.history.remember(final["id"], list(prepared.model_request["input"]) + list(final["output"]))

    async def _stream(self, run: ResponseRun | StoredRun, stream_id: str | None, start: Any) -> None:
        with _SOCKET_STREAMS.track_inprogress():
            await self._send_batches(run, stream_id, start)

    async def _send_batches(self, run: ResponseRun | StoredRun, stream_id: str | None, start: Any) -> None:
        turns = Turns()
        async with contextlib.aclosing(run.batches()) as batches:
            async for batch in batches:
                turns.arrived()
                # A stored run hands over its events framed as SSE, as they were logged: their JSON is sent.
                payloads = _framed_payloads(batch) if isinstance(batch, bytes) else batch
                for payload in payloads:
                    await self._send(payload, stream_id)
                if not start.delivered and any(_is_delta(p) for p in payloads):
                    start.finish()
                await turns.done()


def _is_delta(payload: bytes | dict[str, Any]) -> bool:
    if isinstance(payload, dict):
        return str(payload.get("type", "")).endswith(".delta")
    return _DELTA in payload[:80]


async def responses_socket(websocket: WebSocket) -> None:
    """The WebSocket endpoint of ``/v1/responses`` (see the module docstring)."""
    problem = _origin_problem(websocket)
    if problem is not None:
        await websocket.send_denial_response(error_response(APIError(problem, status=403, code="forbidden_origin")))
        return
    await websocket.accept()
    try:
        await _Connection(websocket, websocket.app.state.server).serve()
    except (WebSocketDisconnect, OSError):
        pass  # the client went away mid-send: its responses were cancelled on the way out
    except RuntimeError as exc:
        if "close" not in str(exc).lower():  # Starlette's "…after sending 'websocket.close'": also gone
            raise
