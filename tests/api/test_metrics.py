"""``/metrics``, request ids and JSON logs, on real ``harmony-responses serve`` processes.

Responses are made with the openai client (streamed, not streamed, failing mid-stream, refused by the
engine, a web search the server runs, a function call handed to the client); ``/metrics`` is scraped over
HTTP and parsed with prometheus-client's own parser, and its counts must be the ones the responses report.
Two processes sharing ``PROMETHEUS_MULTIPROC_DIR`` (and a store) show one server's metrics from either;
``mark_process_dead`` takes a killed one's gauges out.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect as ws_connect

from harmony_responses import metrics

from .helpers import ANSWER, CALL_WEATHER, MODEL, WEATHER_TOOL, stop_process, write_script

BIN = Path(sys.executable).parent / "harmony-responses"

SEARCH = (
    "<|channel|>analysis<|message|>Let me search.<|end|>"
    '<|start|>assistant<|channel|>analysis to=browser.search code<|message|>{"query": "Etna height"}<|call|>'
)
FOUND = "<|channel|>analysis<|message|>Found it.<|end|><|start|>assistant<|channel|>final<|message|>3,357 m.<|return|>"
SLOW = {"harmony": "<|channel|>final<|message|>" + "word " * 400 + "<|return|>", "delay_ms": 20}


class Serve:
    """One ``serve`` process on a free port; its stderr (the log) goes to ``log``."""

    def __init__(self, script: str, *args: str, log: Path, env: dict[str, str] | None = None) -> None:
        environment = {k: v for k, v in os.environ.items() if k != metrics.MULTIPROC_ENV}
        environment.update(env or {})
        command = [str(BIN), "serve", "--port", "0", "--model", MODEL, "--engine", script, *args]
        command += ["--current-date", "2025-06-01"]
        self.log_path = log
        self._log = log.open("w")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self._log, text=True, env=environment)
        assert self.process.stdout is not None
        line = ""
        for _ in range(50):
            line = self.process.stdout.readline()
            if line.startswith("harmony-responses: listening on ") or not line:
                break
        assert line.startswith("harmony-responses: listening on "), log.read_text()
        self.base_url = line.split("listening on ")[1].strip()
        self.root = self.base_url.removesuffix("/v1")
        self.client = openai.OpenAI(base_url=self.base_url, api_key="unused", max_retries=0, timeout=30)

    def scrape(self, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics``: (name, sorted labels) → value, as Prometheus's parser reads it."""
        reply = httpx.get(self.root + "/metrics", headers=headers, timeout=10)
        assert reply.status_code == 200, reply.text
        assert reply.headers["content-type"].startswith("text/plain")
        samples = {}
        for family in text_string_to_metric_families(reply.text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    def log_lines(self) -> list[dict[str, Any]]:
        self._log.flush()
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.client.close()
        stop_process(self.process, sig)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._log.close()


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sample's value (0 when absent: a counter never incremented has no child)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    return sum(
        v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == x for k, x in labels.items())
    )


@pytest.fixture
def started() -> Iterator[list[Serve]]:
    servers: list[Serve] = []
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def docs() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="kb", dir="/tmp"))
    (root / "etna.md").write_text("# Etna\n\nMount Etna is about 3,357 metres tall.\n")
    yield root
    shutil.rmtree(root)


