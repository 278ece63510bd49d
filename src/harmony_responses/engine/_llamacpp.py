"""The ``llamacpp`` engine: llama.cpp's ``llama-server``, native ``POST /completion`` (engines.md §4).

The prompt goes as a token array with ``return_tokens``; each streamed chunk carries one generated id in
``tokens`` and the running count in ``tokens_predicted``. There is no per-request stop-id list:
generation ends on the vocabulary's end-of-generation tokens, which for gpt-oss GGUFs are ``<|return|>``
and ``<|call|>`` (llama.cpp drops ``<|end|>`` from that set when both are present). ``stop_type:
"eos"`` is a stop (the id is appended from the open message when the server leaves it out), ``"limit"``
the budget or a full context (``truncated: true``; llama.cpp stops one token before ``n_ctx``). A build
that still counts ``<|end|>`` as end-of-generation stops after the analysis message: that is reported
as an error naming the cause (``settle_stop``).

Ids llama.cpp does not send. While the generated text ends inside a UTF-8 character, llama-server holds
the chunk back, and the chunk that completes the character carries only *its* id, with the text of all
of them (``Hi 🚀`` arrives as ``Hi`` then `` 🚀`` with only the id of its last byte, 222; 169883 is never
sent). ``tokens_predicted`` jumps by the number of ids left out; ``recover_ids`` finds them from the
chunk's text: its bytes less the sent id's are the missing ids' bytes, split into exactly that many
vocabulary tokens such that every cut falls inside a character (else llama-server would have sent it).
That split is unique unless several fragments of one character are themselves tokens; then the split
with the longest first pieces (the tokenizer's own preference) is taken. Their logprobs were never
sent: they get 0.0 and no alternatives. Ids held back when generation ends mid-character (a budget cut
inside an emoji) are never sent at all, neither their bytes: they are logged, and usage misses them.

Sampling is sent in full (``PLAIN_SAMPLING``): llama-server otherwise samples with its own defaults
(temperature 0.8, top_k 40, top_p 0.95, min_p 0.05), the operator's flags or the GGUF's
``general.sampling.*`` recommendations, sampler order included. Logprobs come id-keyed in
``completion_probabilities`` (pre-sampling, ``post_sampling_probs`` off). Cached prompt tokens are
``timings.cache_n`` (else the prompt's length less ``timings.prompt_n``). Closing the connection
aborts. Custom tools' grammars go as a lazy grammar triggered at a call's recipient (``grammar``,
``grammar_lazy``, ``grammar_triggers``: _constrain.py), which holds the rest of the generation, the call.
No ``text.format`` constraint: a grammar triggered at the final channel's header would do, but the schema
would first have to become GBNF.

Start-up check: ``/health`` (503 while the model loads: retried with ``--engine-start-wait``), ``/props``
(``role: "router"`` in router mode, ``--models-dir``, where every call names its model), ``/v1/models``
(``--engine-model`` must be one of the ids or aliases it lists, or a single model's file name; without
it the only model is adopted), ``/detokenize`` of Harmony's special tokens, and the context of one slot,
``n_ctx`` (``context_window``; ``-c`` divided by ``-np`` unless the KV cache is unified).
"""

from __future__ import annotations

import functools
import logging
import math
from pathlib import PurePath
from typing import Any
from urllib.parse import quote

from ..tokens import TokenLogprob
from ..vocab import load_vocabulary
from ._base import EngineMismatch, EngineProtocolError, EngineRefused
from ._constrain import lazy_grammar
from ._http import (
    HARMONY_PROBE,
    LOGPROB_FLOOR,
    HTTPEngine,
    StreamReader,
    _logprob,
    max_new_tokens,
    token_ids,
)

__all__ = ["PLAIN_SAMPLING", "LlamaCppEngine", "recover_ids"]

logger = logging.getLogger("harmony_responses.engine")

FIRST_SPECIAL = 199998

# Everything llama-server's sampling chain applies (server defaults, its flags, the GGUF's recommended
# settings), set to what the API means: temperature 1 over the whole vocabulary, no penalties, the
# plain samplers in a fixed order (a GGUF or --samplers may leave out temperature altogether).
PLAIN_SAMPLING: dict[str, Any] = {
    "temperature": 1.0,
    "dynatemp_range": 0.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "top_n_sigma": -1.0,
    "xtc_probability": 0.0,
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "dry_multiplier": 0.0,
    "mirostat": 0,
    "adaptive_target": -1.0,
    "ignore_eos": False,
    "samplers": ["top_k", "top_p", "min_p", "temperature"],
}


