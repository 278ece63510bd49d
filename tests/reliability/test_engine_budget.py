"""``max_output_tokens`` holds whatever the engine does (issue 16 #12: an engine streamed 49,844 tokens for 200)."""

from __future__ import annotations

from typing import Any

import httpx

from api.helpers import MODEL
from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding


class Runaway:
    """An engine that ignores ``max_tokens`` and writes a final answer of 50,000 tokens, 100 per chunk."""

    def __init__(self) -> None:
        self.closed_after = -1
        self.engine = MockEngine(self._generate)

    async def _generate(self, request: GenerateRequest) -> EngineStream:
        encoding = load_encoding()
        yield TokenChunk(token_ids=encoding.encode("<|channel|>final<|message|>", allowed_special="all"))
        word = encoding.encode(" word")
        sent = 0
        try:
            while sent < 50_000:
                yield TokenChunk(token_ids=word * 100)
                sent += 100
            yield EngineEnd(reason="length", prompt_tokens=len(request.prompt_ids))
        finally:
            self.closed_after = sent


def test_a_runaway_engine_is_cut_at_max_output_tokens(serve: Any) -> None:
    runaway = Runaway()
    live = serve(runaway.engine)
    body = {"model": MODEL, "input": "hi", "max_output_tokens": 200}
    response = httpx.post(f"{live.root}/v1/responses", json=body, timeout=60).json()
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"]["output_tokens"] <= 200
    text = response["output"][-1]["content"][0]["text"]
    assert 150 < text.count("word") < 200
    assert 0 <= runaway.closed_after < 1_000  # the engine's stream was closed right after the budget

    # Streamed, the same: deltas stop at the budget and the stream ends incomplete.
    with httpx.stream("POST", f"{live.root}/v1/responses", json={**body, "stream": True}, timeout=60) as r:
        events = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
    assert events[-1] == "response.incomplete"
