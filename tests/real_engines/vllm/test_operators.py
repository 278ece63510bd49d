"""Operators' features (#28) against vLLM 0.33's own server: its spans join our traces, its scheduler runs
``service_tier: priority`` before ``flex``.

One vLLM server of its own for this module, started with ``--otlp-traces-endpoint`` (OTLP/HTTP, to a
receiver in this process: ``tests/otlp_receiver.py``), ``--scheduling-policy priority`` and
``--max-num-seqs 1`` (one request runs at a time, the others wait in vLLM's queue); our server in front of
it with ``--otel`` (exporting to the same receiver) and ``--engine-priority`` (a response's tier sent as
vLLM's ``priority``: lower runs earlier). The session's three vLLM servers are not needed here
(``early_gateway`` is overridden): running this module alone starts one vLLM, not four.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..gateway import Gateway, start_gateway
from .conftest import VLLM, VLLM_START_TIMEOUT

pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

# (after the skip: the receiver needs opentelemetry-proto)
from otlp_receiver import Receiver, Span, children, named, receiver

MODEL = "gpt-oss-20b"
VLLM_SERVICE = "vllm-under-test"
GATEWAY_SERVICE = "gateway-under-test"
# What vLLM's API server exports for each request it finished (vllm/v1/engine/output_processor.py).
VLLM_REQUEST_SPAN = "llm_request"
WAIT = 120.0  # seconds a condition may take on a loaded two-core machine


def final(text: str) -> str:
    return f"<|channel|>final<|message|>{text}<|return|>"


def wait_for(condition: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what}: not met in {timeout:g} s"
        time.sleep(0.05)
    return value


@pytest.fixture(scope="module")
def early_gateway() -> None:
    """Overrides the conftest's autouse fixture, which would start the session's three vLLM servers."""
    return None


@pytest.fixture(scope="module")
def otlp() -> Iterator[Receiver]:
    with receiver() as collected:
        yield collected


@pytest.fixture(scope="module")
def engine(otlp: Receiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLM]:
    server = VLLM(
        "operators",
        [
            "--otlp-traces-endpoint",
            otlp.traces_url,
            "--scheduling-policy",
            "priority",
            "--max-num-seqs",
            "1",
        ],
        tmp_path_factory.mktemp("vllm-operators"),
        env={
            # vLLM's exporter speaks gRPC unless told otherwise; given an endpoint, it posts to it as is.
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": VLLM_SERVICE,
            "OTEL_BSP_SCHEDULE_DELAY": "50",  # ms: export soon (the default is 5 s)
        },
    )
    server.start()
    try:
        server.wait_ready(VLLM_START_TIMEOUT)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gateway(engine: VLLM, otlp: Receiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    g = start_gateway(
        f"vllm:{engine.url}",
        args=["--otel", "--engine-priority", "--current-date", "2026-12-01"],
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
            "OTEL_SERVICE_NAME": GATEWAY_SERVICE,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        },
        log_dir=tmp_path_factory.mktemp("gw-operators"),
    )
    yield g
    g.stop()


def test_vllm_joins_the_trace_of_our_engine_call(gateway: Gateway, engine: VLLM, otlp: Receiver) -> None:
    assert engine.script is not None
    ids = engine.script.say("case-traced", final("Traced through."))
    with gateway.client() as client:
        events = list(client.responses.create(model=MODEL, input="case-traced: follow me", stream=True))
    response = events[-1].response  # type: ignore[union-attr]
    assert response.status == "completed" and response.output_text == "Traced through."

    def ours(spans: list[Span]) -> Span | None:
        found = named(spans, "POST /v1/responses", **{"harmony.response_id": response.id})
        return found[0] if found else None

    def joined(spans: list[Span]) -> bool:
        request = ours(spans)
        return (
            request is not None
            and any(s.name == "engine call" and s.trace_id == request.trace_id for s in spans)
            and any(s.name == VLLM_REQUEST_SPAN and s.trace_id == request.trace_id for s in spans)
        )

    spans = otlp.wait_for(joined, timeout=WAIT)
    request = ours(spans)
    assert request is not None and request.service == GATEWAY_SERVICE and request.parent == ""
    run = children(spans, request)["response"]
    (engine_call,) = [s for s in spans if s.name == "engine call" and s.parent == run.span_id]
    (vllm_span,) = [s for s in named(spans, VLLM_REQUEST_SPAN) if s.trace_id == request.trace_id]
    # vLLM's span continues the traceparent our engine call sent: same trace, our engine call its parent.
    assert vllm_span.parent == engine_call.span_id
    assert vllm_span.service == VLLM_SERVICE
    # And it is the same request (vLLM's id for it is made of ours), counted alike on both sides.
    assert response.id in vllm_span.attributes["gen_ai.request.id"]
    assert vllm_span.attributes["gen_ai.usage.completion_tokens"] == len(ids)
    assert engine_call.attributes["gen_ai.usage.output_tokens"] == len(ids)
    assert response.usage is not None
    assert vllm_span.attributes["gen_ai.usage.prompt_tokens"] == response.usage.input_tokens
    # No other vLLM request span landed in our trace.
    assert [s.name for s in spans if s.trace_id == request.trace_id and s.service == VLLM_SERVICE] == [
        VLLM_REQUEST_SPAN
    ]


_WAITING = re.compile(r"^vllm:num_requests_waiting\{[^}]*\}\s+([0-9.eE+-]+)$", re.MULTILINE)


def waiting(engine: VLLM) -> int:
    """Requests in vLLM's waiting queue, as its /metrics reports it (updated at each engine step)."""
    text = httpx.get(engine.url + "/metrics", timeout=10).text
    return int(sum(float(v) for v in _WAITING.findall(text)))


