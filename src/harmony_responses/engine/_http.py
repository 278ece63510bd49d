"""What the HTTP adapters share: the pooled clients, bounded waits, SSE lines, error mapping, stop ids.

``HTTPEngine`` owns two clients per engine. The engine calls' streams go through ``StreamClient``
(``_stream_client.py``: keep-alive connections, at most ``max_connections``), hand-written for the one
call that is made per engine call and read chunk by chunk; everything else (start-up checks, aborts,
detokenize) through one ``aiohttp.ClientSession`` with explicit ``ClientTimeout``. The stream loop every
adapter needs:

    POST → status check → SSE/NDJSON lines (split from each read, ``_lines.py``) → adapter's
         ``StreamReader.feed(obj)`` → ``TokenChunk``s (one per read, ``take``) → stop id settled → ``EngineEnd``

aiohttp rather than httpx for the rest: a burst of 64 concurrent streaming POSTs cost httpx 1.1-1.7 ms of
CPU per request and aiohttp 0.16-0.47 ms; the stream client costs less again (its docstring).

An adapter (``_vllm.py``, ``_sglang.py``, ``_llamacpp.py``, ``_trtllm.py``) says only what differs:
the request body, how to read one streamed JSON object, the start-up check and the abort call.

Bounds. Connecting (and waiting for a free pooled connection) is bounded by the connect timeout;
everything after by a per-stream watchdog (``_Watchdog``): a first-token deadline from the
moment the request is sent (sending included), then a stall bound on each wait for the engine's next
line. The watchdog only counts time spent waiting *for the engine*: while the consumer is slow (a
client reading slowly holds the server's send), the engine is not stalled. It costs one timer per
stream, re-armed about once per stall period, instead of a timeout scope per line (which costs ~6 µs a
line). The watchdog uses asyncio directly: the server runs on uvicorn's loop. Memory is bounded too: a
streamed line is at most ``MAX_LINE`` bytes, an error body is read up to 64 KiB.

Stop ids (engines.md §1). Harmony needs ``<|call|>`` or ``<|return|>`` at the end of a stopped message
and some engines strip the id they stopped on. ``settle_stop`` appends it when it is missing: the id the
engine says it matched, else the one the open message calls for (``<|call|>`` when its header names a
recipient, else ``<|return|>``). An engine that stopped on ``<|end|>`` is misconfigured (it must never
stop sampling: harmony.md §1), which is reported rather than passed on as a short answer.

Errors. ``map_errors`` is the one place where aiohttp's exceptions (and unreadable data) become the
``EngineError`` tree drawn in ``_base.py`` (the stream client raises the same ones itself); before the
first token the error is raised (the server answers 503), after it the stream ends with
``EngineEnd(reason="error")`` naming the engine.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import logging
import math
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import aiohttp
import anyio
import orjson
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from .. import tracing
from ..tokens import ADMITTED, EngineEnd, FinishReason, TokenChunk, TokenLogprob
from ..vocab import VOCAB_SIZE, load_encoding
from . import _lines
from ._base import (
    Engine,
    EngineError,
    EngineMismatch,
    EngineProtocolError,
    EngineRefused,
    EngineStream,
    EngineTimeout,
    EngineUnavailable,
    GenerateRequest,
)
from ._lines import TOO_LONG, Lines
from ._lines import excerpt as _excerpt
from ._options import EngineOptions
from ._reading import attach, current_reading
from ._stream_client import Answer, StreamClient

__all__ = [
    "HARMONY_PROBE",
    "HTTPEngine",
    "CLIENT_ERRORS",
    "StreamReader",
    "map_errors",
    "parse_completion_logprobs",
    "settle_stop",
]

logger = logging.getLogger("harmony_responses.engine")

_START, _END, _MESSAGE, _RETURN, _CALL, _ENDOFTEXT = 200006, 200007, 200008, 200002, 200012, 199999

# Detokenising these must give back their literal text on a Harmony tokenizer (engines.md §1, readiness).
HARMONY_PROBE = ([200006, 200008, 200002], "<|start|><|message|><|return|>")

# Used when a request carries no budget (the server always sends one): engine defaults are tiny or
# unbounded (vLLM completions 16, SGLang 128, llama.cpp -1).
DEFAULT_MAX_TOKENS = 4096
# Bounds of the calls around a stream: start-up checks and abort requests.
CHECK_TIMEOUT = 10.0
ABORT_TIMEOUT = 2.0

# Every aiohttp exception → (our class, what happened), most specific first (looked up along the MRO).
# A test checks that every exception class aiohttp exports has its own entry, so that a new one cannot
# slip through as a 500. EngineUnavailable only for what fails before the request is sent: the
# stream then knows the engine is not generating for us.
CLIENT_ERRORS: dict[type[Exception], tuple[type[EngineError], str]] = {
    aiohttp.ClientConnectorDNSError: (EngineUnavailable, "cannot connect: the host name does not resolve"),
    aiohttp.ClientConnectorCertificateError: (EngineUnavailable, "cannot connect: the TLS certificate was refused"),
    aiohttp.ClientConnectorSSLError: (EngineUnavailable, "cannot connect: the TLS handshake failed"),
    aiohttp.ClientSSLError: (EngineUnavailable, "cannot connect: TLS error"),
    aiohttp.ClientProxyConnectionError: (EngineUnavailable, "cannot connect to the proxy"),
    aiohttp.ClientConnectorError: (EngineUnavailable, "cannot connect"),
    aiohttp.ConnectionTimeoutError: (
        EngineUnavailable,
        "connecting timed out, or no pooled connection was free in time (raise --engine-max-connections)",
    ),
    aiohttp.ServerFingerprintMismatch: (EngineUnavailable, "the TLS certificate does not match its fingerprint"),
    aiohttp.NonHttpUrlRedirectClientError: (EngineProtocolError, "the engine redirected to a URL that is not http"),
    aiohttp.NonHttpUrlClientError: (EngineUnavailable, "the engine URL's scheme is not http or https"),
    aiohttp.InvalidUrlRedirectClientError: (EngineProtocolError, "the engine redirected to an invalid URL"),
    aiohttp.InvalidUrlClientError: (EngineUnavailable, "the engine URL is invalid"),
    aiohttp.InvalidURL: (EngineUnavailable, "the engine URL is invalid"),
    aiohttp.RedirectClientError: (EngineProtocolError, "the engine's redirect cannot be followed"),
    aiohttp.ClientHttpProxyError: (EngineUnavailable, "the proxy refused to connect to the engine"),
    aiohttp.SocketTimeoutError: (EngineTimeout, "reading from the engine timed out"),
    aiohttp.ServerTimeoutError: (EngineTimeout, "the engine timed out"),
    TimeoutError: (EngineTimeout, "the engine did not answer in time"),  # a check call's total bound
    aiohttp.ServerDisconnectedError: (EngineProtocolError, "the engine closed the connection"),
    aiohttp.ClientConnectionResetError: (EngineProtocolError, "the connection was reset"),
    aiohttp.ServerConnectionError: (EngineProtocolError, "the connection to the engine failed"),
    aiohttp.ClientOSError: (EngineProtocolError, "the connection failed"),
    aiohttp.ClientConnectionError: (EngineProtocolError, "the connection failed"),
    aiohttp.ClientPayloadError: (EngineProtocolError, "the connection was cut mid-response"),
    aiohttp.UploadAbortedError: (EngineProtocolError, "the request was not fully sent"),
    aiohttp.TooManyRedirects: (EngineProtocolError, "the engine redirected too often"),
    aiohttp.ContentTypeError: (EngineProtocolError, "the engine answered with an unexpected content type"),
    aiohttp.WSServerHandshakeError: (EngineProtocolError, "the WebSocket handshake failed"),
    aiohttp.ClientResponseError: (EngineProtocolError, "the engine's answer is not valid HTTP"),
    aiohttp.ClientError: (EngineError, "HTTP error"),
    LineTooLong: (EngineProtocolError, TOO_LONG),
    HttpProcessingError: (EngineProtocolError, "HTTP protocol error"),
    aiohttp.EofStream: (EngineProtocolError, "the response ended early"),
    aiohttp.WSMessageTypeError: (EngineProtocolError, "unexpected WebSocket message"),
    aiohttp.WebSocketError: (EngineProtocolError, "WebSocket error"),
}

# Exceptions that reading garbage raises: JSON that parses but has the wrong shape.
_GARBAGE = (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError, AttributeError)


@contextlib.contextmanager
def map_errors(label: str) -> Iterator[None]:
    """Re-raise aiohttp exceptions and unreadable data as ``EngineError``s naming the engine (``label``).

    ``EngineError``s pass through untouched; anything else is a bug and propagates.
    """
    try:
        yield
    except EngineError:
        raise
    except Exception as exc:
        for cls in type(exc).__mro__:
            mapped = CLIENT_ERRORS.get(cls)  # type: ignore[arg-type]
            if mapped is not None:
                kind, what = mapped
                raise kind(f"{label}: {what} ({_detail(exc) or type(exc).__name__})") from exc
        if isinstance(exc, _GARBAGE):
            raise EngineProtocolError(f"{label}: sent data we cannot read ({type(exc).__name__}: {exc})") from exc
        raise


def _detail(exc: Exception) -> str:
    # Where aiohttp's own wording repeats ours ("Cannot connect to host …") or leads with the status a
    # server would answer, the underlying error says it shorter.
    if isinstance(exc, aiohttp.ClientConnectorError):
        return str(exc.os_error)
    if isinstance(exc, HttpProcessingError):
        return exc.message
    return str(exc)


def is_token_id(value: object) -> bool:
    return type(value) is int and 0 <= value < VOCAB_SIZE  # type: ignore[operator]


def token_ids(value: object, what: str) -> list[int]:
    """``value`` as a list of token ids; EngineProtocolError naming ``what`` when it is not one."""
    # A streamed chunk's usual one id, checked without the generator below (once per token on every adapter).
    if value.__class__ is list and len(value) == 1 and value[0].__class__ is int and 0 <= value[0] < VOCAB_SIZE:  # type: ignore[attr-defined]
        return value  # type: ignore[return-value]
    if not isinstance(value, list) or not all(type(t) is int and 0 <= t < VOCAB_SIZE for t in value):
        raise EngineProtocolError(f"{what} is not a list of token ids: {_excerpt(value)}")
    return value


def error_code(obj: Any) -> int | None:
    """The HTTP-like status an error object carries (``{"error": {"code": 400}}``), when it is one."""
    error = obj.get("error") if isinstance(obj, dict) else None
    code = error.get("code") if isinstance(error, dict) else obj.get("code") if isinstance(obj, dict) else None
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    return code if type(code) is int and 100 <= code < 600 else None


def error_message(obj: Any) -> str | None:
    """The message of an error object in a stream or error body (``{"error": …}``, ``object: "error"``)."""
    if not isinstance(obj, dict):
        return None
    error = obj.get("error")
    if error:
        if isinstance(error, dict):
            return str(error.get("message") or error)
        return str(error)
    if obj.get("object") == "error":
        return str(obj.get("message") or obj)
    return None


_CONTEXT_LENGTH = re.compile(r"context length|context window|max_model_len|n_ctx|too long|exceeds? the", re.I)
# vLLM's refusal of an output budget over its context ("max_tokens=130999 cannot be greater than
# max_model_len=4096"), SGLang's of max_new_tokens: not a prompt that is too long, a budget to lower.
_BUDGET_OVER_CONTEXT = re.compile(
    r"(max_tokens|max_new_tokens|max_completion_tokens)\W+(?P<budget>\d+)\D[^.]*?"
    r"(max_model_len|context length|context_len)\W+(?P<context>\d+)",
    re.I,
)
# SGLang's words for the same (its tokenizer manager, 0.5.23): "… maximum context length of 2048 tokens. You
# requested a total of 131001 tokens: 2 tokens from the input messages and 130999 tokens for the completion."
_SGLANG_BUDGET_OVER_CONTEXT = re.compile(
    r"maximum context length of (?P<context>\d+) tokens\..*?(?P<budget>\d+) tokens for the completion", re.I | re.S
)


def refused(label: str, status: int | None, body: bytes | str | dict[str, Any]) -> EngineRefused:
    """The error for an engine's error answer (status None: an error object inside the stream).

    An error object in a stream carries its own ``code``: 4xx there is a refusal of the request (vLLM
    after admission: token id out of vocabulary, logprobs over ``--max-logprobs``; SGLang: prompt or
    ``max_new_tokens`` over its context), mapped as the same status before the stream would be.
    """
    obj: Any = body
    if not isinstance(body, dict):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            obj = text
    message = (error_message(obj) if isinstance(obj, dict) else None) or (obj if isinstance(obj, str) else repr(obj))
    message = _excerpt(message.strip() or "(no body)")
    code = status if status is not None else error_code(obj)
    where = f"HTTP {status}" if status is not None else "an error in the stream"
    client_fault = code is not None and 400 <= code < 500 and code not in (401, 403, 404, 408, 429)
    budget = (
        (_BUDGET_OVER_CONTEXT.search(message) or _SGLANG_BUDGET_OVER_CONTEXT.search(message)) if client_fault else None
    )
    if budget is not None:
        return EngineRefused(
            f"{label}: {where}: the output budget ({budget['budget']} tokens) is larger than the engine's context "
            f"({budget['context']} tokens): lower max_output_tokens, or start the server with --context-window "
            f"{budget['context']} ({message})",
            status=code,
            invalid_request=True,
        )
    context = client_fault and bool(_CONTEXT_LENGTH.search(message))
    return EngineRefused(
        f"{label}: {where}: {message}",
        status=code,
        context_length=context,
        invalid_request=client_fault and status is None,
    )


def parse_completion_logprobs(lp: Any, ids: Sequence[int], top: int) -> list[TokenLogprob]:
    """OpenAI-completions logprobs (``token_logprobs``, ``top_logprobs``) aligned with ``ids``.

    Alternatives are keyed ``"token_id:N"`` (vLLM's ``return_tokens_as_token_ids``); alternatives keyed
    by text cannot be mapped to ids and are left out rather than guessed.
    """
    values = lp["token_logprobs"]
    tops = lp.get("top_logprobs") or [None] * len(values)
    if len(values) != len(ids) or len(tops) != len(ids):
        raise EngineProtocolError(f"logprobs for {len(values)} tokens in a chunk of {len(ids)}")
    out = []
    for value, alternatives in zip(values, tops, strict=True):
        pairs: list[tuple[int, float]] = []
        if alternatives:
            for key, alt in alternatives.items():
                if isinstance(key, str) and key.startswith("token_id:"):
                    pairs.append((int(key[9:]), _logprob(alt)))
            pairs.sort(key=lambda p: -p[1])
        out.append(TokenLogprob(logprob=_logprob(value), top=tuple(pairs[:top])))
    return out


# The OpenAI API's value for "very unlikely" (its logprob fields' documentation): what a token of zero
# probability gets instead of -inf, or of -3.4e38 (float32's lowest, what engines send for a masked token).
LOGPROB_FLOOR = -9999.0


def _logprob(value: Any) -> float:
    # JSON has no -inf: engines send null, a huge negative number or the string "-inf".
    if value is None:
        return LOGPROB_FLOOR
    value = float(value)
    return value if math.isfinite(value) and value > LOGPROB_FLOOR else LOGPROB_FLOOR


def settle_stop(
    request: GenerateRequest, generated: Sequence[int], matched: int | None, eos: bool
) -> tuple[list[int], str | None]:
    """After a ``stop`` finish: the stop id to append (``[]`` or one id) and an error message, or None.

    Args:
        generated: every id the engine returned for this call.
        matched: the stop id the engine says it stopped on, when it says.
        eos: the engine stopped on the model's own end of sequence (not one of our stop ids): the
            translator treats that as the end of the stream, nothing to append.
    """
    stops = request.stop_token_ids
    last = generated[-1] if generated else None
    if last in stops:
        return [], None
    if last == _ENDOFTEXT or matched == _ENDOFTEXT:
        # The model's own end of sequence (vLLM adds it to the stop ids from generation_config.json): the
        # translator ends the stream there; appending <|return|> would invent a token and count it.
        return [], None
    if last == _END:
        return [], (
            "the engine stopped generating at <|end|>, which must never stop sampling (Harmony writes several "
            "messages per turn); configure the engine so that only <|return|> and <|call|> end generation"
        )
    if matched is not None:
        return ([matched] if matched in stops else []), None
    if eos:
        return [], None
    wanted = _CALL if _open_message_has_recipient(request.prompt_ids, generated) else _RETURN
    return ([wanted] if wanted in stops else []), None


def _open_message_has_recipient(prompt: Sequence[int], generated: Sequence[int]) -> bool:
    # The open message starts at the last <|start|>, in the output or (a prefilled header) in the prompt.
    header: list[int] = []
    for ids in (generated, prompt):
        start = _rindex(ids, _START)
        tail = ids[start + 1 :] if start >= 0 else ids
        header = list(tail) + header if ids is prompt else list(tail)
        if start >= 0:
            break
    if _MESSAGE not in header:
        return False  # still in the header: the translator decides what an unfinished header means
    text = load_encoding().decode(header[: header.index(_MESSAGE)])
    return re.search(r"(^|\s|>)to=", text) is not None


def _rindex(ids: Sequence[int], token: int) -> int:
    for i in range(len(ids) - 1, -1, -1):
        if ids[i] == token:
            return i
    return -1


class StreamReader(abc.ABC):
    """Reads one generation's streamed JSON objects (sans-I/O); one instance per ``generate`` call.

    ``feed`` takes the new token ids of one object (through ``chunk``) and records how the generation
    ended in ``finish``, ``matched``, ``eos`` and ``cached_tokens``; ``take`` returns the ids fed since it
    was last called as chunks (one, or one per run of ids with and without logprobs). It raises
    ``EngineRefused`` for an error object and lets shape errors (KeyError, TypeError…) propagate:
    ``map_errors`` reports those as unreadable data.

    The stream loop feeds every object of one socket read, then takes them as one chunk: under load a
    read holds several tokens' lines (~8 in a flat-out burst of 64), and a ``TokenChunk`` per line, merged
    afterwards, was part of the 1.4 µs per token this loop shed (bench/engine_reads_bench.py: 3.0 → 1.6).
    """

    # Its ``feed`` takes the completions stream's common line (engine/_lines.py) as ``chunk(ids, None)`` does: the
    # compiled scanner may then take those lines for it.
    common_lines = False

    def __init__(self, request: GenerateRequest, label: str) -> None:
        self.request = request
        self.label = label
        # The id the engine knows this generation by (its logs, its abort endpoint).
        self.rid = request.request_id or f"hr-{uuid.uuid4().hex}"
        self.generated: list[int] = []
        self.finish: FinishReason | None = None
        self.matched: int | None = None
        self.eos = False
        self.message: str | None = None
        self.cached_tokens = 0
        self._taken: list[TokenChunk] = []  # runs of ids closed since the last take()
        self._ids: list[int] = []  # the open run: ids fed since, all with logprobs or all without
        self._lps: list[TokenLogprob] | None = None  # the open run's logprobs (None: it has none)

    @abc.abstractmethod
    def feed(self, obj: Any) -> None: ...

    def check_error(self, obj: Any) -> None:
        if error_message(obj) is not None:
            raise refused(self.label, None, obj)

    def chunk(self, ids: list[int], logprobs: list[TokenLogprob] | None) -> None:
        """One object's new ids (and their logprobs, when the engine sent them), for ``take``."""
        if not ids:
            return
        self.generated.extend(ids)
        if (logprobs is None) is not (self._lps is None) and self._ids:
            self._taken.append(TokenChunk(token_ids=self._ids, logprobs=self._lps))
            self._ids = []
            self._lps = None
        self._ids.extend(ids)
        if logprobs is not None:
            if self._lps is None:
                self._lps = []
            self._lps.extend(logprobs)

    def take(self) -> list[TokenChunk]:
        """The ids fed since the last call, as chunks (empty when none came)."""
        taken = self._taken
        if self._ids:
            taken.append(TokenChunk(token_ids=self._ids, logprobs=self._lps))
            self._ids = []
            self._lps = None
        if taken:
            self._taken = []
        return taken


def _current_task_getter(loop: asyncio.AbstractEventLoop) -> Callable[[], asyncio.Task[Any] | None]:
    """``asyncio.current_task`` for ``loop``, as cheap as it can be had: the stream loop asks it after every
    chunk it yields. On Python 3.11 it is a Python function (its running-loop lookup and dict read showed as
    ~4 % of the server's CPU on paced streams, one token per chunk); the dict it reads is taken directly there.
    From 3.12 it is C."""
    if sys.version_info < (3, 12):
        tasks = getattr(asyncio.tasks, "_current_tasks", None)
        if isinstance(tasks, dict):
            return functools.partial(tasks.get, loop)
    return asyncio.current_task


class _Watchdog:
    """Cancels the stream's task when the engine is silent too long (see the module docstring)."""

    __slots__ = ("fired", "first", "handle", "loop", "reading", "stall", "started", "task", "waiting_first")

    def __init__(self, first: float, stall: float) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task(self.loop)  # given the loop: asking for it again is a getpid() on 3.11
        assert task is not None, "engine streams run inside an asyncio task"
        self.task = task
        self.first, self.stall = first, stall
        self.started = self.loop.time()
        self.reading: float | None = self.started  # since when we wait for the engine, or None
        self.waiting_first = True
        self.fired: str | None = None
        self.handle = self.loop.call_at(self.started + first, self._check)

    def got_first(self) -> None:
        self.waiting_first = False
        self.handle.cancel()
        self.handle = self.loop.call_at(self.loop.time() + self.stall, self._check)

    def _check(self) -> None:
        now = self.loop.time()
        reading = self.reading
        if self.waiting_first:
            since, limit = self.started, self.first
        elif reading is not None:
            since, limit = reading, self.stall
        else:  # the consumer holds us back: not the engine's fault
            self.handle = self.loop.call_at(now + self.stall, self._check)
            return
        if now - since >= limit * 0.999:
            self.fired = (
                f"no first token within {self.first:g} s"
                if self.waiting_first
                else f"the stream stalled: no data for {self.stall:g} s"
            )
            self.task.cancel()
        else:
            self.handle = self.loop.call_at(since + limit, self._check)

    def close(self) -> None:
        self.handle.cancel()


class HTTPEngine(Engine):
    """The base of the HTTP adapters: one pooled client, the stream loop, start-up check and abort.

    Subclasses set ``name``, ``default_url`` and ``path`` and implement ``body``, ``reader`` and
    ``check``; ``abort`` is optional (engines that abort on a closed connection need none).
    """

    default_url = "http://127.0.0.1:8000"
    path = "/v1/completions"
    direct_reads = True  # the stream loop below lets a waiting consumer take a read where it is read
    # Its streams are completions lines (its reader's ``common_lines``): start-up says how they are read.
    completion_lines = False

    def __init__(self, options: EngineOptions | None = None) -> None:
        self.options = options or EngineOptions()
        url = (self.options.url or self.default_url).rstrip("/")
        self.url = url[:-3] if url.endswith("/v1") else url
        self.model: str | None = self.options.model
        self.label = f"{self.name} at {self.url}"
        # Constrain the final channel to text.format's schema and custom tools' input to their grammars
        # where the adapter can (_constrain.py); each switched off for good when the engine refuses it
        # (an older version), the tools' first: their structural tag is the newer format.
        self.constrain_final = True
        self.constrain_tools = True
        self._client: aiohttp.ClientSession | None = None
        self._streams: StreamClient | None = None

    @property
    def context_length(self) -> int | None:
        """The adapters' name for ``Engine.context_window`` (set by their start-up check)."""
        return self.context_window

    @context_length.setter
    def context_length(self, value: int | None) -> None:
        self.context_window = value

    # ------------------------------------------------------------------ adapter hooks

    @abc.abstractmethod
    def body(self, reader: StreamReader) -> dict[str, Any]:
        """The JSON body of the streaming generate request (``reader.request``, ``reader.rid``)."""

    @abc.abstractmethod
    def reader(self, request: GenerateRequest) -> StreamReader:
        """A fresh reader for one streamed response."""

    @abc.abstractmethod
    async def check(self) -> None:
        """Start-up check: raise ``EngineMismatch`` (or let request errors propagate) saying what is wrong."""

    async def abort(self, reader: StreamReader) -> None:
        """Tell the engine to stop ``reader.rid`` (called after the connection is closed, bounded in time)."""

    def constrains(self, reader: StreamReader) -> bool:
        """Whether ``body(reader)`` asks the engine to constrain part of the output (``_constrain.py``)."""
        return False

    def relax(self, reader: StreamReader) -> str | None:
        """After the engine refused ``reader``'s constraint: stop sending it, for good. What was dropped
        (for the log), or None when there was nothing left to drop."""
        if self.constrain_tools and (reader.request.tool_grammars or reader.request.recipients is not None):
            self.constrain_tools = False
            return "custom tools' grammars"
        if self.constrain_final:
            self.constrain_final = False
            return "constrained decoding"
        return None

    # ------------------------------------------------------------------ lifetime

    def client(self) -> aiohttp.ClientSession:
        if self._client is None:
            o = self.options
            headers = {"authorization": f"Bearer {o.api_key}"} if o.api_key else {}
            self._client = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=o.max_connections, keepalive_timeout=30.0),
                headers=headers,
                # No read timeout: the watchdog bounds every wait for the engine (first token, stalls),
                # counting only the time we spend waiting for it; a read timeout cannot tell the two apart.
                # aiohttp's connect timeout also bounds the wait for a free pooled connection.
                timeout=aiohttp.ClientTimeout(total=None, connect=o.connect_timeout),
                # Engines keep no state in cookies; a jar would only cost a lookup per request.
                cookie_jar=aiohttp.DummyCookieJar(),
                # trust_env stays off: it reads the proxy variables and ~/.netrc in a worker thread on
                # every request, so an engine is reached directly whatever HTTP_PROXY says.
            )
        return self._client

    def streams(self) -> StreamClient:
        """The client of the engine calls' streams (``_stream_client.py``: the one call that is not aiohttp's)."""
        if self._streams is None:
            o = self.options
            self._streams = StreamClient(
                self.label,
                max_connections=o.max_connections,
                connect_timeout=o.connect_timeout,
                headers={"Authorization": f"Bearer {o.api_key}"} if o.api_key else {},
            )
        return self._streams

    async def start(self) -> None:
        deadline = time.monotonic() + self.options.start_wait
        try:
            while True:
                try:
                    with map_errors(self.label):
                        await self.check()
                    return
                except EngineUnavailable as exc:
                    if time.monotonic() >= deadline:
                        raise
                    logger.info("%s; retrying for %.0f more seconds", exc, deadline - time.monotonic())
                    await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        except BaseException:
            # Nobody calls aclose() after a failed start (``async with engine:`` does not): an open
            # session would be reported unclosed at exit.
            await self.aclose()
            raise

    async def probe(self) -> None:
        # The start-up check, once (no --engine-start-wait): what readiness and a replica's way back need.
        with map_errors(self.label):
            await self.check()

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        streams, self._streams = self._streams, None
        if streams is not None:
            await streams.aclose()

    def describe(self) -> str:
        model = f", model {self.model}" if self.model else ""
        lines = f"; {_lines.describe()}" if self.completion_lines else ""
        return f"{self.name}: {self.url}{model} (token ids over HTTP{lines})"

    # ------------------------------------------------------------------ helpers for checks

    async def get_ok(self, path: str) -> None:
        """GET ``path`` and require a success status (a health endpoint)."""
        status, content = await self._call("GET", path)
        if status == 503:
            raise EngineUnavailable(f"{self.label}: GET {path} answered 503: the engine is not ready (still loading?)")
        if status >= 400:
            raise refused(f"{self.label} (GET {path})", status, content)

    async def openapi_paths(self) -> set[str]:
        """The paths the engine's OpenAPI description lists (empty when it has none)."""
        try:
            with map_errors(self.label):
                spec = await self.get_json("/openapi.json")
            return set(spec.get("paths") or ()) if isinstance(spec, dict) else set()
        except EngineError:
            return set()

    async def get_json(self, path: str) -> Any:
        return self._json_or_raise("GET", path, *await self._call("GET", path))

    async def post_json(self, path: str, body: Any) -> Any:
        return self._json_or_raise("POST", path, *await self._call("POST", path, orjson.dumps(body)))

    async def _call(self, method: str, path: str, data: bytes | None = None) -> tuple[int, bytes]:
        """One bounded request around a stream (start-up checks, aborts): its status and whole body."""
        async with self.client().request(
            method,
            self.url + path,
            data=data,
            headers=_JSON if data is not None else None,
            timeout=self._check_timeout(),
            allow_redirects=False,
        ) as response:
            return response.status, await response.read()

    def _check_timeout(self) -> aiohttp.ClientTimeout:
        # A total bound (sending included): connecting as for any request, then CHECK_TIMEOUT for the answer.
        connect = self.options.connect_timeout
        return aiohttp.ClientTimeout(total=connect + CHECK_TIMEOUT, connect=connect)

    def _json_or_raise(self, method: str, path: str, status: int, content: bytes) -> Any:
        if status >= 400:
            raise refused(f"{self.label} ({method} {path})", status, content)
        return orjson.loads(content)

    def check_detokenized(self, text: object) -> None:
        ids, expected = HARMONY_PROBE
        if text != expected:
            raise EngineMismatch(
                f"{self.label}: the model's tokenizer is not Harmony's (o200k_harmony): ids {ids} decode to "
                f"{_excerpt(text)}, not {expected!r}; serve a gpt-oss (Harmony-format) model"
            )

    async def pick_listed_model(self) -> None:
        """``pick_model`` from the engine's OpenAI-style ``/v1/models``, adopting the model's ``max_model_len``."""
        data = (await self.get_json("/v1/models")).get("data") or []
        self.pick_model([m["id"] for m in data])
        for m in data:
            if m["id"] == self.model and isinstance(m.get("max_model_len"), int):
                self.context_length = m["max_model_len"]

    def pick_model(self, served: list[str]) -> None:
        """Check ``--engine-model`` against the engine's model list, or adopt the engine's only model."""
        if self.model is not None:
            if served and self.model not in served:
                raise EngineMismatch(
                    f"{self.label} serves {', '.join(map(repr, served))}, not {self.model!r} (--engine-model)"
                )
        elif served:
            self.model = served[0]
            if len(served) > 1:
                logger.warning("%s serves several models; using %r (choose with --engine-model)", self.label, served[0])

    # ------------------------------------------------------------------ the stream

    async def generate(self, request: GenerateRequest) -> EngineStream:  # type: ignore[override]
        streams = self.streams()
        reader = self.reader(request)
        label = self.label
        url = self.url + self.path
        yielded = False
        finished = False
        # True once the engine may be generating for us, until it says it has finished: then closing the
        # connection early also calls the engine's abort endpoint (when it has one).
        may_run = False
        response: Answer | None = None
        watchdog = _Watchdog(self.options.first_token_timeout, self.options.stall_timeout)
        loop_time = watchdog.loop.time
        current_task = _current_task_getter(watchdog.loop)
        try:
            try:
                with map_errors(label):
                    try:
                        may_run = True
                        while True:
                            constrained = self.constrains(reader)
                            response = await streams.post(
                                url,
                                orjson.dumps(self.body(reader)),
                                rank=reader.request.priority + 1,
                                headers=tracing.headers(),  # --otel: the engine call's traceparent
                            )
                            if response.status < 400:
                                break
                            error = refused(label, response.status, await _read_bounded(response))
                            response.close()  # pooled already when the body was read to its end
                            if constrained and response.status == 400:
                                # This engine version does not take our constraint: go on without it
                                # (the strict-schema check after generation still applies).
                                dropped = self.relax(reader)
                                if dropped:
                                    logger.warning("%s; generating without %s from now on", error, dropped)
                                    continue
                            may_run = False
                            raise error
                        # Admitted: a streamed response starts now, not after the prefill (tokens.ADMITTED).
                        yield ADMITTED
                        watchdog.task = current_task()  # type: ignore[assignment]  # the task reading on
                        # Each read's lines are fed at once (engine/_lines.py), its tokens then go on as one
                        # chunk (the translator is chunking-invariant).
                        waiter, take = response.waiter, response.take  # readany, without its coroutine
                        lines = Lines(reader, label, _lines.COMPILED)
                        read_lines = lines.read
                        transport_of = response.transport_now
                        reading = current_reading()
                        # Chunks the consumer left where they were read (engine/_reading.py), for this loop to yield
                        # in order, and a bad line met there.
                        left: list[TokenChunk] = []
                        bad: list[Exception] = []

                        def direct() -> bool:
                            """A read, taken in the connection's data callback while this loop waits."""
                            sink = reading.direct if reading is not None else None
                            if sink is None or left or bad:
                                return False  # the loop reads it (after what it has been left, in order)
                            try:
                                read_lines(take())
                            except Exception as exc:
                                bad.append(exc)
                            for chunk in reader.take():
                                if left or bad:  # after one left or a bad line: in order, through the loop
                                    left.append(chunk)
                                    continue
                                try:
                                    if not sink(chunk):
                                        left.append(chunk)
                                except Exception as exc:  # a bug: the stream fails in-band, as if it raised here
                                    bad.append(exc)
                            watchdog.reading = loop_time()
                            return not left and not bad

                        while True:
                            watchdog.reading = loop_time()
                            if yielded and reading is not None and reading.direct is not None:
                                response.direct = direct
                            while not left and not bad and (wait := waiter()) is not None:
                                await wait
                            response.direct = None
                            watchdog.reading = None
                            if left or bad:
                                chunks, left[:] = list(left), []
                                failure: Exception | None = bad.pop() if bad else None
                            else:
                                data = take()
                                if not data and not lines.tail:
                                    break  # the end of the body
                                try:
                                    read_lines(data)  # b"": the body's last line, without its newline
                                except Exception as exc:
                                    failure = exc  # what came before the bad line goes on first
                                else:
                                    failure = None
                                chunks = reader.take()
                            if chunks:
                                if not yielded:
                                    watchdog.got_first()
                                    yielded = True
                                attach(transport_of)  # while its consumer is held, not read (engine/_reading.py)
                                for chunk in chunks:
                                    yield chunk
                                # The server may read the first item in the request's task and the rest
                                # in a pump task of its own: the watchdog cancels whichever task waits now.
                                watchdog.task = current_task()  # type: ignore[assignment]
                            if failure is not None:
                                raise failure
                    except asyncio.CancelledError:
                        if watchdog.fired is not None and watchdog.task.uncancel() == 0:
                            raise EngineTimeout(f"{label}: {watchdog.fired}") from None
                        raise
                    watchdog.reading = None
                    if reader.finish is None:
                        raise EngineProtocolError(
                            f"{label}: the stream ended before the engine said how the generation ended"
                        )
                    may_run = False
                    reason, message = reader.finish, reader.message
                    if reason == "stop":
                        extra, problem = settle_stop(request, reader.generated, reader.matched, reader.eos)
                        if problem is not None:
                            reason, message = "error", f"{label}: {problem}"
                        elif extra:
                            reader.generated.extend(extra)
                            yield TokenChunk(token_ids=extra)
                    finished = True
                    yield EngineEnd(
                        reason=reason,
                        message=message,
                        prompt_tokens=len(request.prompt_ids),
                        cached_tokens=reader.cached_tokens,
                    )
            except EngineError as exc:
                if isinstance(exc, EngineUnavailable):
                    may_run = False  # the request never reached the engine
                if not yielded:
                    raise
                finished = True
                yield EngineEnd(
                    reason="error",
                    message=str(exc),
                    prompt_tokens=len(request.prompt_ids),
                    cached_tokens=reader.cached_tokens,
                )
        finally:
            watchdog.close()
            # Closing the connection early is what tells most engines to stop (a response read to its
            # end has already gone back to the pool: closing it then does nothing).
            if response is not None:
                response.direct = None  # (cancelled while waiting: the callback and the answer hold each other)
                response.close()
            if may_run and not finished:
                # Shielded and bounded: this runs when the client went away (a cancelled scope).
                with anyio.move_on_after(ABORT_TIMEOUT, shield=True):
                    try:
                        await self.abort(reader)
                    except Exception as exc:  # the abort is a courtesy: the connection is closed anyway
                        logger.info("%s: abort request failed: %s", label, exc)


