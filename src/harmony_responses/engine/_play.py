"""Playing a fixed token sequence as an engine stream, as a real engine would deliver it.

The replay and echo engines both know their whole output up front; this module owns what turns it into
a realistic stream: stopping at the first stop token, cutting at ``max_tokens``, chunking, pacing, and
deterministic fake logprobs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..tokens import EngineEnd, FinishReason, TokenChunk, TokenLogprob
from ._base import EngineStream, GenerateRequest

__all__ = ["fake_logprobs", "play"]

# Fake alternatives stay among ordinary (non-special) ids so that they decode to text.
_ORDINARY_TOKENS = 199998


def fake_logprobs(tokens: Sequence[int], top: int) -> list[TokenLogprob]:
    """Deterministic logprobs: the k-th generated token (from 0) gets ``-0.1 * (k + 1)``.

    ``top`` alternatives follow: the sampled token itself, then ids ``token + j`` (modulo the ordinary
    vocabulary) with logprob ``lp - j``, so that they are sorted and distinct.
    """
    result = []
    for k, token in enumerate(tokens):
        lp = round(-0.1 * (k + 1), 6)
        alternatives = tuple(
            (token if j == 0 else (token + j) % _ORDINARY_TOKENS, round(lp - j, 6)) for j in range(top)
        )
        result.append(TokenLogprob(logprob=lp, top=alternatives))
    return result


def _cut(
    tokens: Sequence[int], request: GenerateRequest, finish: FinishReason, message: str | None
) -> tuple[Sequence[int], FinishReason, str | None]:
    # A real engine stops at the first stop id it samples; whatever was scripted after it never comes,
    # and neither does the scripted ending. A stop id that *is* the last token keeps the scripted ending
    # (e.g. an error scripted right after <|return|>).
    stops = request.stop_token_ids
    if stops:
        for i in range(len(tokens) - 1):
            if tokens[i] in stops:
                tokens, finish, message = tokens[: i + 1], "stop", None
                break
    if request.max_tokens is not None and len(tokens) > request.max_tokens:
        tokens, finish, message = tokens[: request.max_tokens], "length", None
    return tokens, finish, message


async def play(
    tokens: Sequence[int],
    request: GenerateRequest,
    *,
    finish: FinishReason,
    message: str | None = None,
    chunk: int = 1,
    delay: float = 0.0,
    logprobs: bool = True,
    chunks: Sequence[int] | None = None,
    recorded_logprobs: Sequence[TokenLogprob | None] | None = None,
    prompt_tokens: int | None = None,
    cached_tokens: int = 0,
) -> EngineStream:
    """Stream ``tokens`` in chunks of ``chunk`` ids, sleeping ``delay`` seconds between chunks.

    ``finish`` and ``message`` are the scripted ending, replaced by ``"stop"`` or ``"length"`` when the
    request's stop ids or budget cut the tokens short. Logprobs are produced when ``logprobs`` is true
    and the request asks for them. A recording replays exactly: ``chunks`` gives each chunk's size (in
    place of ``chunk``), ``recorded_logprobs`` the engine's logprobs per token (None where it gave
    none), and ``prompt_tokens``/``cached_tokens`` the counts it reported.
    """
    tokens, finish, message = _cut(tokens, request, finish, message)
    top = request.top_logprobs
    lps: Sequence[TokenLogprob | None] | None = None
    if top is not None:
        if recorded_logprobs is not None:
            lps = [lp if lp is None else TokenLogprob(logprob=lp.logprob, top=lp.top[:top]) for lp in recorded_logprobs]
        elif logprobs:
            lps = fake_logprobs(tokens, top)
    if chunks is None:
        chunks = [chunk] * ((len(tokens) + chunk - 1) // chunk)
    at = 0
    for size in chunks:
        if at >= len(tokens):
            break
        # Between chunks only: the first chunk comes at once, like a warm engine's first token.
        if at and delay > 0:
            await asyncio.sleep(delay)
        part = lps[at : at + size] if lps is not None else None
        yield TokenChunk(
            token_ids=list(tokens[at : at + size]),
            logprobs=None if part is None or None in part else list(part),  # type: ignore[arg-type]
        )
        at += size
    yield EngineEnd(
        reason=finish,
        message=message,
        prompt_tokens=len(request.prompt_ids) if prompt_tokens is None else prompt_tokens,
        cached_tokens=cached_tokens,
    )