def test_priority_overtakes_flex_in_vllms_queue(gateway: Gateway, engine: VLLM, tmp_path: Path) -> None:
    assert engine.script is not None
    hold = tmp_path / "hold"
    hold.touch()
    engine.script.say("case-occupy", final("Held the slot."), hold=hold)
    engine.script.say("case-queued-flex", final("Flex, later."))
    engine.script.say("case-queued-priority", final("Priority, first."))
    with gateway.client() as client, ThreadPoolExecutor(3) as pool:

        def create(word: str, tier: str) -> Any:
            return pool.submit(client.responses.create, model=MODEL, input=f"{word}: go", service_tier=tier)

        try:
            # A flex request takes vLLM's one slot and keeps it (the executor writes on while the file exists).
            occupy = create("case-occupy", "flex")
            wait_for(lambda: engine.events("case-occupy", "held"), "the first request holding vLLM's slot")
            # A flex request queues in vLLM, then a priority one behind it.
            flex = create("case-queued-flex", "flex")
            wait_for(lambda: waiting(engine) == 1, "the flex request waiting in vLLM's queue")
            priority = create("case-queued-priority", "priority")
            wait_for(lambda: waiting(engine) == 2, "the priority request waiting behind it")
            assert not engine.events("case-queued-flex", "new") and not engine.events("case-queued-priority", "new")
        finally:
            hold.unlink()
        answers = [future.result(timeout=WAIT) for future in (occupy, flex, priority)]
    # Once the slot was free vLLM scheduled the priority request first, though it arrived last.
    scheduled = [e["match"] for e in engine.events(event="new") if str(e["match"]).startswith("case-")]
    order = [m for m in scheduled if m in ("case-occupy", "case-queued-flex", "case-queued-priority")]
    assert order == ["case-occupy", "case-queued-priority", "case-queued-flex"]
    assert [a.status for a in answers] == ["completed"] * 3
    assert answers[0].output_text.startswith("Held the slot.")  # (its last id written again while held)
    assert answers[1].output_text == "Flex, later." and answers[2].output_text == "Priority, first."
    # The tier actually used is echoed.
    assert [a.service_tier for a in answers] == ["flex", "flex", "priority"]