def test_metrics_count_what_the_responses_report(tmp_path: Path, docs: Path, started: list[Serve]) -> None:
    script = write_script(
        tmp_path / "script.jsonl",
        [
            {"harmony": ANSWER, "cached_tokens": 7},  # 1. not streamed
            {"harmony": ANSWER, "chunk": 2, "delay_ms": 2},  # 2. streamed, two tokens a chunk
            {"harmony": "<|channel|>final<|message|>Half an", "error": "GPU on fire"},  # 3. fails mid-stream
            SEARCH,  # 4. a web search the server runs …
            FOUND,  # … then the answer
            CALL_WEATHER,  # 5. a function call for the client
            {"refused": True, "error": "the engine is full"},  # 6. refused: 503, no response
        ],
    )
    server = Serve(script, "--search-dir", str(docs), "--log-format", "json", log=tmp_path / "log")
    started.append(server)
    client = server.client
    before = server.scrape()

    first = client.responses.create(model=MODEL, input="Hi")
    with client.responses.stream(model=MODEL, input="Hi again") as stream:
        for _ in stream:
            pass
        second = stream.get_final_response()
    with pytest.raises(openai.InternalServerError) as failed:
        client.responses.create(model=MODEL, input="Fail")
    failed_id = failed.value.response.headers["x-response-id"]
    third = client.responses.retrieve(failed_id)
    assert third.status == "failed"
    fourth = client.responses.create(model=MODEL, input="How tall is Etna?", tools=[{"type": "web_search"}])
    assert [item.type for item in fourth.output][-1] == "message"
    fifth = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER_TOOL])  # type: ignore[list-item]
    assert fifth.output[-1].type == "function_call"
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model=MODEL, input="Busy?")
    assert refused.value.status_code == 503
    responses = [first, second, third, fourth, fifth]

    after = server.scrape()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    p = "harmony_responses_"
    usage = [r.usage for r in responses]
    assert all(u is not None for u in usage)
    assert delta(p + "input_tokens_total", model=MODEL) == sum(u.input_tokens for u in usage)  # type: ignore[union-attr]
    assert delta(p + "cached_tokens_total", model=MODEL) == 7 == first.usage.input_tokens_details.cached_tokens  # type: ignore[union-attr]
    outputs = sum(u.output_tokens for u in usage)  # type: ignore[union-attr]
    assert delta(p + "output_tokens_total", model=MODEL) == outputs > 0
    reasoning = sum(u.output_tokens_details.reasoning_tokens for u in usage)  # type: ignore[union-attr]
    assert delta(p + "reasoning_tokens_total", model=MODEL) == reasoning > 0
    assert delta(p + "responses_total", model=MODEL, status="completed") == 4
    assert delta(p + "responses_total", model=MODEL, status="failed") == 1

    # Seven engine calls (the web search's response made two); one failed mid-stream, one was refused.
    assert delta(p + "engine_calls_total", engine="replay") == 7
    assert delta(p + "engine_failures_total", engine="replay", reason="stream") == 1
    assert delta(p + "engine_failures_total", engine="replay", reason="error") == 1

    # One first token per response that got one. Every token after an engine call's first chunk counts one
    # gap, in chunks of two as in ones: all but the first chunk's (one token in five calls, two in the
    # streamed one's). The engine call after the search starts anew: the search ran meanwhile, no gap.
    assert delta(p + "time_to_first_token_seconds_count", model=MODEL) == 5
    assert delta(p + "time_between_tokens_seconds_count", model=MODEL) == outputs - 7
    assert delta(p + "time_between_tokens_seconds_bucket", model=MODEL, le="+Inf") == outputs - 7
    assert delta(p + "time_between_tokens_seconds_sum", model=MODEL) > 0

    assert delta(p + "tool_calls_total", tool="web_search", outcome="ok") == 1
    assert delta(p + "tool_call_duration_seconds_count", tool="web_search") == 1
    assert delta(p + "tool_calls_total", tool="function", outcome="client") == 1

    # HTTP: by route template, never the raw path.
    requests = p + "http_requests_total"
    assert delta(requests, endpoint="/v1/responses", method="POST", status="200", code="") == 4
    assert delta(requests, endpoint="/v1/responses", method="POST", status="500", code="server_error") == 1
    assert failed.value.code == "server_error"
    assert delta(requests, endpoint="/v1/responses", method="POST", status="503", code="engine_unavailable") == 1
    assert delta(requests, endpoint="/v1/responses/{response_id}", method="GET", status="200", code="") == 1
    assert not [labels for (name, labels) in after if name == requests and failed_id in str(labels)]
    assert delta(requests, endpoint="/metrics", method="GET", status="200", code="") == 1
    missing = httpx.get(server.root + "/v1/nothing/here", timeout=10)
    assert missing.status_code == 404
    assert value(server.scrape(), requests, endpoint="unmatched", method="GET", status="404", code="") == 1
    # The other methods HTTP parsers know (WebDAV's…) are one series; made-up ones are not parsed at all.
    for method in ("PROPFIND", "MKCOL"):
        assert httpx.request(method, server.base_url + "/responses", timeout=10).status_code == 405
    assert httpx.request("BREW", server.base_url + "/responses", timeout=10).status_code == 400
    others = server.scrape()
    assert value(others, requests, endpoint="/v1/responses", method="other", status="405", code="") == 2
    assert value(others, requests, endpoint="unparsed", method="", status="400", code="") == 1
    assert not [labels for (name, labels) in others if name == requests and "PROPFIND" in str(labels)]

    # Nothing is left in flight or waiting; the store's writer committed rounds.
    assert total(after, p + "streams_in_flight") == 0
    assert total(after, p + "queue_depth") == 0
    assert delta(p + "store_write_duration_seconds_count") > 0


