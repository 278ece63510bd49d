"""``harmony-responses serve``: flags (each with a ``HARMONY_RESPONSES_*`` environment twin) → uvicorn.

A flag on the command line wins over its environment variable, which wins over the default. Repeatable
flags (``--model``, ``--api-key``) take a comma-separated list in their variable. Once the socket is
listening the command prints where, which engine serves (the echo stand-in says it is not a model) and
which model names it answers to.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

import uvicorn

from ..engine import EngineOptions, engine_from_spec
from ..store import describe_store, parse_retention
from ..tools.browser import BACKENDS
from ..tools.code_interpreter import SandboxLimits
from ..tools.mcp import DEFAULT_MCP_TIMEOUT, McpOptions, load_mcp_config, parse_stdio_server
from .app import create_app, web_search_from_config
from .config import DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_BODY_BYTES, DEFAULT_MODELS, Config

__all__ = ["add_serve_arguments", "config_from_args", "serve"]

ENV_PREFIX = "HARMONY_RESPONSES_"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
# Young-generation collection threshold of a serving process (see _tune_gc).
GC_THRESHOLD = 50_000


def _env(name: str) -> str | None:
    value = os.environ.get(ENV_PREFIX + name)
    return value if value else None


def _env_list(name: str) -> list[str] | None:
    value = _env(name)
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _env_help(name: str) -> str:
    return f" (env {ENV_PREFIX}{name})"


# argparse applies ``type`` to string defaults too, so a bad environment variable gets the same clean
# error as a bad flag.
def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def _seconds_or_zero(text: str) -> float:
    return 0.0 if float(text) == 0 else _seconds(text)


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, got {text}")
    return value


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``serve``'s options to ``parser`` and make ``serve`` its handler."""
    add = parser.add_argument
    add("--host", default=_env("HOST") or "127.0.0.1", help="address to listen on" + _env_help("HOST"))
    add("--port", type=_port, default=_env("PORT") or "8000", help="port (0: any free one)" + _env_help("PORT"))
    add(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help=f"a model name to answer to; repeatable; the first is the default (default: "
        f"{', '.join(DEFAULT_MODELS)})" + _env_help("MODEL") + ", comma-separated",
    )
    add(
        "--engine",
        default=_env("ENGINE") or "echo",
        help="engine spec: 'echo' (a stand-in, not a model; the default), 'replay:PATH', 'vllm', 'sglang', "
        "'llamacpp', 'trtllm' (each optionally ':URL') or 'transformers:PATH'" + _env_help("ENGINE"),
    )
    add(
        "--engine-url",
        default=_env("ENGINE_URL"),
        metavar="URL",
        help="the HTTP engine's base URL (default: its usual local port)" + _env_help("ENGINE_URL"),
    )
    add(
        "--engine-model",
        default=_env("ENGINE_MODEL"),
        metavar="NAME",
        help="the engine's model name (default: the one it serves)" + _env_help("ENGINE_MODEL"),
    )
    add(
        "--engine-api-key",
        default=_env("ENGINE_API_KEY"),
        metavar="KEY",
        help="bearer token for an engine started with an API key" + _env_help("ENGINE_API_KEY"),
    )
    add(
        "--engine-connect-timeout",
        type=_seconds,
        default=_env("ENGINE_CONNECT_TIMEOUT") or str(EngineOptions.connect_timeout),
        metavar="SECONDS",
        help="bound on connecting to the engine" + _env_help("ENGINE_CONNECT_TIMEOUT"),
    )
    add(
        "--engine-first-token-timeout",
        type=_seconds,
        default=_env("ENGINE_FIRST_TOKEN_TIMEOUT") or str(EngineOptions.first_token_timeout),
        metavar="SECONDS",
        help="bound from sending a request to its first token" + _env_help("ENGINE_FIRST_TOKEN_TIMEOUT"),
    )
    add(
        "--engine-stall-timeout",
        type=_seconds,
        default=_env("ENGINE_STALL_TIMEOUT") or str(EngineOptions.stall_timeout),
        metavar="SECONDS",
        help="bound on the engine's silence mid-stream" + _env_help("ENGINE_STALL_TIMEOUT"),
    )
    add(
        "--engine-max-connections",
        type=_positive_int,
        default=_env("ENGINE_MAX_CONNECTIONS") or str(EngineOptions.max_connections),
        metavar="N",
        help="connection pool size: concurrent generations per engine" + _env_help("ENGINE_MAX_CONNECTIONS"),
    )
    add(
        "--engine-start-wait",
        type=_seconds_or_zero,
        default=_env("ENGINE_START_WAIT") or "0",
        metavar="SECONDS",
        help="keep retrying an unreachable engine at start for this long (0: fail at once)"
        + _env_help("ENGINE_START_WAIT"),
    )
    add(
        "--record",
        default=_env("RECORD"),
        metavar="PATH",
        help="append every engine call to PATH in the replay format ('replay:PATH' plays it back)"
        + _env_help("RECORD"),
    )
    add(
        "--api-key",
        action="append",
        dest="api_keys",
        metavar="KEY",
        help="accept this bearer token; repeatable; none: no authentication"
        + _env_help("API_KEY")
        + ", comma-separated",
    )
    add(
        "--log-level",
        choices=LOG_LEVELS,
        default=(_env("LOG_LEVEL") or "info").lower(),
        help="log level" + _env_help("LOG_LEVEL"),
    )
    add(
        "--context-window",
        type=_positive_int,
        default=_env("CONTEXT_WINDOW") or str(DEFAULT_CONTEXT_WINDOW),
        help="prompt plus output tokens the engine accepts" + _env_help("CONTEXT_WINDOW"),
    )
    add(
        "--max-body-bytes",
        type=_positive_int,
        default=_env("MAX_BODY_BYTES") or str(DEFAULT_MAX_BODY_BYTES),
        help="larger request bodies get 413" + _env_help("MAX_BODY_BYTES"),
    )
    add(
        "--current-date",
        default=_env("CURRENT_DATE"),
        metavar="YYYY-MM-DD",
        help="date written into every prompt (default: today, UTC)" + _env_help("CURRENT_DATE"),
    )
    add(
        "--knowledge-cutoff",
        default=_env("KNOWLEDGE_CUTOFF") or "2024-06",
        metavar="YYYY-MM",
        help="the model's knowledge cutoff, written into every prompt" + _env_help("KNOWLEDGE_CUTOFF"),
    )
    add(
        "--secret-key",
        default=_env("SECRET_KEY"),
        help="key for reasoning.encrypted_content blobs (default: random per process, so blobs do not "
        "survive a restart)" + _env_help("SECRET_KEY"),
    )
    add(
        "--mcp-allowed-hosts",
        default=_env("MCP_ALLOWED_HOSTS"),
        metavar="HOSTS",
        help="comma-separated hosts that request MCP server_urls may reach (example.com, *.example.com, "
        "host:port, *); default: any host, which lets every client make this server send requests to hosts "
        "only it can reach (SSRF)" + _env_help("MCP_ALLOWED_HOSTS"),
    )
    add(
        "--mcp-server",
        action="append",
        dest="mcp_servers",
        metavar="NAME=COMMAND",
        help="an MCP server started over stdio for requests that name it (server_url 'stdio:NAME'), e.g. "
        "--mcp-server 'files=npx -y @modelcontextprotocol/server-filesystem /srv/docs'; repeatable",
    )
    add(
        "--mcp-config",
        default=_env("MCP_CONFIG"),
        metavar="FILE",
        help='stdio MCP servers from a JSON file: {"mcpServers": {NAME: {"command", "args", "env", "cwd"}}}'
        + _env_help("MCP_CONFIG"),
    )
    add(
        "--mcp-timeout",
        type=float,
        default=_env("MCP_TIMEOUT") or str(DEFAULT_MCP_TIMEOUT),
        metavar="SECONDS",
        help="limit for connecting to an MCP server and listing its tools, and for each tool call"
        + _env_help("MCP_TIMEOUT"),
    )
    add(
        "--search-dir",
        default=_env("SEARCH_DIR"),
        metavar="PATH",
        help="folder of Markdown, HTML and text documents that web_search searches (a local SQLite FTS5 "
        "index, no network)" + _env_help("SEARCH_DIR"),
    )
    add(
        "--search-backend",
        choices=BACKENDS,
        default=_env("SEARCH_BACKEND"),
        help="web_search backend (default: local with --search-dir, else none: web_search is not offered to "
        "the model); exa reads its key from HARMONY_RESPONSES_SEARCH_API_KEY or EXA_API_KEY"
        + _env_help("SEARCH_BACKEND"),
    )
    add(
        "--search-base-url",
        default=_env("SEARCH_BASE_URL"),
        metavar="URL",
        help="URL prefix of the --search-dir documents (default: their file:// URLs)" + _env_help("SEARCH_BASE_URL"),
    )
    add(
        "--search-api-url",
        default=_env("SEARCH_API_URL"),
        metavar="URL",
        help="address of the online search backend's API (default: the service's own)" + _env_help("SEARCH_API_URL"),
    )
    add(
        "--code-timeout",
        type=_seconds,
        default=_env("CODE_TIMEOUT") or "60",
        metavar="SECONDS",
        help="code interpreter: wall-clock (and CPU) time limit per call" + _env_help("CODE_TIMEOUT"),
    )
    add(
        "--unsafe-code-interpreter",
        action="store_true",
        default=_env("UNSAFE_CODE_INTERPRETER") in ("1", "true", "yes"),
        help="run code_interpreter code WITHOUT a sandbox when bubblewrap is unavailable: the code can read "
        "the server's files and reach the network" + _env_help("UNSAFE_CODE_INTERPRETER"),
    )
    add(
        "--store",
        default=_env("STORE") or "sqlite",
        metavar="SPEC",
        help="where stored responses and conversations live: 'sqlite' (a file in --data-dir, the default), "
        "'sqlite:PATH', or a postgresql://user:password@host:port/database URL that several server processes "
        "may share" + _env_help("STORE"),
    )
    add(
        "--data-dir",
        default=_env("DATA_DIR"),
        metavar="DIR",
        help="folder of the SQLite store (default: $XDG_DATA_HOME/harmony-responses or "
        "~/.local/share/harmony-responses)" + _env_help("DATA_DIR"),
    )
    add(
        "--retention",
        type=parse_retention,
        default=_env("RETENTION") or "forever",
        metavar="AGE",
        help="delete stored responses and conversations older than AGE: a number with s, m, h, d or w "
        "(e.g. 7d), or 'forever' (the default)" + _env_help("RETENTION"),
    )
    parser.set_defaults(handler=serve)


