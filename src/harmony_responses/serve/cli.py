"""``harmony-responses serve``: the options (``options.OPTIONS``) → a ``Config`` → the app on uvicorn.

Once the socket is listening the command prints where, which engine serves (the echo stand-in says it is
not a model) and which model names it answers to.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any, TextIO

import uvicorn

from .. import tracing
from ..engine import EngineUnavailable
from ..http.connection import ApiWebSocketProtocol, answering, api_http_protocol
from ..logs import configure as configure_logs
from ..logs import logging_config
from ..sse import describe_frames
from ..store import StoreError, describe_store
from ..tools.code_interpreter import SandboxLimits
from ..tools.mcp import DEFAULT_MCP_MAX_BODY_BYTES, DEFAULT_MCP_TIMEOUT, McpOptions, load_mcp_config, parse_stdio_server
from ..translate import describe_text_run
from .app import create_app, web_search_from_config
from .config import DEFAULT_MODELS, Config
from .config_file import apply_config_file
from .engines import build_engines, describe_engines, split_engine_values
from .options import BY_NAME, ENV_PREFIX, GROUPS, OPTIONS, env_list
from .stopping import end_by, exit_now, exit_soon

__all__ = ["add_serve_arguments", "banner", "config_from_args", "configure_logging", "run_server", "serve"]

# Young-generation collection threshold of a serving process (see _tune_gc).
GC_THRESHOLD = 100_000
# Seconds after the shutdown grace at which uvicorn cuts whatever connection still hangs.
SHUTDOWN_BACKSTOP = 5.0
# Seconds between looks, during the shutdown grace, at whether a response is still under way.
GRACE_POLL = 0.1
# A worker's intake of connections handed to it (workers.SharedListener.take_handed): started with the loop and
# a protocol factory, it returns what stops it.
TakeHanded = Callable[[asyncio.AbstractEventLoop, Callable[[], asyncio.Protocol]], Callable[[], None]]


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``serve``'s options to ``parser``, under their groups' headings, and make ``serve`` its handler."""
    # The options are listed under their headings: a usage line naming each of them would be 30 lines long.
    parser.usage = "%(prog)s [options]"
    groups = {group.name: parser.add_argument_group(group.name, group.about) for group in GROUPS}
    for option in OPTIONS:
        option.add_to(groups[option.group])
    parser.set_defaults(handler=serve)


def config_from_args(args: argparse.Namespace) -> Config:
    """The parsed options (and the ``--config`` file under them) → a ``Config``; ValueError for a bad one (a
    model without an engine)."""
    apply_config_file(args)
    if args.otel and not tracing.available():
        raise ValueError(f"--otel needs OpenTelemetry's SDK and OTLP/HTTP exporter: {tracing.INSTALL}")
    plain, bound = split_engine_values(args.engines or env_list(BY_NAME["engines"]) or ())
    if plain is None and not bound:
        plain = "echo"
    # Without --model: the default names when a plain engine serves them; with only bound engines, their names.
    models = args.models or env_list(BY_NAME["models"]) or (DEFAULT_MODELS if plain is not None else ())
    return Config(
        host=args.host,
        port=args.port,
        workers=args.workers,
        models=tuple(models),
        engine=plain,
        model_engines=bound,
        engine_url=args.engine_url,
        engine_model=args.engine_model,
        engine_api_key=args.engine_api_key,
        engine_connect_timeout=args.engine_connect_timeout,
        engine_first_token_timeout=args.engine_first_token_timeout,
        engine_stall_timeout=args.engine_stall_timeout,
        engine_max_connections=args.engine_max_connections,
        engine_start_wait=args.engine_start_wait,
        engine_priority=args.engine_priority,
        record=args.record,
        api_keys=tuple(args.api_keys or env_list(BY_NAME["api_keys"]) or ()),
        keys=tuple(getattr(args, "keys", ())),  # the config file's [[keys]] (config_file.py)
        allowed_hosts=tuple(args.allowed_hosts or env_list(BY_NAME["allowed_hosts"]) or ()),
        log_level=args.log_level,
        log_format=args.log_format,
        trace=args.trace,
        trace_header=args.trace_header,
        trace_max_bytes=args.trace_max_bytes,
        otel=args.otel,
        max_body_bytes=args.max_body_bytes,
        max_file_bytes=args.max_file_bytes,
        head_timeout=args.head_timeout,
        max_head_bytes=args.max_head_bytes,
        max_headers=args.max_headers,
        body_timeout=args.body_timeout,
        shutdown_grace=args.shutdown_grace,
        current_date=args.current_date,
        knowledge_cutoff=args.knowledge_cutoff,
        context_window=args.context_window,
        secret_key=args.secret_key,
        reasoning_summaries=args.reasoning_summaries,
        constrain_function_arguments=args.constrain_function_arguments,
        constrain_recipients=args.constrain_recipients,
        store=args.store,
        data_dir=args.data_dir,
        retention=args.retention,
        mcp=mcp_options_from_args(args),
        code_interpreter=SandboxLimits(wall_seconds=args.code_timeout, cpu_seconds=max(1, round(args.code_timeout))),
        unsafe_code_interpreter=args.unsafe_code_interpreter,
        search_backend=args.search_backend,
        search_dir=args.search_dir,
        search_base_url=args.search_base_url,
        search_api_url=args.search_api_url,
        # A key on the command line would show in ps: environment only.
        search_api_key=os.environ.get(ENV_PREFIX + "SEARCH_API_KEY") or os.environ.get("EXA_API_KEY") or None,
        embeddings=args.embeddings,
        embeddings_model=args.embeddings_model,
        embeddings_api_key=os.environ.get(ENV_PREFIX + "EMBEDDINGS_API_KEY") or None,
    )


