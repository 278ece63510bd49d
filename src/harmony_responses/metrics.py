"""The Prometheus metrics every layer updates, defined once, and ``/metrics``'s body.

One process: the metrics live in prometheus-client's default registry, and ``exposition()`` renders it (with
the process and Python collectors). Several worker processes: when ``PROMETHEUS_MULTIPROC_DIR`` is set before
this module is first imported, prometheus-client keeps each process's values in memory-mapped files in that
folder, and ``exposition()`` aggregates every process's files (``MultiProcessCollector``), so one scrape of
any worker shows the whole server. Gauges then say how processes add up (``livesum``: the sum over processes
still alive). Whoever starts the workers calls ``mark_process_dead(pid)`` when one exits, so that its gauges
stop counting (its counters and histograms stay: they are totals).

Names follow Prometheus's conventions: ``harmony_responses_`` first, counters end ``_total``, durations are
in seconds, and labels take few values (route templates, not paths; model names the server answers to;
engine kinds; tool kinds).

Hot path. A stream's tokens are counted by the translator, and only at the end of the response do the
counters here learn them. The time between tokens is counted per engine chunk in the response's own
buckets (``RunMetrics.tokens``: a clock read, a bisect, two additions: a third of the cost), added to the
shared histogram every ``FLUSH_EVERY`` chunks and when the engine call ends: ``Histogram.observe`` takes a
lock per call (1.1 µs here, more with the memory-mapped files of several processes), a sixth of what the
server spends on an event.
"""

from __future__ import annotations

import bisect
import contextvars
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import multiprocess as _multiprocess

__all__ = [
    "CONTENT_TYPE",
    "CACHED_TOKENS",
    "ENGINE_CALLS",
    "ENGINE_FAILURES",
    "ENGINE_RETRIES",
    "HTTP_REQUESTS",
    "HTTP_REQUEST_DURATION",
    "INPUT_TOKENS",
    "OUTPUT_TOKENS",
    "QUEUE_DEPTH",
    "QUOTA_REJECTIONS",
    "REASONING_TOKENS",
    "REPLICA_OUTAGES",
    "RESPONSES",
    "STORE_WRITE_DURATION",
    "STREAMS_IN_FLIGHT",
    "TIME_BETWEEN_TOKENS",
    "TIME_TO_FIRST_TOKEN",
    "TOKEN_SINK",
    "TOOL_CALLS",
    "TOOL_CALL_DURATION",
    "add_to_histogram",
    "engine_label",
    "labelled",
    "failure_reason",
    "RunMetrics",
    "exposition",
    "mark_process_dead",
    "multiprocess_dir",
]

PREFIX = "harmony_responses_"
CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Seconds. A first token comes after the prompt's prefill, which for a long prompt on a busy engine takes
# tens of seconds; an engine queue can make it minutes.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)
# Seconds. One decode step of a served model is 5-100 ms; a saturated engine or a long stall is beyond.
TBT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
# Seconds. An HTTP request lasts a few ms (a retrieval) to many minutes (a long stream).
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# Seconds. A tool call: a search in ms, code up to --code-timeout (60 s), an MCP call up to --mcp-timeout.
TOOL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Seconds. One group-commit round: sub-millisecond on SQLite, a few ms on PostgreSQL, retries beyond.
# Chunks whose gaps are kept in a response's own counts before they are added to the shared histogram.
FLUSH_EVERY = 256
_monotonic = time.monotonic
_bisect = bisect.bisect_left
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


# The ``_created`` series (when each labelled child was made) double every scrape's size for nothing a
# dashboard reads: off, for this process (which is a server, not a library's host).
disable_created_metrics()


def multiprocess_dir() -> str | None:
    """The folder the worker processes share their metrics through, or None (one process)."""
    return os.environ.get(MULTIPROC_ENV) or None


# prometheus-client writes each process's values into the folder as soon as a metric exists (below): a
# folder that is not there yet would end the process at start with a FileNotFoundError.
if multiprocess_dir() is not None:
    os.makedirs(multiprocess_dir() or "", exist_ok=True)


