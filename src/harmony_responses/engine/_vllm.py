"""The ``vllm`` engine: vLLM's OpenAI server, token ids in and out (engines.md §2).

Two endpoints, chosen at start from the server's OpenAPI description (checked against vLLM 0.33.0's own
server, tests/real_engines/vllm):

- ``POST /inference/v1/generate`` (tokens in / tokens out) when the server offers it, which it does only
  with ``--enable-scale-out`` or ``--tokens-only`` (otherwise the route answers 403 and is not in the
  OpenAPI description). vLLM names the request ``generate-tokens-<request_id>``, so the abort,
  ``POST /inference/v1/abort_requests`` (or the legacy ``/abort_requests`` of ``--tokens-only``), is sent
  that name: the bare id answers 200 and aborts nothing. Its logprobs come as integer ``token_id``s;
- ``POST /v1/completions`` otherwise, with the prompt as a token-id list and ``return_token_ids``; the
  delta ids come in ``choices[0].token_ids``, cached prompt tokens in the last chunk's usage. Closing
  the connection aborts.

Both carry ``stop_reason`` with the finish: the matched stop id, or null for the model's own end of
sequence. ``<|return|>`` is gpt-oss's tokenizer eos, so vLLM reports it as null too, with the id in the
output; vLLM also adds the generation config's eos ids (``<|endoftext|>`` 199999) to the stop ids. A
chunk without the field (older versions' generate) leaves the stop id to ``settle_stop``'s inference.

Sampling is sent in full (temperature 1, top_p 1, top_k and min_p off, no repetition penalty unless the
request says): vLLM fills every field a request leaves out from the model's ``generation_config.json``
(unless the server runs with ``--generation-config vllm``), and published checkpoints ship sampling
defaults there. Logprobs are asked for with ``return_tokens_as_token_ids`` so that alternatives are
keyed by id. The ``text.format`` schema and custom tools' grammars go in
``structured_outputs.structural_tag`` (on both endpoints), starting at the final channel and at a call's
header (_constrain.py). Start-up check: ``/health``, ``/v1/models`` (the model name; its
``max_model_len`` becomes ``context_window``) and ``/detokenize`` of Harmony's special tokens, which
answers 400 on a ``--tokens-only`` server (no tokenizer): there the check rests on the generate route.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from ..tokens import TokenChunk
from ..vocab import VOCAB_SIZE
from ._base import EngineMismatch, EngineProtocolError, EngineRefused
from ._constrain import structural_tag
from ._http import (
    HARMONY_PROBE,
    HTTPEngine,
    StreamReader,
    max_new_tokens,
    parse_chat_logprobs,
    parse_completion_logprobs,
    token_ids,
)

__all__ = ["CompletionsReader", "VLLMEngine"]

logger = logging.getLogger("harmony_responses.engine")

GENERATE_PATH = "/inference/v1/generate"
COMPLETIONS_PATH = "/v1/completions"
ABORT_PATHS = ("/inference/v1/abort_requests", "/abort_requests")  # preferred first
# The prefix vLLM's generate endpoint puts before the request id it was given (serving.py).
GENERATE_ID_PREFIX = "generate-tokens-"
# What "off" is for each sampling option vLLM would otherwise fill from generation_config.json.
# top_k -1 rather than 0: both mean off in vLLM 0.33, and older versions accepted only -1.
PLAIN_SAMPLING: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
}


class CompletionsReader(StreamReader):
    """Reads OpenAI-completions chunks carrying ``token_ids`` (vLLM, TensorRT-LLM, vLLM's generate).

    ``null_stop_is_eos``: whether ``finish_reason: "stop"`` with no ``stop_reason`` means the model's
    own end of sequence (vLLM's completions) rather than "not said" (then the stop id is inferred).
    """

    null_stop_is_eos = True
    common_lines = True

    def feed(self, obj: Any) -> None:
        # Run once per streamed token: the error test is error_message's, inline for a dict (check_error
        # decides what anything else is).
        if obj.__class__ is not dict or obj.get("error") or obj.get("object") == "error":
            self.check_error(obj)
        usage = obj.get("usage")
        if usage:
            details = usage.get("prompt_tokens_details") or {}
            self.cached_tokens = int(details.get("cached_tokens") or 0)
        choices = obj.get("choices")
        if not choices:
            return
        choice = choices[0]
        raw = choice.get("token_ids")
        # The common line inline: one id, no logprobs asked for, not the last. This is token_ids' one-id check
        # and chunk() without its logprobs, in that order, with the same effects: two calls a token fewer.
        if raw.__class__ is list and len(raw) == 1 and self.request.top_logprobs is None:
            token = raw[0]
            if token.__class__ is int and 0 <= token < VOCAB_SIZE and choice.get("finish_reason") is None:
                self.generated.append(token)
                if self._lps is not None and self._ids:  # the open run has logprobs: it closes
                    self._taken.append(TokenChunk(token_ids=self._ids, logprobs=self._lps))
                    self._ids = []
                    self._lps = None
                self._ids.append(token)
                return
        if raw is None:
            if choice.get("text") or choice.get("finish_reason") is None:
                raise EngineProtocolError(
                    f"{self.label}: a chunk without token_ids; this engine version does not return token ids "
                    "(vLLM needs return_token_ids, 0.10.2 or newer)"
                )
            raw = []
        ids = token_ids(raw, "choices[0].token_ids")
        logprobs = None
        top = self.request.top_logprobs
        if top is not None and ids:
            lp = choice.get("logprobs")
            if lp:
                logprobs = (
                    parse_chat_logprobs(lp, ids, top) if "content" in lp else parse_completion_logprobs(lp, ids, top)
                )
        finish = choice.get("finish_reason")
        if finish is not None:
            self._finish(finish, choice.get("stop_reason"), "stop_reason" in choice)
        self.chunk(ids, logprobs)

    def _finish(self, finish: str, stop_reason: Any, said: bool = True) -> None:
        if finish == "stop":
            self.finish = "stop"
            if type(stop_reason) is int:
                self.matched = stop_reason
            elif stop_reason is None:
                self.eos = said and self.null_stop_is_eos
            else:
                self.eos = True  # a stop *string* matched: none of ours, the text ends there
        elif finish == "length":
            self.finish = "length"
        elif finish == "abort":
            self.finish, self.message = "error", f"{self.label}: the engine aborted the generation"
        else:
            self.finish, self.message = "error", f"{self.label}: unknown finish_reason {finish!r}"


class _GenerateReader(CompletionsReader):
    """``/inference/v1/generate`` chunks: the completions shape's ``choices[0]`` fields, logprobs as
    ``{"content": [{"token_id", "logprob", "top_logprobs": [{"token_id", "logprob"}]}]}``."""


class VLLMEngine(HTTPEngine):
    """vLLM over HTTP; see the module docstring."""

    name = "vllm"
    default_url = "http://127.0.0.1:8000"
    path = COMPLETIONS_PATH
    completion_lines = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.abort_path: str | None = None

    def reader(self, request: Any) -> StreamReader:
        cls = _GenerateReader if self.path == GENERATE_PATH else CompletionsReader
        return cls(request, self.label)

    def constrains(self, reader: StreamReader) -> bool:
        return structural_tag(reader.request, final=self.constrain_final, tools=self.constrain_tools) is not None

    def body(self, reader: StreamReader) -> dict[str, Any]:
        request = reader.request
        sampling: dict[str, Any] = {
            "max_tokens": max_new_tokens(request, self.context_length),
            "stop_token_ids": list(request.stop_token_ids),
            "skip_special_tokens": False,
            **PLAIN_SAMPLING,
        }
        if request.temperature is not None:
            sampling["temperature"] = request.temperature
        if request.top_p is not None:
            sampling["top_p"] = request.top_p
        if request.top_logprobs is not None:
            sampling["logprobs"] = request.top_logprobs
        tag = structural_tag(request, final=self.constrain_final, tools=self.constrain_tools)
        if tag is not None:
            # A field of vLLM's SamplingParams: the completions body and generate's sampling_params take it alike.
            sampling["structured_outputs"] = {"structural_tag": orjson.dumps(tag).decode()}
        if self.path == GENERATE_PATH:
            body: dict[str, Any] = {
                "request_id": reader.rid,
                "token_ids": request.prompt_ids,
                "sampling_params": sampling,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        else:
            body = {
                "prompt": request.prompt_ids,
                "request_id": reader.rid,
                "stream": True,
                "stream_options": {"include_usage": True},
                "return_token_ids": True,
                "include_stop_str_in_output": True,
                **sampling,
            }
            if request.top_logprobs is not None:
                body["return_tokens_as_token_ids"] = True
        if self.model is not None:
            body["model"] = self.model
        if request.priority and self.options.priority:
            body["priority"] = request.priority  # vLLM's: lower first, 0 by default (GenerateRequest's own scale)
        return body

    async def check(self) -> None:
        await self.get_ok("/health")
        await self.pick_listed_model()
        paths = await self.openapi_paths()
        generate = GENERATE_PATH in paths
        ids, _ = HARMONY_PROBE
        body: dict[str, Any] = {"tokens": ids}
        if self.model is not None:
            body["model"] = self.model
        try:
            detokenized = await self.post_json("/detokenize", body)
        except EngineRefused as exc:
            if not (generate and exc.status == 400):
                raise
            # --tokens-only: the server has no tokenizer to check; the ids we send are Harmony's anyway.
            logger.info("%s: /detokenize refused (%s); a tokens-only server, tokenizer not checked", self.label, exc)
        else:
            if not isinstance(detokenized, dict) or "prompt" not in detokenized:
                raise EngineMismatch(f"{self.label}: /detokenize answered {detokenized!r}, not {{'prompt': …}}")
            self.check_detokenized(detokenized["prompt"])
        if generate:
            self.path = GENERATE_PATH
            self.abort_path = next((p for p in ABORT_PATHS if p in paths), None)

    async def abort(self, reader: StreamReader) -> None:
        if self.abort_path is not None and self.path == GENERATE_PATH:
            await self.post_json(self.abort_path, {"request_ids": [GENERATE_ID_PREFIX + reader.rid]})

    def describe(self) -> str:
        return super().describe() + f", {self.path}"
