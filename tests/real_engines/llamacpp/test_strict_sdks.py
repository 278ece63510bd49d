"""The SDKs' strict tools against real llama.cpp: what the grammar guarantees is what they parse.

The scripted model calls ``get_weather({"city":"Paris"})``, then answers ``Sunny in Paris.`` once a tool's
output holds `` sunny`` (conftest.py). The tools here allow only Rome or Oslo: the SDKs' own validation of
the arguments (pydantic, in ``responses.parse`` and in the Agents SDK's ``function_tool``) passes only
because the grammar steered the call; the script's ``Paris`` would fail it
(test_strict_functions.py shows the same script unconstrained).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import agents
import openai
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool
from pydantic import BaseModel

from ..gateway import Gateway

MODEL = "gpt-oss-20b"


class GetWeather(BaseModel):
    city: Literal["Rome", "Oslo"]


def test_responses_parse_with_a_pydantic_function_tool(gw: Gateway) -> None:
    tool = openai.pydantic_function_tool(GetWeather, name="get_weather")
    parsed = gw.client().responses.parse(
        model=MODEL, input="What is the weather in Paris?", tools=[tool], max_output_tokens=200
    )
    call = parsed.output[-1]
    assert call.type == "function_call" and call.name == "get_weather"
    assert isinstance(call.parsed_arguments, GetWeather), call.arguments
    assert call.parsed_arguments.city in ("Rome", "Oslo")


def test_agents_sdk_with_a_strict_function_tool(gw: Gateway) -> None:
    agents.set_tracing_disabled(True)  # otherwise the SDK uploads traces to OpenAI
    calls: list[str] = []

    @function_tool(strict_mode=True)
    def get_weather(city: Literal["Rome", "Oslo"]) -> str:
        """Current weather for a city."""
        calls.append(city)
        return "It is sunny"

    async def main() -> Any:
        client = gw.async_client()
        agent = Agent(
            name="weather",
            instructions="Answer weather questions with the tool.",
            tools=[get_weather],
            model=OpenAIResponsesModel(model=MODEL, openai_client=client),
            model_settings=ModelSettings(max_tokens=200),
        )
        try:
            return await Runner.run(agent, "What is the weather in Paris?", max_turns=3)
        finally:
            await client.close()

    result = asyncio.run(main())
    assert len(calls) == 1 and calls[0] in ("Rome", "Oslo")
    assert result.final_output == "Sunny in Paris."