def _entry_logprob(entry: dict[str, Any]) -> float:
    # ``post_sampling_probs`` gives probabilities (``prob``, ``top_probs``) instead of logprobs.
    if "logprob" in entry:
        return _logprob(entry["logprob"])
    prob = float(entry["prob"])
    return math.log(prob) if prob > 0 else LOGPROB_FLOOR


@functools.cache
def _ids_by_bytes() -> dict[bytes, int]:
    table = load_vocabulary().token_bytes
    return {table[i]: i for i in range(FIRST_SPECIAL)}


def _incomplete(text: bytes) -> bool:
    """Whether ``text`` ends inside a UTF-8 character, as llama-server's ``validate_utf8`` judges it."""
    n = len(text)
    for i in range(1, min(4, n) + 1):
        c = text[n - i]
        if (c & 0xE0) == 0xC0 and i < 2 or (c & 0xF0) == 0xE0 and i < 3 or (c & 0xF8) == 0xF0 and i < 4:
            return True
    return False


def recover_ids(before: bytes, missing: bytes, count: int) -> list[int] | None:
    """The ``count`` token ids whose bytes are ``missing``, each cut inside a character; None if none.

    Args:
        before: the text generated before them (its last bytes matter: it ended on a whole character).
        missing: their bytes (the chunk's text less the bytes of the id it carried).
        count: how many ids ``tokens_predicted`` says were left out.
    """
    ids = _ids_by_bytes()
    tail = before[-4:]

    @functools.cache
    def split(start: int, left: int) -> tuple[int, ...] | None:
        if left == 0:
            return () if start == len(missing) else None
        # Longest pieces first: where fragments allow several splits, BPE's own choice is the longest.
        for end in range(len(missing), start, -1):
            token = ids.get(missing[start:end])
            if token is None or not _incomplete(tail + missing[:end]):
                continue
            rest = split(end, left - 1)
            if rest is not None:
                return (token, *rest)
        return None

    found = split(0, count)
    return list(found) if found is not None else None


class _Reader(StreamReader):
    def __init__(self, request: Any, label: str) -> None:
        super().__init__(request, label)
        self.predicted = 0  # ids generated so far (``tokens_predicted``)
        self.text = b""  # the last bytes of the generated text (what a missing id's cut is judged on)
        self.unsent = 0  # ids llama-server never sent (generation ended inside a character)

    def feed(self, obj: Any) -> None:
        self.check_error(obj)
        ids = token_ids(obj.get("tokens") or [], "tokens")
        logprobs = None
        probs = obj.get("completion_probabilities")
        if self.request.top_logprobs is not None and ids and probs:
            logprobs = self._logprobs(probs, ids)
        predicted = obj.get("tokens_predicted")
        if type(predicted) is int:
            gap = predicted - self.predicted - len(ids)
            if gap > 0 and ids and not obj.get("stop"):
                recovered = self._recover(obj.get("content"), ids, gap)
                ids = recovered + ids
                if logprobs is not None:
                    logprobs = [TokenLogprob(logprob=0.0) for _ in recovered] + logprobs
            elif gap > 0 and obj.get("stop"):
                self.unsent = gap
        # In step with the engine's count, also after ids that could not be recovered.
        self.predicted = predicted if type(predicted) is int else self.predicted + len(ids)
        if ids:
            content = obj.get("content")
            self.text = (self.text + content.encode())[-4:] if isinstance(content, str) else b""
        if obj.get("stop"):
            self._finish(obj)
        self.chunk(ids, logprobs)

    def _recover(self, content: Any, ids: list[int], gap: int) -> list[int]:
        vocabulary = load_vocabulary()
        data = content.encode() if isinstance(content, str) else b""
        sent = b""
        for t in ids:
            # A special token shows as its name when llama.cpp's vocabulary marks it user-defined.
            piece = vocabulary.token_bytes[t] if t < FIRST_SPECIAL else vocabulary.special_name(t).encode()
            sent += piece
        if not data.endswith(sent):
            sent = b""
        recovered = None
        if len(data) > len(sent):
            recovered = recover_ids(self.text, data[: len(data) - len(sent)], gap)
        if recovered is None:
            # Not text a model writes (an unfinished character before a special token, which llama.cpp
            # then sends with U+FFFD): go on with the ids that came, as the engine sent them.
            logger.warning(
                "%s: %d token id(s) before %s were not sent and their text %r does not split into that many",
                self.label,
                gap,
                ids,
                content,
            )
            return []
        return recovered

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
        cached, evaluated = timings.get("cache_n"), timings.get("prompt_n")
        if type(cached) is int and cached >= 0:
            self.cached_tokens = cached
        elif type(evaluated) is int:
            self.cached_tokens = max(0, len(self.request.prompt_ids) - evaluated)
        if stop_type == "eos":
            self.finish = "stop"
        elif stop_type == "limit":
            self.finish = "length"
        elif stop_type == "word":
            self.finish, self.eos = "stop", True  # a stop string: none of ours, the text ends there
        else:
            self.finish, self.message = "error", f"{self.label}: generation stopped (stop_type {stop_type!r})"
        if self.unsent:
            logger.info(
                "%s: generation ended inside a character; %d token id(s) were never sent", self.label, self.unsent
            )


