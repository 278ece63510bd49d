"""``serve --otel``: the spans a real server process exports over OTLP/HTTP, as a collector receives them.

The collector is an HTTP server in the test process (``tests/otlp_receiver.py``) decoding each export with
``opentelemetry-proto`` (what the SDK's OTLP/HTTP exporter sends an OpenTelemetry Collector); the engine is
the HTTP fake of vLLM, which records the headers of each generate request, so the ``traceparent`` it was sent
is checked against the engine call's span.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai import OpenAI
from websockets.sync.client import connect

from engine.fakes import Scenario, VLLMFake, harmony, run_fake
from reliability.server_process import server_process

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

# (after the skips: the receiver needs opentelemetry-proto)
from otlp_receiver import Span, children, named, receiver

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


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
        receiver() as otlp,
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
                runs = {s.attributes.get("harmony.response_id"): s for s in named(spans, "response")}
                return (
                    queued.id in runs
                    and first.id in runs
                    and len(named(spans, "engine call")) == 3
                    and any(runs[queued.id].span_id in s.links for s in named(spans, "store write"))
                )

            spans = otlp.wait_for(complete)

    # The first request continues the client's trace; its parts are its children.
    (request,) = named(spans, "POST /v1/responses", **{"harmony.response_id": first.id})
    assert (request.trace_id, request.parent) == (CLIENT_TRACE, CLIENT_SPAN)
    assert request.service == "gateway-under-test"
    assert request.attributes["http.route"] == "/v1/responses"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["gen_ai.request.model"] == model
    assert request.attributes["harmony.request_id"].startswith("req_")
    assert request.attributes["harmony.response.status"] == "completed"
    assert request.attributes["gen_ai.usage.output_tokens"] == first.usage.output_tokens  # type: ignore[union-attr]
    parts = children(spans, request)
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
    (background,) = named(spans, "POST /v1/responses", **{"harmony.response_id": queued.id})
    assert background.trace_id != CLIENT_TRACE and background.parent == ""
    bg_run = children(spans, background)["response"]
    assert bg_run.attributes["harmony.response.status"] == "completed"
    bg_call = children(spans, bg_run)["engine call"]
    version, trace_id, parent, flags = fake.headers[2]["traceparent"].split("-")
    assert (version, trace_id, parent) == ("00", background.trace_id, bg_call.span_id)
    assert int(flags, 16) & 1  # sampled (the SDK also sets W3C's random-trace-id flag here: 03)
    # The store's writes are batches of many responses': linked to the runs, not children of one.
    assert any(bg_run.span_id in s.links and s.parent == "" for s in named(spans, "store write"))


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
    with receiver() as otlp, run_fake(VLLMFake()) as fake:
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
            spans = otlp.wait_for(lambda spans: len(named(spans, "WEBSOCKET /v1/responses")) == 1)
    (connection,) = named(spans, "WEBSOCKET /v1/responses")
    assert (connection.trace_id, connection.parent) == (CLIENT_TRACE, CLIENT_SPAN)
    assert connection.attributes["http.response.status_code"] == 101
    turns = [s for s in named(spans, "websocket turn") if s.parent == connection.span_id]
    assert [t.attributes["harmony.response_id"] for t in turns] == ids
    for turn, sent in zip(turns, fake.headers, strict=True):
        assert turn.attributes["harmony.response.status"] == "completed"
        engine_call = children(spans, children(spans, turn)["response"])["engine call"]
        assert sent["traceparent"] == f"00-{CLIENT_TRACE}-{engine_call.span_id}-01"
