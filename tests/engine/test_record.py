"""``--record PATH`` then ``replay:PATH``: the same event streams, byte for byte once ids are set aside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from harmony_responses.serve import Config, create_app
from harmony_responses.vocab import load_encoding

from .fakes import Scenario, VLLMFake, harmony, run_app
from .helpers import ANSWER, CALL_WEATHER, MODEL, WEATHER_TOOL, sse_events, stack, without_ids

LONG = (
    "<|channel|>analysis<|message|>"
    + "think " * 30
    + "<|end|><|start|>assistant<|channel|>final<|message|>Done<|return|>"
)

REQUESTS: list[dict[str, Any]] = [
    {"input": "Hi", "stream": True},
    {"input": "Weather?", "stream": True, "tools": [WEATHER_TOOL]},
    {"input": "Hi", "stream": True, "include": ["message.output_text.logprobs"], "top_logprobs": 3},
    {"input": "Hi", "stream": True, "max_output_tokens": 20},
    {"input": "Hi", "stream": True},
    {"input": "Hi", "stream": False},
    {"input": "Hi", "stream": True},
]
SCENARIOS = [
    Scenario(tokens=harmony(ANSWER), chunk=3, cached=5),
    Scenario(tokens=harmony(CALL_WEATHER), chunk=2, include_stop=False),
    Scenario(tokens=harmony(ANSWER), chunk=4),
    Scenario(tokens=harmony(LONG), chunk=5),
    Scenario(tokens=harmony(ANSWER), error_after=9, chunk=2),
    Scenario(tokens=harmony(ANSWER)),
    Scenario(status=503, message="overloaded"),
]


def _session(base: str) -> list[Any]:
    import httpx

    out: list[Any] = []
    for body in REQUESTS:
        response = httpx.post(f"{base}/v1/responses", json={"model": MODEL, **body}, timeout=30)
        if response.status_code != 200:
            out.append((response.status_code, response.json()))
        elif body["stream"]:
            out.append(without_ids(sse_events(response.content)))
        else:
            out.append(without_ids([response.json()]))
    return out


def test_record_then_replay_gives_the_same_streams(tmp_path: Path) -> None:
    record = tmp_path / "session.jsonl"
    with stack("vllm", VLLMFake(*SCENARIOS), record=str(record)) as s:
        recorded = _session(s.root)
    lines = [orjson.loads(line) for line in record.read_text().splitlines()]
    assert len(lines) == len(REQUESTS)
    # Chunks as the adapter read them (the fake's 3-token chunks, several to a read when they come together).
    assert all(size % 3 == 0 for size in lines[0]["chunks"][:-1]) and lines[0]["cached_tokens"] == 5
    assert sum(lines[0]["chunks"]) == len(harmony(ANSWER))
    assert lines[1]["chunks"][-1] == 1  # the <|call|> the engine left out, put back as its own chunk
    assert lines[4]["finish"] == "error" and "CUDA error" in lines[4]["error"]
    assert lines[6] == {"finish": "error", "error": lines[6]["error"], "refused": True}
    # Each call's output as text beside its ids, so that a recording can be read: first on its line.
    assert [next(iter(line)) for line in lines[:6]] == ["text"] * 6
    assert lines[0]["text"] == ANSWER and lines[1]["text"] == CALL_WEATHER
    cut = lines[4]  # cut by the engine's error
    assert cut["text"] == load_encoding().decode(cut["tokens"]) and ANSWER.startswith(cut["text"]) and cut["text"]

    app = create_app(Config(engine=f"replay:{record}", models=(MODEL,), current_date="2025-06-01"))
    with run_app(app) as root:
        replayed = _session(root)
    assert replayed == recorded

    # A recording made before the text was written (ids only) plays the same; the text is never played.
    old = tmp_path / "ids-only.jsonl"
    old.write_text(
        "".join(orjson.dumps({k: v for k, v in line.items() if k != "text"}).decode() + "\n" for line in lines)
    )
    app = create_app(Config(engine=f"replay:{old}", models=(MODEL,), current_date="2025-06-01"))
    with run_app(app) as root:
        assert _session(root) == recorded
    assert recorded[2][-1]["response"]["output"][-1]["content"][0]["logprobs"]  # logprobs were replayed too
    assert recorded[6][0] == 503
