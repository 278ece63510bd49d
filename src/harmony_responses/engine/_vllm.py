"""The ``vllm`` engine: vLLM's OpenAI server, token ids in and out (engines.md §2).

Two endpoints, chosen at start from the server's OpenAPI description:

- ``POST /inference/v1/generate`` (tokens in / tokens out) when the server offers it; its chunks carry no
  ``stop_reason``, so a stripped stop id is inferred from the open message (``settle_stop``); when the
  server also offers ``POST /abort_requests`` it is called on cancellation;
- ``POST /v1/completions`` otherwise, with the prompt as a token-id list and ``return_token_ids``; the
  delta ids come in ``choices[0].token_ids``, the matched stop id in ``stop_reason`` (null: the model's
  own end of sequence), cached prompt tokens in the last chunk's usage. Closing the connection aborts.

Logprobs are asked for with ``return_tokens_as_token_ids`` so that alternatives are keyed by id. The
``text.format`` schema goes in ``structured_outputs.structural_tag``, starting at the final channel
(completions only). Start-up check: ``/health``, ``/v1/models`` (the model name, ``max_model_len``) and
``/detokenize`` of Harmony's special tokens.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..tokens import TokenChunk
from ._base import EngineMismatch, EngineProtocolError
from ._http import (
    HARMONY_PROBE,
    HTTPEngine,
    StreamReader,
    final_channel_tag,
    max_new_tokens,
    parse_chat_logprobs,
    parse_completion_logprobs,
    token_ids,
)

__all__ = ["CompletionsReader", "VLLMEngine"]

GENERATE_PATH = "/inference/v1/generate"
COMPLETIONS_PATH = "/v1/completions"
ABORT_PATH = "/abort_requests"


class CompletionsReader(StreamReader):
    """Reads OpenAI-completions chunks carrying ``token_ids`` (vLLM, TensorRT-LLM, vLLM's generate).

    ``null_stop_is_eos``: whether ``finish_reason: "stop"`` with no ``stop_reason`` means the model's
    own end of sequence (vLLM's completions) rather than "not said" (then the stop id is inferred).
    """

    null_stop_is_eos = True

    def feed(self, obj: Any) -> TokenChunk | None:
        self.check_error(obj)
        usage = obj.get("usage")
        if usage:
            details = usage.get("prompt_tokens_details") or {}
            self.cached_tokens = int(details.get("cached_tokens") or 0)
        choices = obj.get("choices")
        if not choices:
            return None
        choice = choices[0]
        raw = choice.get("token_ids")
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
        lp = choice.get("logprobs")
        if top is not None and ids and lp:
            logprobs = parse_chat_logprobs(lp, ids, top) if "content" in lp else parse_completion_logprobs(lp, ids, top)
        finish = choice.get("finish_reason")
        if finish is not None:
            self._finish(finish, choice.get("stop_reason"))
        return self.chunk(ids, logprobs)

    def _finish(self, finish: str, stop_reason: Any) -> None:
        if finish == "stop":
            self.finish = "stop"
            if type(stop_reason) is int:
                self.matched = stop_reason
            elif stop_reason is None:
                self.eos = self.null_stop_is_eos
            else:
                self.eos = True  # a stop *string* matched: none of ours, the text ends there
        elif finish == "length":
            self.finish = "length"
        elif finish == "abort":
            self.finish, self.message = "error", f"{self.label}: the engine aborted the generation"
        else:
            self.finish, self.message = "error", f"{self.label}: unknown finish_reason {finish!r}"


class _GenerateReader(CompletionsReader):
    null_stop_is_eos = False  # the generate endpoint never says which stop id matched


class VLLMEngine(HTTPEngine):
    """vLLM over HTTP; see the module docstring."""

    name = "vllm"
    default_url = "http://127.0.0.1:8000"
    path = COMPLETIONS_PATH

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.abort_endpoint = False

    def reader(self, request: Any) -> StreamReader:
        cls = _GenerateReader if self.path == GENERATE_PATH else CompletionsReader
        return cls(request, self.label)

    def constrains(self, reader: StreamReader) -> bool:
        return self.path == COMPLETIONS_PATH and self.constrain_final and reader.request.response_schema is not None

    def body(self, reader: StreamReader) -> dict[str, Any]:
        request = reader.request
        sampling: dict[str, Any] = {
            "max_tokens": max_new_tokens(request, self.context_length),
            "stop_token_ids": list(request.stop_token_ids),
            "skip_special_tokens": False,
        }
        if request.temperature is not None:
            sampling["temperature"] = request.temperature
        if request.top_p is not None:
            sampling["top_p"] = request.top_p
        if request.top_logprobs is not None:
            sampling["logprobs"] = request.top_logprobs
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
            if self.constrains(reader):
                assert request.response_schema is not None
                tag = final_channel_tag(request.response_schema)
                body["structured_outputs"] = {"structural_tag": orjson.dumps(tag).decode()}
        if self.model is not None:
            body["model"] = self.model
        return body

    async def check(self) -> None:
        await self.get_ok("/health")
        await self.pick_listed_model()
        ids, _ = HARMONY_PROBE
        body: dict[str, Any] = {"tokens": ids}
        if self.model is not None:
            body["model"] = self.model
        detokenized = await self.post_json("/detokenize", body)
        if not isinstance(detokenized, dict) or "prompt" not in detokenized:
            raise EngineMismatch(f"{self.label}: /detokenize answered {detokenized!r}, not {{'prompt': …}}")
        self.check_detokenized(detokenized["prompt"])
        paths = await self.openapi_paths()
        if GENERATE_PATH in paths:
            self.path = GENERATE_PATH
            self.abort_endpoint = ABORT_PATH in paths

    async def abort(self, reader: StreamReader) -> None:
        if self.abort_endpoint:
            await self.post_json(ABORT_PATH, {"request_ids": [reader.rid]})

    def describe(self) -> str:
        return super().describe() + f", {self.path}"
