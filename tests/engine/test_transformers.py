"""``transformers:PATH`` on the CPU with a tiny randomly initialised gpt-oss built here (no download).

Random weights write garbage, which is the point: the plumbing must hold whatever comes out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harmony_responses.engine import GenerateRequest
from harmony_responses.engine._transformers import TransformersEngine
from harmony_responses.serve import Config, create_app
from harmony_responses.tokens import EngineEnd, TokenChunk

from .fakes import harmony, run_app
from .helpers import MODEL, sse_events

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPT = harmony("<|start|>user<|message|>Hi<|end|><|start|>assistant")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = transformers.GptOssConfig(
        vocab_size=201088,  # Harmony's ids must exist
        hidden_size=16,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        num_local_experts=2,
        num_experts_per_tok=1,
        layer_types=["full_attention"],
        max_position_embeddings=131072,  # gpt-oss's: a generation left running never ends by itself
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-gpt-oss")
    transformers.GptOssForCausalLM(config).save_pretrained(path)
    return path


async def _generate(engine: TransformersEngine, request: GenerateRequest) -> tuple[list[int], EngineEnd, int]:
    ids: list[int] = []
    chunks = 0
    async for item in engine.generate(request):
        if isinstance(item, TokenChunk):
            ids.extend(item.token_ids)
            chunks += 1
            assert item.logprobs is None or len(item.logprobs) == len(item.token_ids)
        else:
            assert isinstance(item, EngineEnd)
            return ids, item, chunks
    raise AssertionError("no EngineEnd")


def test_token_ids_in_and_out_and_stop_ids(checkpoint: Path) -> None:
    async def main() -> None:
        async with TransformersEngine(checkpoint) as engine:
            assert "cpu" in engine.describe()
            greedy = GenerateRequest(prompt_ids=PROMPT, max_tokens=12, temperature=0, stop_token_ids=())
            ids, end, chunks = await _generate(engine, greedy)
            assert len(ids) == chunks == 12 and all(0 <= t < 201088 for t in ids)
            assert (end.reason, end.prompt_tokens) == ("length", len(PROMPT))
            assert (await _generate(engine, greedy))[0] == ids  # greedy is deterministic
            # Stopping on an id the model writes: the output ends with it, finish "stop".
            stop = ids[4]
            stopped, end, _ = await _generate(
                engine, GenerateRequest(prompt_ids=PROMPT, max_tokens=12, temperature=0, stop_token_ids=(stop,))
            )
            assert stopped == ids[: ids.index(stop) + 1] and end.reason == "stop"
            lps, _, _ = await _generate(
                engine, GenerateRequest(prompt_ids=PROMPT, max_tokens=3, temperature=0, top_logprobs=2)
            )
            assert lps == ids[:3]

    asyncio.run(main())


def test_cancelling_frees_the_model(checkpoint: Path) -> None:
    async def main() -> None:
        async with TransformersEngine(checkpoint) as engine:
            # Left running, this generation would keep the model for hours; the next one gets it only if
            # closing the stream stopped it (the bound is for a broken engine, not a speed).
            stream = engine.generate(GenerateRequest(prompt_ids=PROMPT, max_tokens=100_000, stop_token_ids=()))
            await anext(stream)
            async with asyncio.timeout(60):
                await stream.aclose()
                _, end, _ = await _generate(engine, GenerateRequest(prompt_ids=PROMPT, max_tokens=2, temperature=0))
            assert end.reason in ("length", "stop")

    asyncio.run(main())


@pytest.fixture(scope="module")
def server(checkpoint: Path) -> Iterator[str]:
    app = create_app(Config(engine=f"transformers:{checkpoint}", models=(MODEL,), current_date="2025-06-01"))
    with run_app(app) as root:
        yield root


def _post(root: str, **body: object) -> httpx.Response:
    return httpx.post(f"{root}/v1/responses", json={"model": MODEL, "input": "Hi", **body}, timeout=60)


def test_length_cut_is_incomplete(server: str) -> None:
    response = _post(server, temperature=0, max_output_tokens=16).json()
    assert response["status"] == "incomplete", response
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"]["output_tokens"] == 16


def test_garbage_never_breaks_the_stream(server: str) -> None:
    for seed in range(6):
        events = sse_events(_post(server, stream=True, temperature=1.0, max_output_tokens=40 + seed).content)
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        terminal = [e for e in events if e["type"] in ("response.completed", "response.incomplete", "response.failed")]
        assert len(terminal) == 1 and events[-1] is terminal[0]


def test_client_disconnect_stops_generation(server: str) -> None:
    # Without a disconnect this generation would hold the model for hours (100,000 tokens of a context of
    # 131,072), so the next request gets the model only if the disconnect stopped it. The client leaves at
    # response.created, which comes at the first token (the headerless garbage's first delta comes only
    # after MAX_HEADERLESS_TOKENS, tens of seconds on a loaded machine).
    body = {"model": MODEL, "input": "Hi", "stream": True, "max_output_tokens": 100_000}
    with httpx.stream("POST", f"{server}/v1/responses", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data:") and '"response.created"' in line:
                break
    assert _post(server, temperature=0, max_output_tokens=16).status_code == 200