def config_from_args(args: argparse.Namespace) -> Config:
    return Config(
        host=args.host,
        port=args.port,
        models=tuple(args.models or _env_list("MODEL") or DEFAULT_MODELS),
        engine=args.engine,
        engine_url=args.engine_url,
        engine_model=args.engine_model,
        engine_api_key=args.engine_api_key,
        engine_connect_timeout=args.engine_connect_timeout,
        engine_first_token_timeout=args.engine_first_token_timeout,
        engine_stall_timeout=args.engine_stall_timeout,
        engine_max_connections=args.engine_max_connections,
        engine_start_wait=args.engine_start_wait,
        record=args.record,
        api_keys=tuple(args.api_keys or _env_list("API_KEY") or ()),
        log_level=args.log_level,
        max_body_bytes=args.max_body_bytes,
        current_date=args.current_date,
        knowledge_cutoff=args.knowledge_cutoff,
        context_window=args.context_window,
        secret_key=args.secret_key,
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
        search_api_key=_env("SEARCH_API_KEY") or os.environ.get("EXA_API_KEY") or None,
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
    )


def banner(config: Config, engine_description: str, host: str, port: int, search: str | None = None) -> str:
    shown_host = f"[{host}]" if ":" in host else host
    lines = [
        f"harmony-responses: listening on http://{shown_host}:{port}/v1",
        f"  engine: {engine_description}",
        f"  models: {', '.join(config.models)} (default {config.default_model})",
        f"  auth:   {'bearer token required' if config.api_keys else 'none (no --api-key given)'}",
        f"  store:  {describe_store(config.store, config.data_dir, config.retention)}",
    ]
    if search is not None:
        lines.append(f"  search: {search}")
    return "\n".join(lines)