def mcp_options_from_args(args: argparse.Namespace) -> McpOptions:
    """The MCP flags → McpOptions; raises ValueError for a bad server spec or config file."""
    servers = tuple(parse_stdio_server(spec) for spec in getattr(args, "mcp_servers", None) or ())
    if getattr(args, "mcp_config", None):
        servers += load_mcp_config(args.mcp_config)
    hosts = getattr(args, "mcp_allowed_hosts", None)
    return McpOptions(
        allowed_hosts=tuple(h for h in hosts.split(",") if h.strip()) if hosts is not None else None,
        servers=servers,
        timeout=getattr(args, "mcp_timeout", DEFAULT_MCP_TIMEOUT),
        max_body_bytes=getattr(args, "mcp_max_body_bytes", DEFAULT_MCP_MAX_BODY_BYTES),
    )


def banner(
    config: Config, engine_description: str, host: str, port: int, search: str | None = None, *, workers: int = 1
) -> str:
    shown_host = f"[{host}]" if ":" in host else host
    lines = [
        f"harmony-responses: listening on http://{shown_host}:{port}/v1",
        f"  engine: {engine_description}",
        f"  models: {', '.join(config.served_models)} (default {config.default_model})",
        f"  auth:   {'bearer token required' if config.api_keys or config.keys else 'none (no --api-key given)'}",
        f"  store:  {describe_store(config.store, config.data_dir, config.retention)}",
    ]
    if search is not None:
        lines.append(f"  search: {search}")
    if workers > 1:
        lines.append(f"  workers: {workers} processes on this port")
    # The compiled steps (setup.py), or why not: each falls back to Python, to the same events.
    lines.append(f"  output: {describe_text_run()}; {describe_frames()}")
    return "\n".join(lines)


