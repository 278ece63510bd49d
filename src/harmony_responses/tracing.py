"""Distributed tracing with OpenTelemetry (``--otel``): the tracer, and the few calls the layers make.

Off by default. Until ``configure()`` runs (``serve --otel``, in every worker process), nothing here imports
OpenTelemetry: each call below is a function returning ``None`` or a shared null context, so the layers call
them unconditionally on paths run once per request or engine call (never per token or event).

``configure()`` installs the SDK's ``TracerProvider`` with a batching OTLP/HTTP exporter, configured by the
standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``,
``OTEL_BSP_*``, ...), and the W3C trace-context propagator (``traceparent``, ``tracestate``).

The spans (names operators' tooling can rely on):

- ``POST /v1/responses`` (any route: ``METHOD route``), kind SERVER, per request or WebSocket connection
  (``http/traced.py``): continues the client's ``traceparent``; attributes ``http.route``,
  ``http.response.status_code``, ``harmony.request_id``, and (``annotate_request``) the model and response id.
- ``websocket turn`` per ``response.create`` on a WebSocket, a child of its connection's span (the same
  attributes as a request's: model, response id, status, usage).
- ``start lane`` (waiting for the start lane), ``validate`` (reading the request), ``render`` (the prompt).
- ``response`` per response run (``run/loop.py``): model, response id, status, usage. A background
  response's run outlives the request: it stays its child (a child may end after its parent).
- ``engine call`` per engine request: time to first token, tokens, finish reason, replica; its context is the
  ``traceparent`` sent to the engine (``headers()``), so vLLM and SGLang started with their OTLP options join.
- ``tool <name>`` per built-in tool call, ``compaction``, ``store write`` (the store writer's batches, linked to
  the responses whose writes they hold: a batch has no single parent).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "annotate",
    "annotate_request",
    "child",
    "configure",
    "enabled",
    "end",
    "event",
    "headers",
    "links",
    "shutdown",
    "span",
    "start",
    "turn",
    "use",
]

_tracer: Any = None  # the SDK's tracer once configure() ran; None: tracing is off
_provider: Any = None
_NULL = contextlib.nullcontext()
# The span of the HTTP request or WebSocket connection being served (``http/traced.py``).
REQUEST_SPAN: contextvars.ContextVar[Any] = contextvars.ContextVar("harmony_responses_request_span", default=None)
INSTRUMENTATION = "harmony_responses"
SERVICE_NAME = "harmony-responses"  # the default service.name


INSTALL = "pip install 'harmony-responses[otel]'"


def available() -> bool:
    """Whether the SDK and the OTLP/HTTP exporter are installed (the ``otel`` extra)."""
    import importlib.util

    try:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
        )
    except ModuleNotFoundError:  # a parent package missing
        return False


def enabled() -> bool:
    return _tracer is not None


def configure(exporter: Any = None) -> None:
    """Turn tracing on in this process: the SDK's provider with a batching exporter (default: OTLP/HTTP,
    configured by the ``OTEL_*`` variables). Idempotent."""
    global _tracer, _provider
    if _tracer is not None:
        return
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; without a name they give, ours.
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    _provider = TracerProvider(resource=resource)
    _provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(_provider)
    _tracer = _provider.get_tracer(INSTRUMENTATION)


def shutdown() -> None:
    """Export what is left (the server is closing)."""
    if _provider is not None:
        _provider.shutdown()


def tracer() -> Any:
    return _tracer


def start(name: str, attributes: Mapping[str, Any] | None = None, *, links: Any = None) -> Any:
    """A span started under the current one (not made current), or None when tracing is off."""
    if _tracer is None:
        return None
    return _tracer.start_span(name, attributes=_clean(attributes), links=links)


def child(parent: Any, name: str, attributes: Mapping[str, Any] | None = None) -> Any:
    """A span started under ``parent`` (a span or None: then None)."""
    if parent is None or _tracer is None:
        return None
    from opentelemetry import trace

    return _tracer.start_span(name, context=trace.set_span_in_context(parent), attributes=_clean(attributes))


def links(spans: Iterable[Any]) -> list[Any]:
    """Links to these spans (None ones left out), for a span that has no single parent."""
    from opentelemetry.trace import Link

    return [Link(span.get_span_context()) for span in spans if span is not None]


def end(span: Any, attributes: Mapping[str, Any] | None = None, *, error: str | None = None) -> None:
    """End ``span`` (None: nothing), with these attributes, failed with ``error`` when given."""
    if span is None or not span.is_recording():
        return
    if attributes:
        span.set_attributes(_clean(attributes))
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


def annotate(span: Any, attributes: Mapping[str, Any]) -> None:
    if span is not None and span.is_recording():
        span.set_attributes(_clean(attributes))


def event(span: Any, name: str, attributes: Mapping[str, Any] | None = None) -> None:
    if span is not None and span.is_recording():
        span.add_event(name, _clean(attributes))


def span(name: str, attributes: Mapping[str, Any] | None = None) -> Any:
    """A context manager: a span current inside it (an exception fails it), or a null context when off."""
    if _tracer is None:
        return _NULL
    return _tracer.start_as_current_span(name, attributes=_clean(attributes))


@contextlib.contextmanager
def _turn(name: str, attributes: Mapping[str, Any] | None) -> Iterator[None]:
    with _tracer.start_as_current_span(name, attributes=_clean(attributes)) as span:
        token = REQUEST_SPAN.set(span)
        try:
            yield
        finally:
            REQUEST_SPAN.reset(token)


def turn(name: str, attributes: Mapping[str, Any] | None = None) -> Any:
    """``span``, which ``annotate_request`` annotates inside it: a WebSocket turn, under its connection's span."""
    if _tracer is None:
        return _NULL
    return _turn(name, attributes)


@contextlib.contextmanager
def _using(span: Any) -> Iterator[None]:
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        context.detach(token)


def use(span: Any) -> Any:
    """A context manager making ``span`` current inside it (None: a null context)."""
    if span is None:
        return _NULL
    return _using(span)


def current() -> Any:
    """The current span, or None when tracing is off."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    return trace.get_current_span()


def headers() -> bytes:
    """The current context as HTTP header lines (``traceparent: …\\r\\n``, ``tracestate``), or b"" when off."""
    if _tracer is None:
        return b""
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return "".join(f"{name}: {value}\r\n" for name, value in carrier.items()).encode("latin-1")


def annotate_request(attributes: Mapping[str, Any]) -> None:
    """Attributes of the request's span (``http/traced.py``), if it is still open."""
    if _tracer is None:
        return
    annotate(REQUEST_SPAN.get(), attributes)


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Without the None values (OpenTelemetry refuses them)."""
    if not attributes:
        return None
    return {k: v for k, v in attributes.items() if v is not None}
