"""``serve --otel``: the spans a real server process exports over OTLP/HTTP, as a collector receives them.

The collector is an HTTP server in the test process decoding each export with ``opentelemetry-proto`` (what
the SDK's OTLP/HTTP exporter sends an OpenTelemetry Collector); the engine is the HTTP fake of vLLM, which
records the headers of each generate request, so the ``traceparent`` it was sent is checked against the
engine call's span.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
from openai import OpenAI
from tests.engine.fakes import Scenario, VLLMFake, harmony, run_fake
from tests.reliability.server_process import server_process
from websockets.sync.client import connect

pytest.importorskip("opentelemetry.sdk")
trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent: str
    attributes: dict[str, Any]
    links: list[str]
    service: str


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


@dataclass
class Collector:
    url: str = ""
    spans: list[Span] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

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
                            )
                        )
            self.changed.notify_all()

    def wait_for(self, done: Callable[[list[Span]], bool], timeout: float = 60) -> list[Span]:
        """The spans received once ``done`` holds of them (the exporter sends in batches, when it will)."""
        with self.changed:
            assert self.changed.wait_for(lambda: done(self.spans), timeout), [
                (s.name, s.attributes) for s in self.spans
            ]
            return list(self.spans)


@contextlib.contextmanager
def collector() -> Iterator[Collector]:
    collected = Collector()

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


def _named(spans: list[Span], name: str, **attributes: Any) -> list[Span]:
    return [s for s in spans if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())]


def _children(spans: list[Span], parent: Span) -> dict[str, Span]:
    return {s.name: s for s in spans if s.parent == parent.span_id and s.trace_id == parent.trace_id}


def test_a_streamed_tool_loop_and_its_background_answer_are_traced_into_the_engine() -> None:
    # The server runs the tool search (a built-in tool) between two engine calls; the model then calls the function
    # it loaded, and the client's function output is answered in the background.
    search = harmony(
        '<|channel|>commentary to=functions.tool_search <|constrain|>json<|message|>{"query": "weather"}<|call|>'
    )
    call = harmony(
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    )
    answer = harmony("<|channel|>final<|message|>Sunny in Paris.<|return|>")
    tools: Any = [{"type": "tool_search"}, {**WEATHER, "defer_loading": True}]
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
        "OTEL_SERVICE_NAME": "gateway-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # ms: export soon (the default is 5 s)
    }
    with (
        collector() as otlp,
        run_fake(VLLMFake(Scenario(tokens=search), Scenario(tokens=call), Scenario(tokens=answer))) as fake,
    ):
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp.url
        with server_process(["--engine", "vllm", "--engine-url", fake.url, "--otel"], env=env) as server:
            client = OpenAI(base_url=f"{server.root}/v1", api_key="unused", max_retries=0)
            model = client.models.list().data[0].id
            # 1. Streamed, continuing the client's trace: the model calls the function.
            events = list(
                client.responses.create(
                    model=model,
                    input="Weather in Paris?",
                    tools=tools,
                    stream=True,
                    extra_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "tracestate": "k=v"},
                )
            )
            first = events[-1].response  # type: ignore[union-attr]
            assert [item.type for item in first.output] == ["tool_search_call", "tool_search_output", "function_call"]
            function_call = first.output[-1]
            # 2. The tool loop's next turn, in the background: its run outlives the request that started it.
            queued = client.responses.create(
                model=model,
                previous_response_id=first.id,
                input=[{"type": "function_call_output", "call_id": function_call.call_id, "output": "sunny"}],
                tools=tools,
                background=True,
            )
            done = list(client.responses.retrieve(queued.id, stream=True))[-1].response  # type: ignore[union-attr]
            assert done.status == "completed" and done.output_text == "Sunny in Paris."

            def complete(spans: list[Span]) -> bool:
                runs = {s.attributes.get("harmony.response_id"): s for s in _named(spans, "response")}
                return (
                    queued.id in runs
                    and first.id in runs
                    and len(_named(spans, "engine call")) == 3
                    and any(runs[queued.id].span_id in s.links for s in _named(spans, "store write"))
                )

            spans = otlp.wait_for(complete)

    # The first request continues the client's trace; its parts are its children.
    (request,) = _named(spans, "POST /v1/responses", **{"harmony.response_id": first.id})
    assert (request.trace_id, request.parent) == (CLIENT_TRACE, CLIENT_SPAN)
    assert request.service == "gateway-under-test"
    assert request.attributes["http.route"] == "/v1/responses"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["gen_ai.request.model"] == model
    assert request.attributes["harmony.request_id"].startswith("req_")
    assert request.attributes["harmony.response.status"] == "completed"
    assert request.attributes["gen_ai.usage.output_tokens"] == first.usage.output_tokens  # type: ignore[union-attr]
    parts = _children(spans, request)
    assert {"start lane", "validate", "render", "response"} <= set(parts)
    run = parts["response"]
    assert run.attributes["harmony.response.status"] == "completed"
    assert run.attributes["harmony.tool_calls"] == 0  # (a tool search is not counted against max_tool_calls)
    assert run.attributes["gen_ai.usage.input_tokens"] == first.usage.input_tokens  # type: ignore[union-attr]
    in_run = [s for s in spans if s.parent == run.span_id]
    assert [s.name for s in in_run] == ["engine call", "tool tool_search", "engine call"]  # in the order they ended
    searched, _, called = in_run
    assert searched.attributes["gen_ai.usage.output_tokens"] == len(search)
    assert called.attributes["gen_ai.usage.output_tokens"] == len(call)
    assert called.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert all(s.attributes["harmony.time_to_first_token"] > 0 for s in (searched, called))
    # Each engine request was sent its engine call's context, and the client's tracestate.
    for sent, engine_call in zip(fake.headers[:2], (searched, called), strict=True):
        assert sent["traceparent"] == f"00-{CLIENT_TRACE}-{engine_call.span_id}-01"
        assert sent["tracestate"] == "k=v"

    # The background response: a trace of its own (the client sent none), its run a child of its request.
    (background,) = _named(spans, "POST /v1/responses", **{"harmony.response_id": queued.id})
    assert background.trace_id != CLIENT_TRACE and background.parent == ""
    bg_run = _children(spans, background)["response"]
    assert bg_run.attributes["harmony.response.status"] == "completed"
    bg_call = _children(spans, bg_run)["engine call"]
    version, trace_id, parent, flags = fake.headers[2]["traceparent"].split("-")
    assert (version, trace_id, parent) == ("00", background.trace_id, bg_call.span_id)
    assert int(flags, 16) & 1  # sampled (the SDK also sets W3C's random-trace-id flag here: 03)
    # The store's writes are batches of many responses': linked to the runs, not children of one.
    assert any(bg_run.span_id in s.links and s.parent == "" for s in _named(spans, "store write"))


def test_without_otel_the_engine_gets_no_traceparent() -> None:
    with run_fake(VLLMFake()) as fake, server_process(["--engine", "vllm", "--engine-url", fake.url]) as server:
        client = OpenAI(base_url=f"{server.root}/v1", api_key="unused", max_retries=0)
        model = client.models.list().data[0].id
        client.responses.create(
            model=model, input="hi", extra_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
        )
    assert len(fake.headers) == 1 and "traceparent" not in fake.headers[0]


def test_websocket_turns_are_spans_under_the_connection_that_carried_them() -> None:
    env = {"OTEL_BSP_SCHEDULE_DELAY": "50"}
    with collector() as otlp, run_fake(VLLMFake()) as fake:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp.url
        with server_process(["--engine", "vllm", "--engine-url", fake.url, "--otel"], env=env) as server:
            model = OpenAI(base_url=f"{server.root}/v1", api_key="unused").models.list().data[0].id
            ids = []
            url = f"ws://127.0.0.1:{server.port}/v1/responses"
            traceparent = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
            with connect(url, additional_headers=traceparent) as socket:
                for text in ("Hi", "Again"):
                    socket.send(orjson.dumps({"type": "response.create", "model": model, "input": text}).decode())
                    events: list[dict[str, Any]] = []
                    while not events or events[-1]["type"] != "response.completed":
                        events.append(orjson.loads(socket.recv(timeout=60)))
                    ids.append(events[-1]["response"]["id"])
            spans = otlp.wait_for(lambda spans: len(_named(spans, "WEBSOCKET /v1/responses")) == 1)
    (connection,) = _named(spans, "WEBSOCKET /v1/responses")
    assert (connection.trace_id, connection.parent) == (CLIENT_TRACE, CLIENT_SPAN)
    assert connection.attributes["http.response.status_code"] == 101
    turns = [s for s in _named(spans, "websocket turn") if s.parent == connection.span_id]
    assert [t.attributes["harmony.response_id"] for t in turns] == ids
    for turn, sent in zip(turns, fake.headers, strict=True):
        assert turn.attributes["harmony.response.status"] == "completed"
        engine_call = _children(spans, _children(spans, turn)["response"])["engine call"]
        assert sent["traceparent"] == f"00-{CLIENT_TRACE}-{engine_call.span_id}-01"