def test_request_ids_are_returned_everywhere_and_name_the_log_lines(tmp_path: Path, started: list[Serve]) -> None:
    refusal = {"refused": True, "error": "the engine is full"}
    script = write_script(tmp_path / "script.jsonl", [ANSWER, ANSWER, refusal])
    server = Serve(script, "--log-format", "json", log=tmp_path / "log")
    started.append(server)

    raw = server.client.responses.with_raw_response.create(model=MODEL, input="Hi")
    created = raw.parse()
    generated = raw.headers["x-request-id"]
    assert generated.startswith("req_") and len(generated) == 52

    # The stored response remembers the request that created it; the GET's own id is the GET's.
    retrieved = server.client.responses.with_raw_response.retrieve(created.id)
    assert retrieved.headers["x-created-by-request-id"] == generated
    assert retrieved.headers["x-request-id"].startswith("req_") and retrieved.headers["x-request-id"] != generated
    background = server.client.responses.create(
        model=MODEL, input="Later", background=True, extra_headers={"x-request-id": "batch-job-9"}
    )
    deadline = time.monotonic() + 20
    while server.client.responses.retrieve(background.id).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    reply = httpx.get(f"{server.base_url}/responses/{background.id}", timeout=10)
    assert reply.headers["x-created-by-request-id"] == "batch-job-9"
    assert "batch-job-9" not in reply.text  # not in the Response (its metadata is the client's)

    # The client's own id comes back, on errors as on 404s; an unusable one is replaced.
    refused = httpx.post(
        server.base_url + "/responses",
        json={"model": MODEL, "input": "Busy?"},
        headers={"x-request-id": "support-ticket-42"},
        timeout=10,
    )
    assert refused.status_code == 503 and refused.headers["x-request-id"] == "support-ticket-42"
    missing = httpx.get(server.root + "/nope", headers={"x-request-id": "lb-7f3a"}, timeout=10)
    assert missing.status_code == 404 and missing.headers["x-request-id"] == "lb-7f3a"
    invalid = httpx.post(server.base_url + "/responses", content=b"{", headers={"content-type": "application/json"})
    assert invalid.status_code == 400 and invalid.headers["x-request-id"].startswith("req_")
    for unusable in ("x" * 513, "tab\there", "ünïcode"):
        reply = httpx.get(server.root + "/health", headers={"x-request-id": unusable.encode()}, timeout=10)
        assert reply.headers["x-request-id"].startswith("req_") and reply.headers["x-request-id"] != unusable
    assert httpx.get(server.root + "/health", headers={"x-request-id": "y" * 512}).headers["x-request-id"] == "y" * 512

    # The WebSocket handshake answers with one too.
    with ws_connect(
        server.base_url.replace("http", "ws", 1) + "/responses", additional_headers={"x-request-id": "ws-1"}
    ) as ws:
        assert ws.response is not None and ws.response.headers["x-request-id"] == "ws-1"

    lines = server.log_lines()
    assert all({"time", "level", "logger", "message", "request_id"} <= line.keys() for line in lines)
    # The run's line about the response, and uvicorn's access line, name the request that made it.
    ended = [line for line in lines if created.id in line["message"] and line["logger"] == "harmony_responses.run"]
    assert ended and all(line["request_id"] == generated for line in ended)
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert {(line["request_id"], line["path"], line["status"]) for line in access} >= {
        ("support-ticket-42", "/v1/responses", 503),
        ("lb-7f3a", "/nope", 404),
        (generated, "/v1/responses", 200),
    }
    # Lines logged outside any request (start-up) have none.
    assert any(line["request_id"] is None and line["logger"].startswith("uvicorn") for line in lines)