HTTP_REQUESTS = Counter(
    PREFIX + "http_requests_total",
    "HTTP requests and WebSocket handshakes answered, by route template, method, status and the error body's code",
    ["endpoint", "method", "status", "code"],
)
HTTP_REQUEST_DURATION = Histogram(
    PREFIX + "http_request_duration_seconds",
    "Time from a request's arrival to the end of its answer (a stream's last event, a socket's close)",
    ["endpoint", "method"],
    buckets=HTTP_BUCKETS,
)
STREAMS_IN_FLIGHT = Gauge(
    PREFIX + "streams_in_flight",
    "Responses streaming to a client now, by transport (sse, websocket)",
    ["transport"],
    multiprocess_mode="livesum",
)
QUEUE_DEPTH = Gauge(
    PREFIX + "queue_depth",
    "Responses waiting: 'engine' (for an engine call's first token: the engine's queue and prefill), "
    "'background' (accepted background responses the engine has not yet taken), 'starting' (requests the "
    "event loop serves first until their first delta is out: run/turns.py), 'start_lane' (requests waiting "
    "for their turn to start, one after another), 'held' (flowing streams paused meanwhile)",
    ["queue"],
    multiprocess_mode="livesum",
)
TIME_TO_FIRST_TOKEN = Histogram(
    PREFIX + "time_to_first_token_seconds",
    "Time from a response's request arriving to the engine's first generated token",
    ["model"],
    buckets=TTFT_BUCKETS,
)
TIME_BETWEEN_TOKENS = Histogram(
    PREFIX + "time_between_tokens_seconds",
    "Time between generated tokens within an engine call (a chunk of n tokens counts n gaps of 1/n its wait)",
    ["model"],
    buckets=TBT_BUCKETS,
)
RESPONSES = Counter(
    PREFIX + "responses_total",
    "Responses that ended, by model and status (completed, incomplete, failed, cancelled)",
    ["model", "status"],
)
INPUT_TOKENS = Counter(PREFIX + "input_tokens_total", "Prompt tokens sent to the engine, by model", ["model"])
CACHED_TOKENS = Counter(PREFIX + "cached_tokens_total", "Prompt tokens the engine had cached, by model", ["model"])
OUTPUT_TOKENS = Counter(PREFIX + "output_tokens_total", "Tokens the engine generated, by model", ["model"])
REASONING_TOKENS = Counter(
    PREFIX + "reasoning_tokens_total", "Generated tokens that were reasoning (part of output), by model", ["model"]
)
ENGINE_CALLS = Counter(
    PREFIX + "engine_calls_total", "Generation requests sent to an engine, by engine kind (vllm, sglang, …)", ["engine"]
)
ENGINE_FAILURES = Counter(
    PREFIX + "engine_failures_total",
    "Engine calls that failed, by engine kind and reason (unavailable, timeout, refused, protocol, mismatch, "
    "error: before the first token; stream: reported mid-stream; contract: the engine broke its contract)",
    ["engine", "reason"],
)
REPLICA_OUTAGES = Counter(
    PREFIX + "engine_replica_outages_total",
    "Replicas of a model taken out of service (at start, or when a call or a probe failed), by engine kind and "
    "reason (as engine_failures_total); the log names the replica",
    ["engine", "reason"],
)
ENGINE_RETRIES = Counter(
    PREFIX + "engine_retries_total",
    "Engine calls retried on another replica after one could not take them, by engine kind",
    ["engine"],
)
TOOL_CALLS = Counter(
    PREFIX + "tool_calls_total",
    "Tool calls by tool (code_interpreter, web_search, mcp: run here; function, custom: handed to the client) "
    "and outcome (ok, error, refused, client)",
    ["tool", "outcome"],
)
TOOL_CALL_DURATION = Histogram(
    PREFIX + "tool_call_duration_seconds",
    "Duration of the tool calls the server runs, by tool",
    ["tool"],
    buckets=TOOL_BUCKETS,
)
STORE_WRITE_DURATION = Histogram(
    PREFIX + "store_write_duration_seconds",
    "Duration of one group-commit round of the store's writer (one transaction for every stream's writes)",
    buckets=STORE_BUCKETS,
)

QUOTA_REJECTIONS = Counter(
    PREFIX + "quota_rejections_total",
    "Requests refused with 429 by an API key's limit, by the key's name ([[keys]] name) and the limit "
    "(requests_per_minute, tokens_per_minute, max_concurrent, max_concurrent_background)",
    ["key", "limit"],
)


class TokenSink(Protocol):
    """Who is told of a response's tokens as they are produced (quotas: its key's tokens per minute)."""

    def tokens(self, count: int) -> None: ...


# The sink of the responses started in this context (None: no one counts their tokens).
TOKEN_SINK: contextvars.ContextVar[TokenSink | None] = contextvars.ContextVar(
    "harmony_responses_token_sink", default=None
)


def exposition() -> tuple[bytes, str]:
    """``/metrics``'s body and content type: every worker's metrics when they share a folder, else this process's."""
    folder = multiprocess_dir()
    if folder is None:
        return generate_latest(REGISTRY), CONTENT_TYPE
    registry = CollectorRegistry()
    _multiprocess.MultiProcessCollector(registry, path=folder)
    return generate_latest(registry), CONTENT_TYPE


def mark_process_dead(pid: int) -> None:
    """A worker process exited: its live gauges stop counting (call it from the process that started it)."""
    folder = multiprocess_dir()
    if folder is not None:
        _multiprocess.mark_process_dead(pid, folder)


def add_to_histogram(child: Any, counts: list[int], total: float) -> None:
    """Add observations counted per bucket (``counts``, the last one +Inf) and their ``total`` to a histogram child.

    Relies on prometheus-client's ``Histogram`` keeping one non-cumulative value per bucket (``_buckets``) and
    ``_sum``: true of every release since 0.4, and of its multi-process values alike; tests/api/test_metrics.py
    reads the result back through ``/metrics``. The public ``observe`` is one lock per observation: see the
    module docstring.
    """
    buckets = child._buckets
    for index, count in enumerate(counts):
        if count:
            buckets[index].inc(count)
            counts[index] = 0
    child._sum.inc(total)


