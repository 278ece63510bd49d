"""The OpenAI Agents SDK (``openai-agents``) against the real server: a function tool across two model calls."""

from __future__ import annotations

import asyncio
from typing import Any

import agents
import pytest
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool

from .conftest import Serve
from .helpers import MODEL, async_openai_client

CALL = (
    "<|channel|>analysis<|message|>I should look up the weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Paris"}<|call|>'
)
ANSWER = (
    "<|channel|>analysis<|message|>The tool said sunny.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris.<|return|>"
)


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    # Otherwise the SDK tries to upload traces to OpenAI.
    agents.set_tracing_disabled(True)


def _agent(client: Any, calls: list[str]) -> Agent:
    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        calls.append(city)
        return f"sunny in {city}"

    return Agent(
        name="weather",
        instructions="Answer weather questions with the tool.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
        model_settings=ModelSettings(temperature=0.7),
    )


def test_run_streamed_with_a_function_tool(serve: Serve) -> None:
    live = serve([CALL, ANSWER])
    calls: list[str] = []

    async def main() -> tuple[Any, list[str]]:
        async with async_openai_client(live) as client:
            result = Runner.run_streamed(_agent(client, calls), "What's the weather in Paris?")
            kinds = [event.type async for event in result.stream_events()]
            return result, kinds

    result, kinds = asyncio.run(main())
    assert calls == ["Paris"]
    assert result.final_output == "It is sunny in Paris."
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    # Two model calls, each with usage the SDK could read.
    assert len(result.raw_responses) == 2
    assert all(r.usage.input_tokens > 0 and r.usage.output_tokens > 0 for r in result.raw_responses)


def test_run_non_streamed_with_a_function_tool(serve: Serve) -> None:
    live = serve([CALL, ANSWER])
    calls: list[str] = []

    async def main() -> Any:
        async with async_openai_client(live) as client:
            return await Runner.run(_agent(client, calls), "What's the weather in Paris?")

    result = asyncio.run(main())
    assert calls == ["Paris"]
    assert result.final_output == "It is sunny in Paris."