class LlamaCppEngine(HTTPEngine):
    """llama.cpp's server over HTTP; see the module docstring."""

    name = "llamacpp"
    default_url = "http://127.0.0.1:8080"
    path = "/completion"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.router = False  # llama-server --models-dir: every call names its model

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
            **PLAIN_SAMPLING,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.top_logprobs is not None:
            # n_probs 0 means no probabilities at all: ask for one to get the sampled token's.
            body["n_probs"] = max(1, request.top_logprobs)
            body["post_sampling_probs"] = False
        grammar = lazy_grammar(request) if self.constrain_tools else None
        if grammar is not None:
            body.update(grammar)
        if self.model is not None:
            body["model"] = self.model
        return body

    def constrains(self, reader: StreamReader) -> bool:
        return self.constrain_tools and lazy_grammar(reader.request) is not None

    async def check(self) -> None:
        await self.get_ok("/health")
        props = await self.get_json("/props")
        self.router = isinstance(props, dict) and props.get("role") == "router"
        try:
            listed = await self.get_json("/v1/models")
        except EngineRefused as exc:
            if exc.status != 404:
                raise
            listed = None  # a build without the OpenAI-style routes: nothing to check the name against
        data = listed.get("data") if isinstance(listed, dict) else None
        served: list[str] = []
        names: dict[str, str] = {}  # every name a served model answers to → its id
        for m in data or ():
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                served.append(m["id"])
                aliases = [a for a in m.get("aliases") or () if isinstance(a, str)]
                if not self.router:
                    # One model, listed by its file's path unless started with --alias: its file name
                    # (with or without .gguf) names it too.
                    aliases += [PurePath(m["id"]).name, PurePath(m["id"]).stem]
                for name in (m["id"], *aliases):
                    names.setdefault(name, m["id"])
        if self.model is not None and names:
            if self.model not in names:
                raise EngineMismatch(
                    f"{self.label} serves {', '.join(map(repr, served))}, not {self.model!r} (--engine-model)"
                )
            self.model = names[self.model]
        if self.model is None:
            if self.router and not served:
                raise EngineMismatch(f"{self.label} is a llama-server router with no model (--models-dir is empty?)")
            self.pick_model(served)
        query = {"model": self.model} if self.router else {}
        ids, _ = HARMONY_PROBE
        detokenized = await self.post_json("/detokenize", {"tokens": ids, **query})
        text = detokenized.get("content") if isinstance(detokenized, dict) else None
        if text is None:
            raise EngineMismatch(f"{self.label}: /detokenize answered {detokenized!r}, not {{'content': …}}")
        self.check_detokenized(text)
        if self.router:
            props = await self.get_json(f"/props?model={quote(self.model or '', safe='')}")
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        n_ctx = (settings or {}).get("n_ctx")
        if type(n_ctx) is int and n_ctx > 0:
            self.context_length = n_ctx
