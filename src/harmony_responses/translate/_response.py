"""The Response object's shape: every key the API, openai-python and Open Responses expect.

The translator fills ``status``, ``output``, ``usage``, ``error``, ``incomplete_details`` and
``completed_at``; everything else is the caller's echo of the request (responses-protocol.md §6).
"""

from __future__ import annotations

from typing import Any

__all__ = ["response_skeleton", "usage_object"]


def response_skeleton(*, id: str, created_at: int, model: str, **echo: Any) -> dict[str, Any]:
    """A complete ``in_progress`` Response; keyword arguments override the defaults (request echo)."""
    response: dict[str, Any] = {
        "id": id,
        "object": "response",
        "created_at": created_at,
        "completed_at": None,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "conversation": None,
        "prompt_cache_key": None,
        "reasoning": {"effort": "medium", "summary": None},
        "safety_identifier": None,
        "service_tier": "default",
        "store": True,
        "temperature": 1.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "truncation": "disabled",
        "usage": None,
        "user": None,
        "metadata": {},
    }
    response.update(echo)
    return response


def usage_object(
    *,
    input_tokens: int,
    cached_tokens: int,
    output_tokens: int,
    reasoning_tokens: int,
    tool_output_tokens: int | None = None,
) -> dict:
    """The API's ``usage``; with ``tool_output_tokens`` (a response that runs built-in tools), also vLLM's
    ``output_tokens_details.tool_output_tokens``: the tokens of the tools' results the server fed back to the
    model, which count in ``input_tokens`` as the prompts they are part of."""
    details: dict[str, int] = {"reasoning_tokens": reasoning_tokens}
    if tool_output_tokens is not None:
        details["tool_output_tokens"] = tool_output_tokens
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": details,
        "total_tokens": input_tokens + output_tokens,
    }
