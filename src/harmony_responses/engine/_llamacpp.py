"""The ``llamacpp`` engine: llama.cpp's ``llama-server``, native ``POST /completion`` (engines.md §4).

The prompt goes as a token array with ``return_tokens``; each chunk's ``tokens`` are the new ids. There
is no per-request stop-id list: generation ends on the vocabulary's end-of-generation tokens, which
for gpt-oss GGUFs are ``<|return|>`` and ``<|call|>``. ``stop_type: "eos"`` is a stop (the id is
appended from the open message when the server leaves it out), ``"limit"`` the budget. A build that
still counts ``<|end|>`` as end-of-generation stops after the analysis message: that is reported as an
error naming the cause (``settle_stop``). Logprobs come id-keyed in ``completion_probabilities``.
Cached prompt tokens are the prompt's length less ``timings.prompt_n`` (what was evaluated).
Closing the connection aborts. No ``text.format`` constraint: llama.cpp's grammars constrain the whole
output, Harmony headers included. Start-up check: ``/health`` (503 while loading) and ``/detokenize``.
"""

from __future__ import annotations

import math
from typing import Any

from ..tokens import TokenChunk, TokenLogprob
from ._base import EngineMismatch, EngineProtocolError
from ._http import HARMONY_PROBE, HTTPEngine, StreamReader, _logprob, max_new_tokens, token_ids

__all__ = ["LlamaCppEngine"]


def _entry_logprob(entry: dict[str, Any]) -> float:
    # ``post_sampling_probs`` gives probabilities (``prob``, ``top_probs``) instead of logprobs.
    if "logprob" in entry:
        return _logprob(entry["logprob"])
    prob = float(entry["prob"])
    return math.log(prob) if prob > 0 else -9999.0


class _Reader(StreamReader):
    def feed(self, obj: Any) -> TokenChunk | None:
        self.check_error(obj)
        ids = token_ids(obj.get("tokens") or [], "tokens")
        logprobs = None
        probs = obj.get("completion_probabilities")
        if self.request.top_logprobs is not None and ids and probs:
            logprobs = self._logprobs(probs, ids)
        if obj.get("stop"):
            self._finish(obj)
        return self.chunk(ids, logprobs)

    def _logprobs(self, probs: list[dict[str, Any]], ids: list[int]) -> list[TokenLogprob]:
        if len(probs) != len(ids):
            raise EngineProtocolError(f"{self.label}: logprobs for {len(probs)} tokens in a chunk of {len(ids)}")
        k = self.request.top_logprobs or 0
        out = []
        for entry in probs:
            alternatives = entry.get("top_logprobs") or entry.get("top_probs") or ()
            pairs = sorted(((int(a["id"]), _entry_logprob(a)) for a in alternatives), key=lambda p: -p[1])
            out.append(TokenLogprob(logprob=_entry_logprob(entry), top=tuple(pairs[:k])))
        return out

    def _finish(self, obj: dict[str, Any]) -> None:
        stop_type = obj.get("stop_type")
        timings = obj.get("timings") or {}
        evaluated = timings.get("prompt_n")
        if type(evaluated) is int:
            self.cached_tokens = max(0, len(self.request.prompt_ids) - evaluated)
        if stop_type == "eos":
            self.finish = "stop"
        elif stop_type == "limit":
            self.finish = "length"
        elif stop_type == "word":
            self.finish, self.eos = "stop", True  # a stop string: none of ours, the text ends there
        else:
            self.finish, self.message = "error", f"{self.label}: generation stopped (stop_type {stop_type!r})"


class LlamaCppEngine(HTTPEngine):
    """llama.cpp's server over HTTP; see the module docstring."""

    name = "llamacpp"
    default_url = "http://127.0.0.1:8080"
    path = "/completion"

    def reader(self, request: Any) -> StreamReader:
        return _Reader(request, self.label)

    def body(self, reader: StreamReader) -> dict[str, Any]:
        request = reader.request
        body: dict[str, Any] = {
            "prompt": request.prompt_ids,
            "n_predict": max_new_tokens(request, self.context_length),
            "stream": True,
            "cache_prompt": True,
            "return_tokens": True,
            "id_slot": -1,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.top_logprobs is not None:
            # n_probs 0 means no probabilities at all: ask for one to get the sampled token's.
            body["n_probs"] = max(1, request.top_logprobs)
            body["post_sampling_probs"] = False
        if self.model is not None:
            body["model"] = self.model
        return body

    async def check(self) -> None:
        await self.get_ok("/health")
        ids, _ = HARMONY_PROBE
        detokenized = await self.post_json("/detokenize", {"tokens": ids})
        text = detokenized.get("content") if isinstance(detokenized, dict) else None
        if text is None:
            raise EngineMismatch(f"{self.label}: /detokenize answered {detokenized!r}, not {{'content': …}}")
        self.check_detokenized(text)
        props = await self.get_json("/props")
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        n_ctx = (settings or {}).get("n_ctx")
        if type(n_ctx) is int and n_ctx > 0:
            self.context_length = n_ctx
