"""The engine interface: requests, the Engine base class, MockEngine, specs and the public names."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

import harmony_responses.engine as engine_module
from harmony_responses.engine import (
    HARMONY_STOP_TOKEN_IDS,
    Engine,
    EngineStream,
    GenerateRequest,
    MockEngine,
    engine_from_spec,
)
from harmony_responses.tokens import EngineEnd, TokenChunk


def test_engine_exports() -> None:
    assert len(set(engine_module.__all__)) == len(engine_module.__all__)
    for name in engine_module.__all__:
        assert hasattr(engine_module, name), name


def test_GenerateRequest_defaults() -> None:
    req = GenerateRequest(prompt_ids=[1, 2])
    assert req.stop_token_ids == HARMONY_STOP_TOKEN_IDS == (200012, 200002)
    assert (req.max_tokens, req.temperature, req.top_p, req.top_logprobs) == (None, None, None, None)
    assert (req.response_schema, req.request_id) == (None, None)


def test_GenerateRequest_is_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        GenerateRequest([1])  # type: ignore[misc]
    req = GenerateRequest(prompt_ids=[1])
    with pytest.raises(AttributeError):
        req.max_tokens = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": -1}, "max_tokens must be >= 0, got -1"),
        ({"top_logprobs": 21}, "top_logprobs must be between 0 and 20, got 21"),
        ({"top_logprobs": -1}, "top_logprobs must be between 0 and 20, got -1"),
    ],
)
def test_GenerateRequest_rejects_impossible_values(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError) as info:
        GenerateRequest(prompt_ids=[1], **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_Engine_defaults_and_context_manager() -> None:
    class Minimal(Engine):
        name = "minimal"

        async def generate(self, request: GenerateRequest) -> EngineStream:
            yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))

    async def main() -> list[object]:
        async with Minimal() as engine:
            assert engine.describe() == "minimal"
            return [item async for item in engine.generate(GenerateRequest(prompt_ids=[1, 2, 3]))]

    assert asyncio.run(main()) == [EngineEnd(reason="stop", prompt_tokens=3)]


def test_Engine_is_abstract() -> None:
    with pytest.raises(TypeError):
        Engine()  # type: ignore[abstract]


def test_MockEngine_passes_the_handler_stream_through() -> None:
    seen: list[GenerateRequest] = []

    async def handler(request: GenerateRequest) -> AsyncGenerator[TokenChunk | EngineEnd, None]:
        seen.append(request)
        yield TokenChunk(token_ids=[200005, 17196])
        yield TokenChunk(token_ids=[200008, 12194, 200002])
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))

    engine = MockEngine(handler)
    req = GenerateRequest(prompt_ids=[1, 2], max_tokens=10)

    async def main() -> list[object]:
        return [item async for item in engine.generate(req)]

    assert asyncio.run(main()) == [
        TokenChunk(token_ids=[200005, 17196]),
        TokenChunk(token_ids=[200008, 12194, 200002]),
        EngineEnd(reason="stop", prompt_tokens=2),
    ]
    assert seen == [req]
    assert engine.name == "mock"
    assert engine.describe().startswith("mock: test_MockEngine_passes_the_handler_stream_through.<locals>.handler")


def test_MockEngine_aclose_reaches_the_handler() -> None:
    closed = asyncio.Event()

    async def handler(request: GenerateRequest) -> AsyncGenerator[TokenChunk | EngineEnd, None]:
        try:
            while True:
                yield TokenChunk(token_ids=[1])
        finally:
            closed.set()

    async def main() -> None:
        stream = MockEngine(handler, name="endless").generate(GenerateRequest(prompt_ids=[1]))
        await anext(stream)
        await stream.aclose()
        assert closed.is_set()

    asyncio.run(main())


@pytest.mark.parametrize("spec", ["gpt-5", "echo:x", "Echo", "", "replay"])
def test_engine_from_spec_unknown(spec: str) -> None:
    with pytest.raises(ValueError) as info:
        engine_from_spec(spec)
    message = str(info.value)
    assert message.startswith(
        "engine 'replay' needs a script file: 'replay:PATH'" if spec == "replay" else f"unknown engine {spec!r}"
    )
    assert "'echo' (a stand-in that echoes the last user message back (the default; not a model))" in message
    assert "'replay:PATH' (plays a JSON Lines script, one line per engine call)" in message