class _Server(uvicorn.Server):
    """uvicorn's server, calling back once its sockets listen (so the banner shows the real port)."""

    def __init__(self, config: uvicorn.Config, on_listening: Callable[[str, int], None]) -> None:
        super().__init__(config)
        self._on_listening = on_listening

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:
            _tune_gc()
            for server in self.servers:
                for sock in server.sockets:
                    host, port = sock.getsockname()[:2]
                    self._on_listening(host, port)
                    return


def _tune_gc() -> None:
    """Keep the garbage collector off the streaming path.

    A stream allocates a few container objects per token and frees them at once; CPython's default
    collection threshold (700 allocations) then runs a collection every few tokens per process, and each
    older-generation pass rescans everything alive: the vocabulary, the imported modules and every running
    response's state. With 64 streams that was a third of the server's CPU. Objects alive once the server
    has started are frozen (never scanned again), and young collections run every 50,000 allocations;
    reference cycles are still collected, just in larger, rarer passes.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 20)


def serve(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run the server until interrupted; 2 for a bad configuration."""
    out = out or sys.stdout
    try:
        config = config_from_args(args)
        engine = engine_from_spec(config.engine, config.engine_options)
        web_search = web_search_from_config(config)
    except (ValueError, AssertionError) as exc:
        print(f"harmony-responses serve: {exc}", file=sys.stderr)
        return 2
    level = "DEBUG" if config.log_level == "trace" else config.log_level.upper()
    logging.basicConfig(format="%(levelname)s:     %(name)s: %(message)s", level=level)
    app = create_app(config, engine=engine, web_search=web_search)

    def on_listening(host: str, port: int) -> None:
        search = web_search.describe() if web_search is not None else None
        print(banner(config, engine.describe(), host, port, search), file=out, flush=True)

    server = _Server(
        uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level, lifespan="on"),
        on_listening,
    )
    try:
        server.run()
    except SystemExit:
        # uvicorn exits (status 3) when the lifespan fails; a failed engine check gets its own last word.
        if app.state.startup_error is None:
            raise
    if app.state.startup_error is not None:
        print(f"harmony-responses serve: the engine cannot serve: {app.state.startup_error}", file=sys.stderr)
        return 1
    return 0 if server.started else 1
