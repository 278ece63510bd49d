"""The llama.cpp adapter against ``LlamaCppFake``, which answers as the real llama-server did (issue 12).

The same behaviours run against a real llama-server in tests/real_engines/llamacpp; these are the fast
unit-suite twins: ids left out mid-character recovered, plain sampling sent, router mode and
``--engine-model`` checked, the context reported, a loading engine waited for.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harmony_responses.engine import EngineOptions
from harmony_responses.engine._base import EngineMismatch, EngineRefused, EngineUnavailable, GenerateRequest
from harmony_responses.engine._llamacpp import LlamaCppEngine, recover_ids
from harmony_responses.tokens import ADMITTED, EngineEnd, TokenChunk

from .fakes import LlamaCppFake, Scenario, harmony, run_fake

ANSWER = harmony("<|channel|>final<|message|>Hi 🚀 ok，世界 鱻<|return|>")
PROMPT = harmony("<|start|>user<|message|>Hi<|end|><|start|>assistant")


async def _run(
    fake: LlamaCppFake, request: GenerateRequest, **options: Any
) -> tuple[LlamaCppEngine, list[int], list[TokenChunk], EngineEnd]:
    engine = LlamaCppEngine(EngineOptions(url=fake.url, **options))
    await engine.start()
    try:
        chunks: list[TokenChunk] = []
        stream = engine.generate(request)
        assert await anext(stream) is ADMITTED  # the engine's status line came: the request is admitted
        async for item in stream:
            if isinstance(item, TokenChunk):
                chunks.append(item)
            else:
                return engine, [t for c in chunks for t in c.token_ids], chunks, item
    finally:
        await engine.aclose()
    raise AssertionError("no EngineEnd")


async def _start_stop(engine: LlamaCppEngine) -> LlamaCppEngine:
    await engine.start()
    await engine.aclose()
    return engine


def test_ids_left_out_mid_character_are_recovered_exactly() -> None:
    with run_fake(LlamaCppFake(Scenario(tokens=ANSWER))) as fake:
        _, ids, chunks, end = asyncio.run(_run(fake, GenerateRequest(prompt_ids=PROMPT, max_tokens=50, top_logprobs=2)))
    assert ids == ANSWER and end.reason == "stop"
    # The chunk completing 🚀 carried only 222; 169883 comes just before it, without logprobs (chunks read
    # together may arrive merged: what counts is each id's place and its own logprobs).
    assert all(c.logprobs is not None and len(c.logprobs) == len(c.token_ids) for c in chunks)
    logprobs = [lp for c in chunks for lp in c.logprobs or ()]
    at = ids.index(222)
    assert ids[at - 1 : at + 1] == [169883, 222]
    assert logprobs[at - 1].top == () and len(logprobs[at].top) == 2


def test_ids_left_out_before_a_special_token_are_given_up_not_fatal() -> None:
    # Not what a model writes (an unfinished emoji, then a header): llama.cpp sends U+FFFD for the
    # fragment; the generation goes on with the ids it sent.
    tokens = harmony("<|channel|>final<|message|>Hi") + [169883] + harmony("<|end|><|start|>assistant<|return|>")
    with run_fake(LlamaCppFake(Scenario(tokens=tokens))) as fake:
        _, ids, _, end = asyncio.run(_run(fake, GenerateRequest(prompt_ids=PROMPT, max_tokens=50)))
    assert end.reason == "stop" and 169883 not in ids and ids[-1] == 200002


def test_recover_ids_cuts_only_inside_characters() -> None:
    assert recover_ids(b"Hi", " 🚀".encode()[:-1], 1) == [169883]
    assert recover_ids("世界".encode(), " 鱻".encode()[:-1], 2) == [3348, 109]
    # A piece that ends on a whole character would have been sent: no split with a cut there.
    assert recover_ids(b"x", b" \xe9\xb1", 1) is None
    assert recover_ids(b"x", b"ab", 1) is None


def test_plain_sampling_is_sent_in_full() -> None:
    with run_fake(LlamaCppFake()) as fake:
        asyncio.run(_run(fake, GenerateRequest(prompt_ids=PROMPT, max_tokens=5)))
        sent = fake.requests[0]
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["min_p"]) == (1.0, 1.0, 0, 0.0)
    assert (sent["typical_p"], sent["repeat_penalty"], sent["dry_multiplier"], sent["xtc_probability"]) == (
        1.0,
        1.0,
        0.0,
        0.0,
    )
    assert sent["samplers"] == ["top_k", "top_p", "min_p", "temperature"] and sent["mirostat"] == 0


def test_router_mode_names_the_model_in_every_call() -> None:
    with run_fake(LlamaCppFake(router=True, models=("small", "big"), n_ctx=2048)) as fake:
        engine, ids, _, _ = asyncio.run(_run(fake, GenerateRequest(prompt_ids=PROMPT, max_tokens=5), model="big"))
        assert ("/detokenize", "big") in fake.checks and ("/props", "big") in fake.checks
        assert fake.requests[0]["model"] == "big"
    assert engine.router and engine.context_window == 2048


def test_engine_model_must_be_served() -> None:
    for router in (False, True):
        with run_fake(LlamaCppFake(router=router, models=("small",))) as fake:
            with pytest.raises(EngineMismatch, match="'other'"):
                asyncio.run(LlamaCppEngine(EngineOptions(url=fake.url, model="other")).start())


def test_a_single_model_answers_to_its_file_name() -> None:
    with run_fake(LlamaCppFake(models=("/models/gpt-oss-20b-mxfp4.gguf",))) as fake:
        for name in ("gpt-oss-20b-mxfp4", "gpt-oss-20b-mxfp4.gguf"):
            engine = asyncio.run(_start_stop(LlamaCppEngine(EngineOptions(url=fake.url, model=name))))
            assert engine.model == "/models/gpt-oss-20b-mxfp4.gguf"


def test_the_only_model_is_adopted_and_its_context_reported() -> None:
    with run_fake(LlamaCppFake(n_ctx=4096)) as fake:
        engine = asyncio.run(_start_stop(LlamaCppEngine(EngineOptions(url=fake.url))))
    assert engine.model == fake.model and engine.context_window == 4096


def test_a_loading_engine_is_waited_for_only_with_start_wait() -> None:
    with run_fake(LlamaCppFake(loading=60)) as fake:
        with pytest.raises(EngineUnavailable, match="503"):
            asyncio.run(LlamaCppEngine(EngineOptions(url=fake.url)).start())
    with run_fake(LlamaCppFake(loading=1.0)) as fake:
        asyncio.run(_start_stop(LlamaCppEngine(EngineOptions(url=fake.url, start_wait=30))))


def test_a_prompt_over_n_ctx_is_context_length_exceeded() -> None:
    with run_fake(LlamaCppFake(n_ctx=4)) as fake:
        with pytest.raises(EngineRefused) as caught:
            asyncio.run(_run(fake, GenerateRequest(prompt_ids=PROMPT, max_tokens=5)))
    assert caught.value.code_hint == "context_length_exceeded" and caught.value.status_hint == 400