def test_text_logs_name_the_request_after_the_message(tmp_path: Path, started: list[Serve]) -> None:
    script = write_script(tmp_path / "script.jsonl", [ANSWER])
    server = Serve(script, log=tmp_path / "log")
    started.append(server)
    created = server.client.responses.create(model=MODEL, input="Hi", extra_headers={"x-request-id": "text-1"})
    server.stop()
    text = (tmp_path / "log").read_text()
    assert any(created.id in line and line.endswith(" [text-1]") for line in text.splitlines()), text
    assert '"POST /v1/responses HTTP/1.1" 200 OK [text-1]' in text


def test_worker_processes_sharing_a_folder_show_one_servers_metrics(
    tmp_path: Path, started: list[Serve], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "prometheus"  # not made yet: the first process makes it
    env = {metrics.MULTIPROC_ENV: str(folder)}
    script = write_script(tmp_path / "script.jsonl", [ANSWER])
    slow = write_script(tmp_path / "slow.jsonl", [SLOW])
    store = f"sqlite:{tmp_path / 'store.db'}"
    one = Serve(script, "--store", store, log=tmp_path / "one.log", env=env)
    two = Serve(slow, "--store", store, log=tmp_path / "two.log", env=env)
    started.extend([one, two])

    made = [one.client.responses.create(model=MODEL, input="Hi")]
    p = "harmony_responses_"
    # A stream running on the second process is in flight as seen from the first.
    stream_ready = threading.Event()

    def stream_on_two() -> None:
        body = {"model": MODEL, "input": "Slow", "stream": True}
        try:
            with httpx.stream("POST", two.base_url + "/responses", json=body, timeout=30) as reply:
                for _ in reply.iter_bytes():
                    stream_ready.set()
        except httpx.HTTPError:
            pass  # the process is killed mid-stream

    streaming = threading.Thread(target=stream_on_two, daemon=True)
    streaming.start()
    assert stream_ready.wait(10)
    seen = one.scrape()
    assert value(seen, p + "streams_in_flight", transport="sse") == 1
    assert value(seen, p + "responses_total", model=MODEL, status="completed") == 1
    input_one = made[0].usage.input_tokens  # type: ignore[union-attr]

    # The second process dies mid-stream (its gauge file still says 1) and is marked dead: its gauges stop
    # counting, its counters stay.
    two.stop(signal.SIGKILL)
    streaming.join(10)
    assert value(one.scrape(), p + "streams_in_flight", transport="sse") == 1
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(folder))
    metrics.mark_process_dead(two.process.pid)
    after = one.scrape()
    assert value(after, p + "streams_in_flight", transport="sse") == 0
    assert value(after, p + "http_requests_total", endpoint="/v1/responses", method="POST", status="200", code="") == 1
    assert value(after, p + "engine_calls_total", engine="replay") == 2  # one on each process
    # The first one's tokens are all there, and the other's first token was observed before it died.
    assert value(after, p + "input_tokens_total", model=MODEL) == input_one
    assert value(after, p + "time_to_first_token_seconds_count", model=MODEL) == 2

    # A third process sharing the folder serves the same totals.
    three = Serve(script, "--store", store, log=tmp_path / "three.log", env=env)
    started.append(three)
    made.append(three.client.responses.create(model=MODEL, input="Hi"))
    seen = three.scrape()
    assert value(seen, p + "responses_total", model=MODEL, status="completed") == 2
    assert value(seen, p + "input_tokens_total", model=MODEL) == sum(r.usage.input_tokens for r in made)  # type: ignore[union-attr]


