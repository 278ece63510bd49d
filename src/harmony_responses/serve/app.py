"""The composition root: a ``Config`` → the engine, the store, the tools and the server → the ASGI app.

This is the one place that knows every package: it builds the ``run.Server`` from the configuration and
hands it to the HTTP layer (``http.build_app``), which reaches everything else through it.
"""

from __future__ import annotations

from starlette.applications import Starlette

from .. import tracing
from ..engine import Engine
from ..http import build_app
from ..http.hosts import is_loopback
from ..quotas import quotas_for
from ..request import configure_reasoning_key
from ..run import Prompting, Server, StoredResponses
from ..tokentrace import TraceOptions
from ..tools.browser import WebSearch, web_search_from_options
from ..tools.code_interpreter import ContainerManager
from ..tools.file_search import Embeddings
from .config import Config
from .engines import build_engines

__all__ = ["create_app", "web_search_from_config"]


def web_search_from_config(config: Config) -> WebSearch | None:
    """The configured web search backend (None: ``web_search`` tools are not offered); ValueError if invalid."""
    return web_search_from_options(
        backend=config.search_backend,
        search_dir=config.search_dir,
        base_url=config.search_base_url,
        api_key=config.search_api_key,
        api_url=config.search_api_url,
    )


def create_app(
    config: Config,
    *,
    engine: Engine | None = None,
    engines: dict[str, Engine] | None = None,
    web_search: WebSearch | None = None,
) -> Starlette:
    """The ASGI app serving ``config``.

    Args:
        config: the server's configuration.
        engine: an engine instance serving every model instead of the configured ones (tests pass a
            ``MockEngine``).
        engines: model → engine, as ``engines.build_engines(config)`` builds them (the command line builds
            them first, for its banner).
        web_search: the web search to use instead of the one ``config`` describes.

    Raises:
        ValueError: an engine spec is not valid (the message lists the valid forms).
    """
    if config.otel:
        tracing.configure()  # in each worker process: the exporter's thread is this process's
    if engine is not None:
        engines = dict.fromkeys(config.served_models, engine)
    server = Server(
        engines=engines if engines is not None else build_engines(config),
        stored=StoredResponses(config.store, data_dir=config.data_dir, retention=config.retention),
        sealer=configure_reasoning_key(config.secret_key),
        prompting=Prompting(
            context_window=config.context_window,
            current_date=config.current_date,
            knowledge_cutoff=config.knowledge_cutoff,
            reasoning_summaries=config.reasoning_summaries == "reasoning",
            constrain_function_arguments=config.constrain_function_arguments,
            constrain_recipients=config.constrain_recipients == "declared",
        ),
        containers=ContainerManager(
            limits=config.code_interpreter,
            unsafe=config.unsafe_code_interpreter,
            idle_seconds=config.container_idle_seconds,
        ),
        web_search=web_search if web_search is not None else web_search_from_config(config),
        mcp=config.mcp,
        trace=TraceOptions(every=config.trace, header=config.trace_header, max_bytes=config.trace_max_bytes),
        embeddings=Embeddings(config.embeddings, config.embeddings_model, api_key=config.embeddings_api_key)
        if config.embeddings
        else None,
    )
    return build_app(
        server,
        api_keys=(*config.api_keys, *(k.key for k in config.keys)),
        max_body_bytes=config.max_body_bytes,
        max_file_bytes=config.max_file_bytes,
        loopback_hosts=config.allowed_hosts if is_loopback(config.host) else None,
        body_timeout=config.body_timeout,
        quotas=quotas_for(config.keys, config.store, config.data_dir),
    )