# Engine exceptions → the reason label (by class name: metrics must not import the engine package).
_FAILURE_REASONS = {
    "EngineUnavailable": "unavailable",
    "EngineTimeout": "timeout",
    "EngineRefused": "refused",
    "EngineProtocolError": "protocol",
    "EngineMismatch": "mismatch",
    "EngineError": "error",
}
_CLIENT_TOOLS = {"function_call": "function", "custom_tool_call": "custom"}


# Children by (metric, label values): a dict lookup, where prometheus-client's labels() validates and locks on
# every call (nine calls were about 30 µs of each request). Label values are bounded sets (see each metric).
_children: dict[tuple[Any, tuple[str, ...]], Any] = {}


def labelled(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, remembered."""
    key = (metric, values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def engine_label(engine: Any) -> str:
    """The ``engine`` label of an engine: its kind (``Engine.name``: ``vllm``, ``replay``, …); for a set of
    replicas, the kinds of its replicas (``vllm``, or ``llamacpp+vllm``), not the set's own name."""
    replicas = getattr(engine, "engines", None)
    if isinstance(replicas, list) and replicas:
        return "+".join(sorted({engine_label(replica) for replica in replicas}))
    return str(getattr(engine, "name", type(engine).__name__))


def failure_reason(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        reason = _FAILURE_REASONS.get(cls.__name__)
        if reason is not None:
            return reason
    return "contract"


class RunMetrics:
    """One response's metrics: its engine calls, token timing and, when it ends, its counts.

    Args:
        model: the model name the request asked for (one the server answers to).
        engine: the engine's kind (``Engine.name``).
        arrived: ``time.monotonic()`` when the request arrived (the time to first token counts from it).
    """

    __slots__ = (
        "_between",
        "_counts",
        "_first_seen",
        "_last",
        "_pending",
        "_sink",
        "_sunk",
        "_sum",
        "arrived",
        "engine",
        "model",
        "reported",
    )

    def __init__(self, *, model: str, engine: str, arrived: float | None = None) -> None:
        self.model = model
        self.engine = engine
        self.arrived = time.monotonic() if arrived is None else arrived
        self._between = labelled(TIME_BETWEEN_TOKENS, model)
        # The time between tokens, kept here per bucket (the last: +Inf) until flushed (module docstring).
        self._counts = [0] * (len(TBT_BUCKETS) + 1)
        self._sum = 0.0
        self._pending = 0
        self._first_seen = False
        self._last: float | None = None
        self.reported = False
        # Told of the tokens as they come (TOKEN_SINK), then of the rest of the usage (input) at the end.
        self._sink = TOKEN_SINK.get()
        self._sunk = 0

    def engine_call(self) -> None:
        labelled(ENGINE_CALLS, self.engine).inc()
        self._last = None  # the wait for a later call's first token is not a gap between tokens

    def engine_failed(self, reason: str) -> None:
        ENGINE_FAILURES.labels(self.engine, reason).inc()

    def tokens(self, count: int) -> None:
        """An engine chunk of ``count`` generated tokens arrived (the hot path: see the module docstring)."""
        if not count:
            return
        if self._sink is not None:
            self._sink.tokens(count)
            self._sunk += count
        now = _monotonic()
        last = self._last
        self._last = now
        if last is not None:
            gap = (now - last) / count
            self._counts[_bisect(TBT_BUCKETS, gap)] += count  # bisect_left: a gap equal to a bound is in it (le)
            self._sum += gap * count
            self._pending += 1
            if self._pending >= FLUSH_EVERY:
                self.engine_call_ended()
        elif not self._first_seen:
            self._first_seen = True
            labelled(TIME_TO_FIRST_TOKEN, self.model).observe(now - self.arrived)

    def engine_call_ended(self) -> None:
        """Add the gaps kept here to the shared histogram."""
        if self._pending:
            add_to_histogram(self._between, self._counts, self._sum)
            self._sum = 0.0
            self._pending = 0

    def ended(self, status: str, usage: Mapping[str, int], output: Sequence[Mapping[str, Any]]) -> None:
        """The response is over (once): its status, token counts and the calls handed to the client."""
        if self.reported:
            return
        self.reported = True
        self.engine_call_ended()
        if self._sink is not None:  # usage is what counts (input + output): the difference is the prompts
            self._sink.tokens(usage.get("input", 0) + usage.get("output", 0) - self._sunk)
        model = self.model
        labelled(RESPONSES, model, status).inc()
        for counter, key in (
            (INPUT_TOKENS, "input"),
            (CACHED_TOKENS, "cached"),
            (OUTPUT_TOKENS, "output"),
            (REASONING_TOKENS, "reasoning"),
        ):
            if usage.get(key):
                labelled(counter, model).inc(usage[key])
        for item in output:
            tool = _CLIENT_TOOLS.get(str(item.get("type")))
            if tool is not None:
                TOOL_CALLS.labels(tool, "client").inc()