def test_serve_workers_scrapes_add_up_every_worker(tmp_path: Path, started: list[Serve]) -> None:
    # --workers 2 points PROMETHEUS_MULTIPROC_DIR at a folder of its own: whichever worker answers a scrape
    # (the kernel picks one per connection), it counts the responses both made.
    script = write_script(tmp_path / "script.jsonl", [ANSWER])
    store = f"sqlite:{tmp_path / 'store.db'}"
    server = Serve(script, "--workers", "2", "--store", store, log=tmp_path / "log")
    started.append(server)
    body = {"model": MODEL, "input": "Hi"}

    def create(_: int) -> int:
        reply = httpx.post(server.base_url + "/responses", json=body, timeout=30)  # a connection each
        assert reply.status_code == 200, reply.text
        return int(reply.json()["usage"]["input_tokens"])

    with ThreadPoolExecutor(4) as pool:
        inputs = list(pool.map(create, range(8)))
    p = "harmony_responses_"
    for _ in range(6):
        seen = server.scrape()
        assert value(seen, p + "responses_total", model=MODEL, status="completed") == 8
        assert value(seen, p + "input_tokens_total", model=MODEL) == sum(inputs)
        assert (
            value(seen, p + "http_requests_total", endpoint="/v1/responses", method="POST", status="200", code="") == 8
        )


def test_replicas_are_labelled_by_their_kind_and_metrics_need_the_key(tmp_path: Path, started: list[Serve]) -> None:
    # Two replicas of one model (--engine NAME=SPEC twice): the engine label is what they are, not "replicas".
    one = write_script(tmp_path / "one.jsonl", [ANSWER])
    two = write_script(tmp_path / "two.jsonl", [ANSWER])
    replicas = ["--engine", f"{MODEL}={one}", "--engine", f"{MODEL}={two}"]
    server = Serve(one, *replicas, "--api-key", "unused", log=tmp_path / "log")  # the client's key
    started.append(server)
    for _ in range(3):
        server.client.responses.create(model=MODEL, input="Hi")
    # Behind the key like every endpoint but /health and /ready.
    assert httpx.get(server.root + "/metrics", timeout=10).status_code == 401
    seen = server.scrape(authorization="Bearer unused")
    calls = {
        dict(labels)["engine"]: v
        for (name, labels), v in seen.items()
        if name == "harmony_responses_engine_calls_total"
    }
    assert calls == {"replay": 3}


def test_json_log_lines_carry_the_exception_and_the_request_id(capsys: pytest.CaptureFixture[str]) -> None:
    # The configuration serve installs (logs.configure), on a logger of ours, inside and outside a request.
    import logging

    from harmony_responses.logs import JsonFormatter, RequestIdFilter, request_scope

    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("harmony_responses.test_json_logs")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with request_scope("req_trace"):
            try:
                raise ValueError("the engine said no")
            except ValueError:
                logger.exception("engine stream raised %s", "mid-generation")
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
    inside, outside = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert inside["message"] == "engine stream raised mid-generation" and inside["level"] == "error"
    assert inside["request_id"] == "req_trace" and inside["logger"] == "harmony_responses.test_json_logs"
    assert "Traceback" in inside["exception"] and "ValueError: the engine said no" in inside["exception"]
    assert outside["request_id"] is None and "exception" not in outside
    assert inside["time"].endswith("+00:00")


def test_a_replica_out_of_service_is_counted(tmp_path: Path, started: list[Serve]) -> None:
    # One replica answers (replay), the other's port has nothing behind it: out of service from the start.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    live = write_script(tmp_path / "live.jsonl", [ANSWER])
    replicas = ["--engine", f"{MODEL}={live}", "--engine", f"{MODEL}=vllm:http://127.0.0.1:{dead}"]
    server = Serve(live, *replicas, log=tmp_path / "log")
    started.append(server)
    server.client.responses.create(model=MODEL, input="Hi")
    seen = server.scrape()
    p = "harmony_responses_"
    assert value(seen, p + "engine_replica_outages_total", engine="vllm", reason="unavailable") == 1
    assert value(seen, p + "engine_calls_total", engine="replay+vllm") == 1
    assert total(seen, p + "engine_retries_total") == 0
