"""The Starlette app: routes, middleware, error handlers, and the server's lifetime as the app's lifespan.

Routes: ``POST /v1/responses`` (responses.py) and its WebSocket mode (websocket.py), ``POST
/v1/responses/input_tokens`` and ``POST /v1/responses/compact`` (responses.py), the endpoints over stored
responses and conversations (stored.py), the Files API (files.py), the Vector stores API
(vector_stores.py), ``GET /v1/models`` and ``GET /v1/models/{model}`` (the OpenAI list and model shapes),
``GET /health`` (liveness: 200 while the process serves) and ``GET /ready`` (readiness: 200 when every served
model has an engine that answers and the store takes writes, else 503 saying which do not;
``Server.readiness``).
Unknown routes get a JSON 404 and wrong methods a JSON 405 through ``errors.exception_handlers``, so every
answer the server gives is OpenAI-shaped. ``GET /metrics`` is Prometheus's (``metrics.exposition``). Around
it all, ``observe.Observe`` gives every request its id and counts it. While the server shuts down, new
requests get 503 ``shutting_down`` (``shutdown.RefuseWhileClosing``).

The lifespan starts the ``run.Server`` (vocabulary, engine check, sandbox probe, store) and closes it on
shutdown; a failed start is kept in ``server.startup_error`` for the command line.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp

from .. import tracing
from ..metrics import exposition
from ..quotas import Quotas
from ..request import model_not_found
from ..run import Server
from . import hot_route
from .auth import BearerAuth
from .errors import exception_handlers, json_response
from .files import DEFAULT_MAX_FILE_BYTES
from .files import routes as file_routes
from .first_tokens import FirstTokensFirst
from .hosts import LoopbackHosts
from .observe import Observe
from .quotas import QuotaLimits
from .responses import compact_response, count_input_tokens, create_response
from .shutdown import RefuseWhileClosing
from .stored import routes as stored_routes
from .vector_stores import routes as vector_store_routes
from .websocket import responses_socket

__all__ = ["build_app"]

MODEL_OWNER = "harmony-responses"


def _model_object(name: str, created: int) -> dict[str, object]:
    return {"id": name, "object": "model", "created": created, "owned_by": MODEL_OWNER}


async def list_models(request: Request) -> Response:
    server: Server = request.app.state.server
    return json_response({"object": "list", "data": [_model_object(m, server.started_at) for m in server.models]})


async def retrieve_model(request: Request) -> Response:
    server: Server = request.app.state.server
    name = request.path_params["model"]
    if name not in server.models:
        raise model_not_found(name)
    return json_response(_model_object(name, server.started_at))


async def health(request: Request) -> Response:
    return json_response({"status": "ok"})


async def ready(request: Request) -> Response:
    server: Server = request.app.state.server
    is_ready, body = await server.readiness()
    return json_response(body, status=200 if is_ready else 503)


async def metrics(request: Request) -> Response:
    body, content_type = exposition()
    return Response(body, media_type=content_type)


class ObservedStarlette(Starlette):
    """Starlette with ``Observe`` outside its error middleware (a bug's 500 gets a request id too),
    ``POST /v1/responses`` counted as starting from its arrival, before the middleware and routing, until its
    first delta is out (run/turns.py), and handed to its route past the router (hot_route.py)."""

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        # Past the router, straight to its route: the endpoint every burst is made of (hot_route.py).
        hot_route.install(stack, self.router, "/v1/responses", "POST")
        inner: ASGIApp = FirstTokensFirst(stack, path="/v1/responses")
        if self.state.quotas is not None:  # admitted before the start lane: the counters are a database's
            inner = QuotaLimits(inner, quotas=self.state.quotas)
        if tracing.enabled():  # --otel: each request's span (the OpenTelemetry API imported only then)
            from .traced import TraceRequests

            inner = TraceRequests(inner)
        return Observe(inner)


def build_app(
    server: Server,
    *,
    api_keys: Sequence[str] = (),
    max_body_bytes: int,
    loopback_hosts: Sequence[str] | None = None,
    body_timeout: float = 60.0,
    quotas: Quotas | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> Starlette:
    """The ASGI app serving ``server``.

    Args:
        server: what the endpoints call; started and closed by the app's lifespan.
        api_keys: accepted bearer tokens; empty means no authentication.
        max_body_bytes: larger request bodies get 413.
        loopback_hosts: for a server listening on a loopback address, the ``Host`` names it answers to
            besides loopback ones (``hosts.LoopbackHosts``); None: any (not a loopback bind).
        body_timeout: seconds a client may take to send a request's body (then 408).
        quotas: the limited keys' quotas (``harmony_responses.quotas``), opened and closed with the server; their
            keys must be among ``api_keys``.
        max_file_bytes: larger uploads to ``/v1/files`` get 413 (``files.py``).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await server.start()
        if quotas is not None:
            await quotas.open()
        try:
            yield
        finally:
            if quotas is not None:
                await quotas.aclose()
            await server.aclose()
            tracing.shutdown()  # the spans not exported yet (--otel)

    middleware = [Middleware(RefuseWhileClosing, server=server)]
    if loopback_hosts is not None:
        middleware.append(Middleware(LoopbackHosts, allowed=loopback_hosts))
    if api_keys:
        middleware.append(Middleware(BearerAuth, keys=api_keys))
    routes = [
        # Counted as starting until their first delta is out (ObservedStarlette): the loop serves them first.
        Route("/v1/responses", create_response, methods=["POST"]),
        # WebSocket mode on the same path (openai's responses.connect(), Codex): websocket.py.
        WebSocketRoute("/v1/responses", responses_socket),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", retrieve_model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/v1/responses/compact", compact_response, methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/responses/input_tokens", count_input_tokens, methods=["POST"]),
        *stored_routes,
        *file_routes,
        *vector_store_routes,
    ]
    app = ObservedStarlette(
        routes=routes, middleware=middleware, exception_handlers=exception_handlers, lifespan=lifespan
    )
    app.state.server = server
    app.state.keyed = bool(api_keys)
    app.state.quotas = quotas
    app.state.loopback_hosts = tuple(loopback_hosts) if loopback_hosts is not None else None
    app.state.max_body_bytes = max_body_bytes
    app.state.max_file_bytes = max_file_bytes
    app.state.body_timeout = body_timeout
    return app
