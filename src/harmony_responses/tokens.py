"""Values that cross the engine → translator boundary: token chunks, logprobs and how a generation ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ADMITTED", "EngineEnd", "FinishReason", "TokenChunk", "TokenLogprob"]

# "stop": the engine stopped on a stop token (or its own end of sequence); "length": the token budget ran
# out; "error": the engine failed mid-stream (``message`` says how).
FinishReason = Literal["stop", "length", "error"]


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """The sampled token's log probability and the engine's top alternatives as (token id, logprob)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class TokenChunk:
    """Some generated token ids, as the engine delivered them; ``logprobs`` is per token when asked for."""

    token_ids: list[int]
    logprobs: list[TokenLogprob] | None = None


@dataclass(frozen=True, slots=True)
class EngineEnd:
    """The last thing an engine stream yields: why it ended and the prompt's token counts."""

    reason: FinishReason
    message: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    extra: dict[str, object] = field(default_factory=dict)


# What an HTTP engine yields first, once the engine has admitted the request (its status line and headers
# came, before its prefill): a chunk of no tokens, which every consumer may take as one. A streamed response
# starts there (``response.created`` does not wait for a long prompt's prefill); until the first token the
# engine may still raise an ``EngineError`` (an error object in its stream), as before anything was yielded.
ADMITTED = TokenChunk(token_ids=[])
