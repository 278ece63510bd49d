"""The engine seam: what the server asks an engine for, and the contract every engine keeps.

An engine is the ``handle_async_request`` of this project (httpx's transport seam): token ids go in,
token ids come out, and everything above it (rendering, parsing Harmony, SSE) is engine-agnostic.

The stream contract, for every ``Engine.generate``:

- it yields zero or more ``TokenChunk`` and then exactly one ``EngineEnd``, last; an HTTP engine's first
  item is ``tokens.ADMITTED`` (a chunk of no tokens) once the engine has admitted the request, before
  its prefill, and it may still raise ``EngineError`` after it until its first token;
- the generated ids *include* the stop token (``<|call|>`` or ``<|return|>``) when the engine stopped on
  one, and the finish reason is then ``"stop"``; a budget cut is ``"length"``;
- a failure once the stream is under way is reported in-band as ``EngineEnd(reason="error",
  message=...)``, never raised, so that the server can still close the response properly;
- a failure before anything but ``ADMITTED`` was yielded (engine unreachable, request refused) raises
  ``EngineError``,
  which the server turns into an HTTP error (503) because no response has started yet;
- cancelling the consuming task, or ``aclose()`` on the returned generator, stops the generation
  promptly and releases what it holds (HTTP adapters close the connection and abort the engine request);
- an engine reading a socket names its transport (``_reading.attach``) at each chunk, so that while its
  consumer is held the socket is not read (``_reading``).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from ..tokens import EngineEnd, TokenChunk

__all__ = [
    "HARMONY_STOP_TOKEN_IDS",
    "Engine",
    "EngineError",
    "EngineHealth",
    "EngineMismatch",
    "EngineProtocolError",
    "EngineRefused",
    "EngineStream",
    "EngineTimeout",
    "EngineUnavailable",
    "GenerateRequest",
    "ToolGrammar",
]

# <|call|> and <|return|>: what the sampler must stop on (harmony.md §1). Never <|end|>: the model
# writes several messages per turn separated by it.
HARMONY_STOP_TOKEN_IDS: tuple[int, ...] = (200012, 200002)

# The most alternatives the Responses API lets a client ask for (``top_logprobs`` is 0..20).
MAX_TOP_LOGPROBS = 20

EngineStream = AsyncGenerator[TokenChunk | EngineEnd, None]


class EngineError(Exception):
    """The engine cannot serve: raised by ``start()``, or by ``generate()`` before its first item.

    Exception tree (``_http.map_errors`` maps every aiohttp exception onto it; in-process engines raise
    the same classes)::

        EngineError               the engine cannot serve this request (→ 503 before the stream)
         ├── EngineUnavailable    cannot reach it: connection refused, unknown host, connect timeout,
         │                        every pooled connection busy
         ├── EngineTimeout        reached, but no first token in time, or the stream stalled
         ├── EngineRefused        it answered with an error: an HTTP status >= 400, or an error object
         │                        in the stream (a context-length refusal → 400 context_length_exceeded)
         ├── EngineProtocolError  it broke its protocol: the connection cut mid-stream, data that is
         │                        not JSON or not the shape engines.md documents
         └── EngineMismatch       (start-up check) it answers, but cannot serve Harmony: no Harmony
                                  vocabulary, not the model asked for, a needed endpoint missing

    Once a stream has yielded anything, failures arrive as ``EngineEnd(reason="error")`` instead, with
    the exception's message. ``status_hint`` and ``code_hint`` tell the server which HTTP error to
    answer with when nothing has been sent yet (as h11's ``error_status_hint``).
    """

    status_hint: int = 503
    code_hint: str = "engine_unavailable"


class EngineUnavailable(EngineError):
    """The engine cannot be reached (nothing was sent, or the connection could not be made)."""


class EngineTimeout(EngineError):
    """The engine took longer than a configured bound: first token, or silence mid-stream."""


class EngineRefused(EngineError):
    """The engine answered with an error (HTTP status >= 400, or an error object in the stream)."""

    def __init__(
        self, message: str, *, status: int | None = None, context_length: bool = False, invalid_request: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        if context_length:
            # The prompt is longer than the engine's context: the client's request is at fault.
            self.status_hint = 400
            self.code_hint = "context_length_exceeded"
        elif invalid_request:
            # The engine refused a parameter of the request (an error object with code 400 in the stream,
            # e.g. more logprobs than the engine allows): the client's request is at fault too.
            self.status_hint = 400
            self.code_hint = "invalid_request_error"


class EngineProtocolError(EngineError):
    """The engine broke its protocol: a cut connection, or data we cannot read."""


class EngineMismatch(EngineError):
    """The start-up check found an engine that answers but cannot serve Harmony as configured."""


@dataclass(frozen=True, slots=True)
class ToolGrammar:
    """A declared tool whose call the engine holds to a grammar: ``{namespace}.{name}``'s arguments.

    ``syntax`` is a custom tool's ``format.syntax`` (``"lark"`` or ``"regex"``: its ``input`` must match
    ``definition``), or ``"json_schema"`` for a strict function (``definition`` is its parameters' JSON
    text: the arguments must match it), ``"json_schema_optional"`` the same with the properties outside
    ``required`` optional (an MCP tool's ``inputSchema``, a non-strict function under
    ``--constrain-function-arguments schema``), or ``"json_object"`` for another function (any one JSON
    object: ``--constrain-function-arguments json``). ``namespace`` is where the prompt declares it (``functions``, a
    namespace tool's name).
    """

    name: str
    syntax: str
    definition: str
    namespace: str = "functions"


@dataclass(frozen=True, kw_only=True)
class GenerateRequest:
    """One engine call: a rendered prompt and how to sample its continuation.

    Args:
        prompt_ids: the whole prompt, ending with ``<|start|>assistant`` (or a prefilled header).
        max_tokens: budget for this call; None lets the engine decide (HTTP adapters always send one).
        temperature, top_p: sampling options; None means the engine's default.
        top_logprobs: None for no logprobs; 0..20 for per-token logprobs with that many alternatives.
        stop_token_ids: ids the engine stops on; the stop id is included in the output.
        response_schema: the ``text.format`` JSON schema, for engines that constrain the final channel.
        tool_grammars: the grammars of the declared custom tools and strict functions, for engines that
            constrain a call's input.
        recipients: the recipients a header may name (``functions.get_weather``, ``python``,
            ``browser.search``…), for engines that hold the ``to=`` of a header to them; ``()`` for none at all
            (``tool_choice: "none"``); None when no tools are declared (nothing is held).
        request_id: for the engine's logs and abort endpoints.
        priority: the response's service tier as a rank, lower first (-1 ``priority``, 0 ``default``, 1
            ``flex``): engines with priority scheduling get it when ``EngineOptions.priority`` says so.
        affinity: what ties this call to earlier ones, most specific first (``response:ID`` of the previous
            response, ``conversation:ID``, ``prompt_cache_key:KEY``): an engine with several replicas sends
            it where those went, so that the replica's prefix cache holds the prompt's start
            (``_replicas.py``). Other engines ignore it.

    Raises:
        ValueError: a budget or logprobs count no engine can honour.
    """

    prompt_ids: list[int]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    stop_token_ids: tuple[int, ...] = HARMONY_STOP_TOKEN_IDS
    response_schema: dict[str, object] | None = None
    tool_grammars: tuple[ToolGrammar, ...] = ()
    recipients: tuple[str, ...] | None = None
    request_id: str | None = None
    affinity: tuple[str, ...] = ()
    priority: int = 0

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {self.max_tokens}")
        if self.top_logprobs is not None and not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {self.top_logprobs}")


@dataclass(frozen=True, slots=True)
class EngineHealth:
    """One engine (or replica) as a readiness probe found it: ``error`` None when it answered."""

    engine: str  # its ``describe()`` line
    error: str | None = None


class Engine(abc.ABC):
    """Something that continues a token-id prompt; see the module docstring for the stream contract.

    ``generate`` is usually written as an async generator method. ``start`` and ``aclose`` bracket the
    engine's life (``async with engine:`` does both); ``describe`` is one line for the startup banner.
    """

    name: str
    # Prompt plus output tokens the engine accepts, as it reported at start-up (vLLM and SGLang
    # ``max_model_len``, llama.cpp ``n_ctx``); None when it does not say. Set by ``start``.
    context_window: int | None = None
    # Its stream may hand chunks to the consumer where they are read, past any generator between them
    # (engine/_reading.py, ``Reading.direct``): only where nothing between must see every chunk. A wrapper
    # that looks at the chunks it relays (a recording) keeps False.
    direct_reads = False

    @abc.abstractmethod
    def generate(self, request: GenerateRequest) -> EngineStream:
        """Stream the continuation of ``request.prompt_ids``: ``TokenChunk``s, then one ``EngineEnd``.

        Raises:
            EngineError: before the first item, when the engine cannot take the request.
        """

    # Deliberately concrete no-ops: most engines need neither step.
    async def start(self) -> None:  # noqa: B027
        """Check that the engine can serve and warm it up; raise ``EngineError`` saying what is wrong."""

    async def aclose(self) -> None:  # noqa: B027
        """Release what the engine holds (connection pools, models)."""

    async def probe(self) -> None:  # noqa: B027
        """Check that the engine answers now (readiness); raise ``EngineError`` saying why not.

        In-process engines always answer; HTTP engines run their start-up check again.
        """

    async def health(self) -> list[EngineHealth]:
        """What a readiness probe finds: one entry per engine behind this one (replicas: one each)."""
        try:
            await self.probe()
        except EngineError as exc:
            return [EngineHealth(self.describe(), str(exc) or type(exc).__name__)]
        return [EngineHealth(self.describe())]

    def describe(self) -> str:
        return self.name

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
