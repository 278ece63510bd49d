"""The server's configuration: one keyword-only value class, filled by the CLI from ``options.OPTIONS``."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine import EngineOptions
from ..http.connection import MAX_HEAD_BYTES, MAX_HEADERS
from ..http.files import DEFAULT_MAX_FILE_BYTES
from ..quotas import KeyLimits
from ..tokentrace import DEFAULT_MAX_BYTES as DEFAULT_TRACE_BYTES
from ..tools.code_interpreter import SandboxLimits
from ..tools.mcp import McpOptions
from .options import DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_BODY_BYTES, DEFAULT_MODELS

__all__ = ["DEFAULT_CONTEXT_WINDOW", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MODELS", "Config"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """Everything ``create_app`` needs.

    Args:
        host, port: where ``serve`` listens (the app itself does not use them).
        workers: how many server processes ``serve`` runs on that port (``serve/workers.py``); each builds
            its own app from this configuration, and they share the store (and so the sealing key).
        models: model names the server answers to, served by ``engine`` unless ``model_engines`` binds
            them; ``served_models`` adds the bound names. A request for any other name gets 404
            ``model_not_found``.
        engine: the engine spec serving every model ``model_engines`` does not bind (``echo``,
            ``replay:PATH``, ``vllm[:URL]``, ``sglang[:URL]``, ``llamacpp[:URL]``, ``trtllm[:URL]``,
            ``transformers:PATH``; see ``harmony_responses.engine``); None: none (every model is bound).
        model_engines: ``(model name, engine spec)`` pairs (``--engine NAME=SPEC``); a name given several
            times is served by all of its engines as replicas (``engine.ReplicaSet``).
        engine_url, engine_model, engine_api_key, engine_connect_timeout, engine_first_token_timeout,
        engine_stall_timeout, engine_max_connections, engine_start_wait, engine_priority, record: the engine's
            ``EngineOptions`` (``engine/_options.py`` says what each means).
        api_keys: accepted bearer tokens; empty means no authentication.
        keys: the config file's ``[[keys]]``: more accepted keys, each with its limits and tiers (``quotas``).
        allowed_hosts: on a loopback ``host``, the ``Host`` names answered besides loopback ones (``*``: any).
        log_level: uvicorn's and our loggers' level.
        log_format: ``text`` or ``json`` lines (``logs.py``).
        max_body_bytes: larger request bodies get 413.
        max_file_bytes: larger uploads to ``/v1/files`` get 413.
        head_timeout, body_timeout: seconds a client may take to send a request's headers (then the
            connection is closed) and its body (then 408).
        max_head_bytes, max_headers: a request's head larger than this, or with more header fields, gets 431
            and its connection is closed.
        shutdown_grace: on SIGTERM, seconds running responses may go on before they are ended, failed.
        current_date: ``YYYY-MM-DD`` for the system message; None uses today's UTC date per request.
            Fixing it makes prompts (and prefix caches, tests) reproducible (pitfalls.md #63).
        knowledge_cutoff: the model's knowledge cutoff, written into the system message.
        context_window: prompt plus output tokens the engine accepts; ``truncation`` works against it.
        secret_key: the key ``reasoning.encrypted_content`` blobs are sealed with. None: the store's key,
            generated at the first start and kept in the store, so that every process sharing the store
            seals and opens with the same key (``run.Server.start``).
        reasoning_summaries: what a request asking for ``reasoning.summary`` gets: ``reasoning`` (each
            reasoning item's own text, streamed as its summary: gpt-oss writes no summaries) or ``none``
            (``summary: []``, as for a model without summaries).
        constrain_function_arguments: what a non-strict function's call is held to on engines that
            constrain calls: ``json`` (one JSON object), ``schema`` (its schema, as if strict, where a
            grammar can hold it) or ``off``.
        constrain_recipients: ``declared`` holds a header's recipient to the declared tools on engines that
            constrain calls (none under ``tool_choice: "none"``); ``off`` takes it as written.
        store: where stored responses and conversations live (``harmony_responses.store``): ``sqlite`` (a
            file in ``data_dir``, the default), ``sqlite:PATH``, or a ``postgresql://…`` URL that several
            server processes may share.
        data_dir: the SQLite store's folder; None: ``$HARMONY_RESPONSES_DATA_DIR``, else
            ``$XDG_DATA_HOME/harmony-responses`` or ``~/.local/share/harmony-responses``.
        retention: seconds after which stored responses and conversations are deleted; None keeps them.
        mcp: remote MCP (``tools/mcp``): the hosts MCP URLs may reach (default: public addresses only), the
            stdio servers requests may name (``stdio:NAME``), and the timeout for listing and calls.
        code_interpreter: the code interpreter sandbox's limits (time per call, memory, processes, output).
        unsafe_code_interpreter: run code without bubblewrap when it is unavailable (no isolation at all).
        container_idle_seconds: a code interpreter container expires after this long without a call.
        trace, trace_header, trace_max_bytes: per-token traces (``tokentrace``): of every stored response, of
            those whose request asks (``x-harmony-trace: 1``), and how large one may grow.
        otel: export OpenTelemetry traces (``harmony_responses.tracing``), configured by the ``OTEL_*`` variables.
        search_backend, search_dir, search_base_url, search_api_url, search_api_key: web search
            (``tools/browser``): the backend (``local``, the default when ``search_dir`` is set, or ``exa``),
            the local index's folder and the URL prefix of its documents (None: ``file://``), the online
            backend's address and key. No backend: ``web_search`` tools are accepted but not offered.
        embeddings, embeddings_model, embeddings_api_key: file_search's hybrid ranking: the ``/v1/embeddings``
            server (None: full text only), the model name sent to it (None: the first it lists) and its key.
    """

    host: str = "127.0.0.1"
    port: int = 8400
    workers: int = 1
    models: tuple[str, ...] = DEFAULT_MODELS
    engine: str | None = "echo"
    model_engines: tuple[tuple[str, str], ...] = ()
    engine_url: str | None = None
    engine_model: str | None = None
    engine_api_key: str | None = field(default=None, repr=False)
    engine_connect_timeout: float = EngineOptions.connect_timeout
    engine_first_token_timeout: float = EngineOptions.first_token_timeout
    engine_stall_timeout: float = EngineOptions.stall_timeout
    engine_max_connections: int = EngineOptions.max_connections
    engine_start_wait: float = EngineOptions.start_wait
    engine_priority: bool = EngineOptions.priority
    record: str | None = None
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    keys: tuple[KeyLimits, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    log_level: str = "info"
    log_format: str = "text"
    trace: bool = False
    trace_header: bool = False
    trace_max_bytes: int = DEFAULT_TRACE_BYTES
    otel: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    head_timeout: float = 20.0
    max_head_bytes: int = MAX_HEAD_BYTES
    max_headers: int = MAX_HEADERS
    body_timeout: float = 60.0
    shutdown_grace: float = 10.0
    current_date: str | None = None
    knowledge_cutoff: str = "2024-06"
    context_window: int = DEFAULT_CONTEXT_WINDOW
    secret_key: str | None = field(default=None, repr=False)
    reasoning_summaries: str = "reasoning"
    constrain_function_arguments: str = "json"
    constrain_recipients: str = "declared"
    store: str = "sqlite"
    data_dir: str | None = None
    retention: float | None = None
    mcp: McpOptions = field(default_factory=McpOptions)
    code_interpreter: SandboxLimits = field(default_factory=SandboxLimits)
    unsafe_code_interpreter: bool = False
    container_idle_seconds: float = 20 * 60
    search_backend: str | None = None
    search_dir: str | None = None
    search_base_url: str | None = None
    search_api_url: str | None = None
    search_api_key: str | None = field(default=None, repr=False)
    embeddings: str | None = None
    embeddings_model: str | None = None
    embeddings_api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Tuples, not lists: the value class is frozen and hashable all the way down.
        object.__setattr__(self, "models", tuple(self.models))
        object.__setattr__(self, "model_engines", tuple((str(n), str(e)) for n, e in self.model_engines))
        object.__setattr__(self, "api_keys", tuple(self.api_keys))
        object.__setattr__(self, "keys", tuple(self.keys))
        object.__setattr__(self, "allowed_hosts", tuple(self.allowed_hosts))
        assert self.models or self.model_engines, "Config.models needs at least one model name"
        assert all(isinstance(m, str) and m for m in self.models), "model names must be non-empty strings"
        assert all(name and spec for name, spec in self.model_engines), "--engine NAME=SPEC needs both"
        bound = {name for name, _ in self.model_engines}
        unserved = [m for m in self.models if m not in bound]
        if self.engine is None and unserved:
            raise ValueError(
                f"no engine serves {', '.join(unserved)}: bind it with --engine {unserved[0]}=SPEC, or add a plain "
                "--engine SPEC for every model not bound"
            )
        assert self.max_body_bytes > 0, "max_body_bytes must be positive"
        assert self.max_file_bytes > 0, "max_file_bytes must be positive"
        assert self.context_window > 0, "context_window must be positive"
        assert self.workers > 0, "workers must be positive"

    @property
    def served_models(self) -> tuple[str, ...]:
        """Every model name answered to: ``models``, then the names only ``model_engines`` binds."""
        return tuple(dict.fromkeys([*self.models, *(name for name, _ in self.model_engines)]))

    def engine_specs(self, model: str) -> tuple[str, ...]:
        """The engine specs serving ``model``: its bound ones (replicas), else the plain ``engine``."""
        bound = tuple(spec for name, spec in self.model_engines if name == model)
        return bound or ((self.engine,) if self.engine is not None else ())

    @property
    def default_model(self) -> str:
        return self.served_models[0]

    @property
    def engine_options(self) -> EngineOptions:
        return EngineOptions(
            url=self.engine_url,
            model=self.engine_model,
            api_key=self.engine_api_key,
            connect_timeout=self.engine_connect_timeout,
            first_token_timeout=self.engine_first_token_timeout,
            stall_timeout=self.engine_stall_timeout,
            max_connections=self.engine_max_connections,
            start_wait=self.engine_start_wait,
            priority=self.engine_priority,
            record=self.record,
        )