class _Server(uvicorn.Server):
    """uvicorn's server, calling back once its sockets listen (so the banner shows the real port), and
    shutting down in two steps: a grace while still listening, then uvicorn's own shutdown.

    uvicorn's shutdown closes the listening sockets and the idle kept-alive connections at once, so that a
    request arriving during the grace met a refused connection or a cut one, then waits for open connections
    to finish: a stream of many minutes kept a SIGTERM waiting that long, and cutting connections at a
    deadline would leave streams without their terminal event. So first, for up to ``grace`` seconds and
    while a response is under way (a request being answered, a WebSocket's, a background one), the server
    goes on listening and answers every new request 503 ``shutting_down`` (``http/shutdown.py``); then the
    responses still running end failed, saying so (``Server.shut_down_runs``), and uvicorn's shutdown closes
    the sockets, lets the streams finish and runs the lifespan's shutdown, its own deadline (a few seconds)
    left for whatever still hangs.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        on_listening: Callable[[str, int], None],
        *,
        grace: float,
        app_server: Any,
        take_handed: TakeHanded | None = None,
        supervisor: Connection | None = None,
    ) -> None:
        super().__init__(config)
        self._take_handed = take_handed
        self._stop_handed: Callable[[], None] | None = None
        self._on_listening = on_listening
        self._grace = grace
        self._app_server = app_server
        self._supervisor = supervisor

    async def shutdown(self, sockets: Any = None) -> None:
        self._app_server.refuse_new()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._grace
        while not self.force_exit and (
            any(map(answering, self.server_state.connections)) or self._app_server.background_running()
        ):
            if loop.time() >= deadline:
                self._end_running()
                break
            # A connection's response has no event for its end: uvicorn's own shutdown polls them so too.
            await asyncio.sleep(GRACE_POLL)
        if self._stop_handed is not None:
            self._stop_handed()  # as the listening sockets close, just below
        await super().shutdown(sockets)

    def _end_running(self) -> None:
        running = self._app_server.shut_down_runs()
        if running:
            logging.getLogger("harmony_responses.serve").warning(
                "shutdown: %d responses still running after %g s are ended", running, self._grace
            )

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGINT and self.should_exit:
            exit_now(sig)  # a second Ctrl-C: at once (uvicorn's force_exit could hang; see stopping.py)
        super().handle_exit(sig, frame)

    async def serve(self, sockets: Any = None) -> None:
        try:
            await super().serve(sockets)
        finally:
            exit_soon()  # done serving: what is left (asyncio.run's clean-up, threads) must not outlive it long

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:
            _tune_gc()
            loop = asyncio.get_running_loop()
            if self._supervisor is not None:
                loop.add_reader(self._supervisor.fileno(), self._supervisor_gone)
            if self._take_handed is not None:
                self._stop_handed = self._take_handed(loop, self._new_protocol)
            for server in self.servers:
                for sock in server.sockets:
                    host, port = sock.getsockname()[:2]
                    self._on_listening(host, port)
                    return

    def _new_protocol(self) -> asyncio.Protocol:
        """A connection's protocol, as uvicorn makes one for each connection its listening sockets accept."""
        return self.config.http_protocol_class(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state
        )

    def _supervisor_gone(self) -> None:
        # A worker whose parent died (SIGKILL: no signal was forwarded) shuts down as on SIGTERM rather than
        # serving on, unsupervised, on a port nobody will restart it on.
        assert self._supervisor is not None
        asyncio.get_running_loop().remove_reader(self._supervisor.fileno())
        logging.getLogger("harmony_responses.serve").warning("the parent process is gone: shutting down")
        self.should_exit = True


def _tune_gc() -> None:
    """Keep the garbage collector off the streaming path.

    A stream allocates a few container objects per token and frees them at once; CPython's default
    collection threshold (700 allocations) then runs a collection every few tokens per process, and each
    older-generation pass rescans everything alive: the vocabulary, the imported modules and every running
    response's state. With 64 streams that was a third of the server's CPU. Objects alive once the server
    has started are frozen (never scanned again), and a young collection runs once 100,000 more container
    objects are alive than at the last one; reference cycles are still collected, just in larger, rarer
    passes. A request leaves no cycle behind on its usual paths (the garbage collector found none after
    bursts of streams, stored or not), so what counts towards that is mostly the running requests' own
    objects: a burst of 256 streams is some 58,000 of them, and at 50,000 each such burst paid a 20-30 ms
    pass that found nothing to free, just before its last requests' first tokens.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 20)


def serve(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run the server until interrupted; 2 for a bad configuration."""
    out = out or sys.stdout
    try:
        config = config_from_args(args)
        engines = build_engines(config)
        web_search = web_search_from_config(config)
    except (ValueError, AssertionError) as exc:
        print(f"harmony-responses serve: {exc}", file=sys.stderr)
        return 2
    configure_logging(config)
    if config.workers > 1:
        from .workers import run_workers

        return run_workers(config, out=out)

    def on_listening(host: str, port: int) -> None:
        search = web_search.describe() if web_search is not None else None
        print(banner(config, describe_engines(engines), host, port, search), file=out, flush=True)

    code, error = run_server(config, engines, web_search, on_listening=on_listening)
    if error is not None:
        print(f"harmony-responses serve: {error}", file=sys.stderr)
    return code


