"""The engine seam: what the server asks an engine for, and the contract every engine keeps.

An engine is the ``handle_async_request`` of this project (httpx's transport seam): token ids go in,
token ids come out, and everything above it (rendering, parsing Harmony, SSE) is engine-agnostic.

The stream contract, for every ``Engine.generate``:

- it yields zero or more ``TokenChunk`` and then exactly one ``EngineEnd``, last;
- the generated ids *include* the stop token (``<|call|>`` or ``<|return|>``) when the engine stopped on
  one, and the finish reason is then ``"stop"``; a budget cut is ``"length"``;
- a failure once the stream is under way is reported in-band as ``EngineEnd(reason="error",
  message=...)``, never raised, so that the server can still close the response properly;
- a failure before anything was yielded (engine unreachable, request refused) raises ``EngineError``,
  which the server turns into an HTTP error (503) because no response has started yet;
- cancelling the consuming task, or ``aclose()`` on the returned generator, stops the generation
  promptly and releases what it holds (HTTP adapters close the connection and abort the engine request).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from ..tokens import EngineEnd, TokenChunk

__all__ = ["HARMONY_STOP_TOKEN_IDS", "Engine", "EngineError", "EngineStream", "GenerateRequest"]

# <|call|> and <|return|>: what the sampler must stop on (harmony.md §1). Never <|end|>: the model
# writes several messages per turn separated by it.
HARMONY_STOP_TOKEN_IDS: tuple[int, ...] = (200012, 200002)

# The most alternatives the Responses API lets a client ask for (``top_logprobs`` is 0..20).
MAX_TOP_LOGPROBS = 20

EngineStream = AsyncGenerator[TokenChunk | EngineEnd, None]


class EngineError(Exception):
    """The engine cannot serve: raised by ``start()``, or by ``generate()`` before its first item.

    Exception tree (HTTP adapters add subclasses under it)::

        EngineError          engine unusable or request refused before the stream started (→ 503)

    Once a stream has yielded anything, failures arrive as ``EngineEnd(reason="error")`` instead.
    """


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
        request_id: for the engine's logs and abort endpoints.

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
    request_id: str | None = None

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {self.max_tokens}")
        if self.top_logprobs is not None and not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {self.top_logprobs}")


class Engine(abc.ABC):
    """Something that continues a token-id prompt; see the module docstring for the stream contract.

    ``generate`` is usually written as an async generator method. ``start`` and ``aclose`` bracket the
    engine's life (``async with engine:`` does both); ``describe`` is one line for the startup banner.
    """

    name: str

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