_JSON = {"content-type": "application/json"}


async def _read_bounded(response: Answer, limit: int = 64 * 1024) -> bytes:
    # An error body is read for its message only; an engine sending megabytes must not cost megabytes.
    data = bytearray()
    while len(data) < limit:
        part = await response.readany()
        if not part:
            break
        data += part
    return bytes(data)


def parse_chat_logprobs(lp: Any, ids: Sequence[int], top: int) -> list[TokenLogprob]:
    """Chat-style logprobs (``{"content": [{"token": "token_id:N", "logprob", "top_logprobs": […]}]}``).

    An alternative is identified by an integer ``token_id`` (vLLM's ``/inference/v1/generate``, which
    sends no token strings) or a ``"token_id:N"`` token string; others are left out. The sampled token
    is known from ``ids``.
    """
    entries = lp["content"]
    if len(entries) != len(ids):
        raise EngineProtocolError(f"logprobs for {len(entries)} tokens in a chunk of {len(ids)}")
    out = []
    for entry in entries:
        pairs = []
        for alt in entry.get("top_logprobs") or ():
            token = _alternative_id(alt)
            if token is not None:
                pairs.append((token, _logprob(alt["logprob"])))
        pairs.sort(key=lambda p: -p[1])
        out.append(TokenLogprob(logprob=_logprob(entry["logprob"]), top=tuple(pairs[:top])))
    return out


def _alternative_id(alt: Any) -> int | None:
    token_id = alt.get("token_id")
    if is_token_id(token_id):
        return token_id  # type: ignore[no-any-return]
    token = alt.get("token")
    if isinstance(token, str) and token.startswith("token_id:") and token[9:].isdigit():
        return int(token[9:])
    return None


def max_new_tokens(request: GenerateRequest, context_length: int | None) -> int:
    """The budget to send: the request's, else what the engine's context leaves, else a default."""
    if request.max_tokens is not None:
        return request.max_tokens
    if context_length is not None:
        return max(1, context_length - len(request.prompt_ids))
    return DEFAULT_MAX_TOKENS
