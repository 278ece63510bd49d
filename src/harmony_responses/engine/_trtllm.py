"""The ``trtllm`` engine: TensorRT-LLM's ``trtllm-serve``, ``POST /v1/completions`` with token ids (engines.md §5).

The request is vLLM's completions shape plus ``detokenize: false`` (no text to build); chunks carry
``choices[0].token_ids``. Whether the stop id is returned is not documented over HTTP, and
``stop_reason`` may be absent: a missing stop id is inferred (``settle_stop``). Closing the connection
aborts (there is no abort endpoint). No ``text.format`` constraint: its guided decoding covers the whole
output. Start-up check: ``/health``, ``/v1/models``, then a one-token completion of Harmony's special
tokens, which proves that the server takes token-id prompts of this vocabulary and returns token ids
(trtllm-serve has no detokenize endpoint to check the tokenizer itself).
"""

from __future__ import annotations

from typing import Any

from ._base import EngineMismatch
from ._http import HARMONY_PROBE, HTTPEngine, StreamReader, max_new_tokens
from ._vllm import CompletionsReader

__all__ = ["TRTLLMEngine"]


class _Reader(CompletionsReader):
    null_stop_is_eos = False


class TRTLLMEngine(HTTPEngine):
    """TensorRT-LLM over HTTP; see the module docstring."""

    name = "trtllm"
    default_url = "http://127.0.0.1:8000"
    path = "/v1/completions"
    completion_lines = True

    def reader(self, request: Any) -> StreamReader:
        return _Reader(request, self.label)

    def body(self, reader: StreamReader) -> dict[str, Any]:
        request = reader.request
        body: dict[str, Any] = {
            "prompt": request.prompt_ids,
            "max_tokens": max_new_tokens(request, self.context_length),
            "stream": True,
            "stream_options": {"include_usage": True},
            "stop_token_ids": list(request.stop_token_ids),
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "detokenize": False,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.top_logprobs is not None:
            body["logprobs"] = request.top_logprobs
        if self.model is not None:
            body["model"] = self.model
        return body

    async def check(self) -> None:
        await self.get_ok("/health")
        models = await self.get_json("/v1/models")
        self.pick_model([m["id"] for m in models.get("data") or []])
        ids, _ = HARMONY_PROBE
        probe: dict[str, Any] = {"prompt": ids, "max_tokens": 1, "detokenize": False, "stream": False}
        if self.model is not None:
            probe["model"] = self.model
        answer = await self.post_json("/v1/completions", probe)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not choices or not isinstance(choices[0].get("token_ids"), list):
            raise EngineMismatch(
                f"{self.label}: a completion of a token-id prompt came back without token_ids; "
                "this trtllm-serve version cannot stream token ids"
            )
