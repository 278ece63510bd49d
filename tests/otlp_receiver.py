"""An OTLP/HTTP trace receiver for tests: what an OpenTelemetry Collector receives, decoded.

``receiver()`` starts an HTTP server on 127.0.0.1 (a thread of the test process) answering ``POST /v1/traces``
as a collector does; each export is decoded with ``opentelemetry-proto`` into ``Span`` records, whoever sent it:
our server under ``--otel`` (the SDK's OTLP/HTTP exporter) or an engine exporting its own spans (vLLM's
``--otlp-traces-endpoint`` with ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``). ``Receiver.wait_for``
blocks until a condition holds of the spans received (exporters send in batches, when they will). Needs
``opentelemetry-proto``: import it after ``pytest.importorskip``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_service

__all__ = ["Receiver", "Span", "children", "named", "receiver"]


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent: str
    attributes: dict[str, Any]
    links: list[str]
    service: str
    resource: dict[str, Any] = field(default_factory=dict)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


@dataclass
class Receiver:
    """The spans received so far; ``url`` is the endpoint's root (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""

    url: str = ""
    spans: list[Span] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def traces_url(self) -> str:
        """The full traces endpoint (what an exporter given an explicit endpoint posts to as is)."""
        return self.url + "/v1/traces"

    def received(self, body: bytes) -> None:
        request = trace_service.ExportTraceServiceRequest.FromString(body)
        with self.changed:
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for s in scope_spans.spans:
                        self.spans.append(
                            Span(
                                name=s.name,
                                trace_id=s.trace_id.hex(),
                                span_id=s.span_id.hex(),
                                parent=s.parent_span_id.hex(),
                                attributes={a.key: _value(a.value) for a in s.attributes},
                                links=[link.span_id.hex() for link in s.links],
                                service=str(resource.get("service.name")),
                                resource=resource,
                            )
                        )
            self.changed.notify_all()

    def wait_for(self, done: Callable[[list[Span]], bool], timeout: float = 60) -> list[Span]:
        """The spans received once ``done`` holds of them (the exporter sends in batches, when it will)."""
        with self.changed:
            assert self.changed.wait_for(lambda: done(self.spans), timeout), [
                (s.name, s.service, s.attributes) for s in self.spans
            ]
            return list(self.spans)


@contextlib.contextmanager
def receiver() -> Iterator[Receiver]:
    """A running receiver, shut down on the way out."""
    collected = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            assert self.path == "/v1/traces" and self.headers["content-type"] == "application/x-protobuf"
            collected.received(body)
            answer = trace_service.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    collected.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield collected
    finally:
        server.shutdown()
        server.server_close()


def named(spans: list[Span], name: str, **attributes: Any) -> list[Span]:
    """The spans called ``name`` whose attributes include ``attributes``."""
    return [s for s in spans if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())]


def children(spans: list[Span], parent: Span) -> dict[str, Span]:
    """``parent``'s children by name."""
    return {s.name: s for s in spans if s.parent == parent.span_id and s.trace_id == parent.trace_id}
