"""A response cut short still counts its prompt as input (issue 12, item 9: a cancelled background response
reported ``input_tokens: 0``, since the engine's end, which carries the count, never came)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from api.helpers import MODEL


def test_a_cancelled_background_response_counts_its_prompt(serve: Any) -> None:
    slow = {"harmony": "<|channel|>final<|message|>" + "tick " * 200 + "<|return|>", "delay_ms": 20}
    live = serve([slow])
    created = httpx.post(f"{live.root}/v1/responses", json={"model": MODEL, "input": "Hi there", "background": True})
    response_id = created.json()["id"]
    deadline = time.monotonic() + 10
    while httpx.get(f"{live.root}/v1/responses/{response_id}").json()["status"] != "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.2)  # some tokens out, the engine call still running
    cancelled = httpx.post(f"{live.root}/v1/responses/{response_id}/cancel").json()
    assert cancelled["status"] == "cancelled"
    usage = cancelled["usage"]
    assert usage["input_tokens"] > 10  # the system message and "Hi there": the prompt the engine was sent
    assert 0 < usage["output_tokens"] < 200
    stored = httpx.get(f"{live.root}/v1/responses/{response_id}").json()
    assert stored["usage"]["input_tokens"] == usage["input_tokens"]
