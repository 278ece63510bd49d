"""The ``sglang`` engine: SGLang's native ``POST /generate`` with ``input_ids`` (engines.md §3).

Checked against SGLang 0.5.23's own HTTP server, tokenizer manager and detokenizer around a scripted
scheduler (tests/real_engines/sglang). ``output_ids`` is cumulative by default and incremental with
``--incremental-streaming-output``; the reader tells them apart once, at the first chunk that can tell
(``len(output_ids) == meta_info.completion_tokens`` means cumulative, as SGLang's own Harmony code
checks; without a count, whether the chunk repeats what we have), then slices cumulative chunks to
deltas, logprobs alike. The matched stop id stays in ``output_ids`` (``no_stop_trim`` only keeps it in
``text``); when a version trims it anyway, ``meta_info.finish_reason.matched`` says which it was.
SGLang also stops on the model's eos ids (gpt-oss: ``<|endoftext|>`` too), reported as ``matched``.
Cancelling calls ``POST /abort_request`` with the request's ``rid`` besides closing the connection
(SGLang aborts on a closed connection as well; its abort matches the rid as a *prefix*).

Sampling is sent in full (temperature 1, top_p 1, top_k -1 and min_p 0: off; no penalties): the server's
``--preferred-sampling-params`` fills every field a request leaves out. Validation errors (a prompt or a
``max_new_tokens`` over the context) come inside a 200 stream as ``{"error": {"message", "type",
"code": 400}}``; ``refused`` maps them by their code. The ``text.format`` schema and custom
tools' grammars go in ``sampling_params.structural_tag``, starting at the final channel and at a call's
header (_constrain.py). Start-up check: ``/health`` (503 while
the server warms up), ``/v1/models`` (the model name; its ``max_model_len`` becomes ``context_window``)
and ``/detokenize`` with ``skip_special_tokens: false`` (SGLang's default, true, answers ``""`` for
Harmony's special tokens). A server started with ``--skip-tokenizer-init`` has no tokenizer: its
``/detokenize`` answers 400 and its chunks carry no ``text``; ``/server_info`` says so, and the check then
rests on the rest (a warning says the vocabulary could not be checked).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from ..tokens import TokenLogprob
from ._base import EngineError, EngineMismatch, EngineProtocolError, EngineRefused
from ._constrain import structural_tag
from ._http import (
    HARMONY_PROBE,
    HTTPEngine,
    StreamReader,
    _logprob,
    max_new_tokens,
    refused,
    token_ids,
)

__all__ = ["PLAIN_SAMPLING", "SGLangEngine"]

logger = logging.getLogger("harmony_responses.engine")

# The API's sampling meaning, said explicitly: what SGLang would otherwise take from
# --preferred-sampling-params. top_k -1 is SGLang's "whole vocabulary".
PLAIN_SAMPLING: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
}


class _Reader(StreamReader):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.cumulative: bool | None = None  # decided at the first chunk that can tell

    def feed(self, obj: Any) -> None:
        self.check_error(obj)
        meta = obj.get("meta_info") or {}
        out = token_ids(obj.get("output_ids") or [], "output_ids")
        have = len(self.generated)
        if self.cumulative is None and have:
            completion = meta.get("completion_tokens")
            if type(completion) is int and len(out) == completion and len(out) >= have:
                self.cumulative = True
            elif type(completion) is int and have + len(out) == completion:
                self.cumulative = False
            else:
                self.cumulative = len(out) >= have and out[:have] == self.generated
        new = out[have:] if self.cumulative else out
        logprobs = self._logprobs(meta, have, new) if self.request.top_logprobs is not None and new else None
        cached = meta.get("cached_tokens")
        if type(cached) is int:
            self.cached_tokens = cached
        finish = meta.get("finish_reason")
        if finish:
            self._finish(finish)
        self.chunk(new, logprobs)

    def _logprobs(self, meta: dict[str, Any], have: int, new: list[int]) -> list[TokenLogprob] | None:
        values = meta.get("output_token_logprobs")
        if not values:
            return None
        tops = meta.get("output_top_logprobs") or [None] * len(values)
        # The arrays follow output_ids: whole so far (cumulative) or this chunk's only.
        start = have if len(values) == have + len(new) else 0
        values, tops = values[start:], tops[start:]
        if len(values) != len(new) or len(tops) != len(new):
            raise EngineProtocolError(f"{self.label}: logprobs for {len(values)} tokens in a chunk of {len(new)}")
        k = self.request.top_logprobs or 0
        out = []
        for (value, token, *_), alternatives in zip(values, tops, strict=True):
            if token != new[len(out)]:
                raise EngineProtocolError(
                    f"{self.label}: logprobs for token {token} where the output has {new[len(out)]}"
                )
            pairs = sorted(((int(a[1]), _logprob(a[0])) for a in alternatives or ()), key=lambda p: -p[1])
            out.append(TokenLogprob(logprob=_logprob(value), top=tuple(pairs[:k])))
        return out

    def _finish(self, finish: Any) -> None:
        kind = finish.get("type") if isinstance(finish, dict) else finish
        if kind == "stop":
            self.finish = "stop"
            matched = finish.get("matched") if isinstance(finish, dict) else None
            if type(matched) is int:
                self.matched = matched
            elif matched is not None:
                self.eos = True  # a stop string: none of ours
        elif kind == "length":
            self.finish = "length"
        elif kind == "abort":
            message = finish.get("message") if isinstance(finish, dict) else None
            self.finish, self.message = "error", f"{self.label}: the engine aborted the generation ({message})"
        else:
            self.finish, self.message = "error", f"{self.label}: unknown finish_reason {finish!r}"


class SGLangEngine(HTTPEngine):
    """SGLang over HTTP; see the module docstring."""

    name = "sglang"
    default_url = "http://127.0.0.1:30000"
    path = "/generate"

    def reader(self, request: Any) -> StreamReader:
        return _Reader(request, self.label)

    def constrains(self, reader: StreamReader) -> bool:
        return structural_tag(reader.request, final=self.constrain_final, tools=self.constrain_tools) is not None

    def body(self, reader: StreamReader) -> dict[str, Any]:
        request = reader.request
        sampling: dict[str, Any] = {
            "max_new_tokens": max_new_tokens(request, self.context_length),
            "stop_token_ids": list(request.stop_token_ids),
            "skip_special_tokens": False,
            "no_stop_trim": True,
            **PLAIN_SAMPLING,
        }
        if request.temperature is not None:
            sampling["temperature"] = request.temperature
        if request.top_p is not None:
            sampling["top_p"] = request.top_p
        tag = structural_tag(request, final=self.constrain_final, tools=self.constrain_tools)
        if tag is not None:
            sampling["structural_tag"] = orjson.dumps(tag).decode()
        body: dict[str, Any] = {
            "input_ids": request.prompt_ids,
            "rid": reader.rid,
            "stream": True,
            "sampling_params": sampling,
        }
        if request.top_logprobs is not None:
            body.update(
                return_logprob=True,
                top_logprobs_num=request.top_logprobs,
                logprob_start_len=-1,
                return_text_in_logprobs=False,
            )
        if request.priority and self.options.priority:
            # SGLang's: higher first by default (unless started with --schedule-low-priority-values-first).
            body["priority"] = -request.priority
        return body

    async def check(self) -> None:
        await self.get_ok("/health")
        await self.pick_listed_model()
        ids, _ = HARMONY_PROBE
        try:
            # skip_special_tokens defaults to true there: Harmony's tokens would come back as "".
            detokenized = await self.post_json("/detokenize", {"tokens": ids, "skip_special_tokens": False})
        except EngineRefused:
            # A server started with --skip-tokenizer-init has no tokenizer (its /detokenize answers 400)
            # and serves ids only, which is all we use: it can serve, its vocabulary just cannot be checked.
            if not await self._skips_tokenizer_init():
                raise
            logger.warning(
                "%s runs with --skip-tokenizer-init: its tokenizer cannot be checked; it must be Harmony's "
                "(o200k_harmony, a gpt-oss model)",
                self.label,
            )
            return
        text = detokenized.get("text") if isinstance(detokenized, dict) else None
        if text is None:
            raise EngineMismatch(f"{self.label}: /detokenize answered {detokenized!r}, not {{'text': …}}")
        self.check_detokenized(text)

    async def _skips_tokenizer_init(self) -> bool:
        for path in ("/server_info", "/get_server_info"):  # older versions have only the second
            try:
                info = await self.get_json(path)
            except (EngineError, ValueError):
                continue
            if isinstance(info, dict):
                return info.get("skip_tokenizer_init") is True
        return False

    async def abort(self, reader: StreamReader) -> None:
        # SGLang answers 200 with an empty body (not JSON): only the status says whether it was taken.
        status, content = await self._call("POST", "/abort_request", orjson.dumps({"rid": reader.rid}))
        if status >= 400:
            raise refused(f"{self.label} (POST /abort_request)", status, content)