def configure_logging(config: Config) -> None:
    """Our loggers and uvicorn's, at ``--log-level`` in ``--log-format`` (``logs.py``), request ids included."""
    configure_logs(config.log_level, config.log_format)


def run_server(
    config: Config,
    engines: dict[str, Any],
    web_search: Any,
    *,
    on_listening: Callable[[str, int], None],
    sockets: list[socket.socket] | None = None,
    take_handed: TakeHanded | None = None,
    supervisor: Connection | None = None,
) -> tuple[int, str | None]:
    """Serve ``config`` in this process until a signal (or ``supervisor``'s end of a pipe closing) stops it.

    Args:
        engines: model → engine (``engines.build_engines``).
        sockets: listening sockets to accept on (a worker's, bound by its parent); None binds ``config``'s.
        take_handed: a worker's intake of the connections other workers accepted for it
            (``workers.SharedListener.take_handed``): called with the loop and a protocol factory once the
            server listens, it returns what stops the intake, called as the listening sockets close.
        supervisor: a worker's pipe to its parent, which never writes to it: readable means the parent is gone.

    Returns:
        The exit status and, when the server could not start, why (for the command line's last word).
    """
    app = create_app(config, engines=engines, web_search=web_search)
    server = _Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level=config.log_level,
            log_config=logging_config(config.log_level, config.log_format),
            lifespan="on",
            http=api_http_protocol(
                config.head_timeout, max_head_bytes=config.max_head_bytes, max_headers=config.max_headers
            ),
            # WebSocket mode (http/websocket.py): upgrades go from the httptools protocol above to websockets'
            # sans-I/O implementation, which lets running responses end at shutdown; a message may be as large
            # as a request body.
            ws=ApiWebSocketProtocol,
            ws_max_size=config.max_body_bytes,
            timeout_graceful_shutdown=SHUTDOWN_BACKSTOP,  # after the grace (_Server.shutdown)
        ),
        on_listening,
        grace=config.shutdown_grace,
        app_server=app.state.server,
        take_handed=take_handed,
        supervisor=supervisor,
    )
    quiet = _QuietFailedStart(app.state.server)
    uvicorn_log = logging.getLogger("uvicorn.error")
    if config.log_level != "debug":
        uvicorn_log.addFilter(quiet)
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:
        end_by(signal.SIGINT)  # the SIGINT it shut down on, raised again by uvicorn: over, not failed
    except SystemExit:
        # uvicorn exits (status 3) when the lifespan fails; a failed engine check gets its own last word.
        if app.state.server.startup_error is None:
            raise
    finally:
        uvicorn_log.removeFilter(quiet)
    if app.state.server.startup_error is not None:
        return 1, startup_failure(app.state.server.startup_error)
    return (0 if server.started else 1), None


def startup_failure(error: Exception) -> str:
    """The one line a server that could not start ends with: what was tried, what failed, what to do."""
    if isinstance(error, StoreError):
        return f"the store cannot be used: {error}; check --store (and --data-dir), or see --log-level debug"
    hint = ""
    if isinstance(error, EngineUnavailable):
        hint = "; start the engine or correct --engine (without --engine the server uses its echo stand-in)"
    return f"the engine cannot serve: {error}{hint}"


class _QuietFailedStart(logging.Filter):
    """Drops uvicorn's lifespan traceback and its "Application startup failed" when the server's start failed in
    a way it says in one line itself (``startup_failure``); an unexpected failure keeps its traceback, and
    ``--log-level debug`` shows every one (this filter is not installed then)."""

    def __init__(self, server: Any) -> None:
        super().__init__()
        self._server = server

    def filter(self, record: logging.LogRecord) -> bool:
        if self._server.startup_error is None:
            return True
        message = record.getMessage()
        return not (message.startswith("Traceback") or message == "Application startup failed. Exiting.")
