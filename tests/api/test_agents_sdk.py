"""The OpenAI Agents SDK (``openai-agents``) against the real server: a function tool across two model calls."""

from __future__ import annotations

import asyncio
from typing import Any

import agents
import pytest
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool
from openai.types.shared import Reasoning

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


def _agent(client: Any, calls: list[str], **settings: Any) -> Agent:
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
        model_settings=ModelSettings(temperature=0.7, **settings),
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


def test_run_streamed_with_reasoning_summaries(serve: Serve) -> None:
    # The reasoning streams as its summary and as its reasoning_text at once (two open parts of one item).
    live = serve([CALL, ANSWER])
    calls: list[str] = []

    async def main() -> tuple[Any, list[Any]]:
        async with async_openai_client(live) as client:
            agent = _agent(client, calls, reasoning=Reasoning(effort="low", summary="auto"))
            result = Runner.run_streamed(agent, "What's the weather in Paris?")
            raw = [event.data async for event in result.stream_events() if event.type == "raw_response_event"]
            return result, raw

    result, raw = asyncio.run(main())
    assert calls == ["Paris"] and result.final_output == "It is sunny in Paris."
    reasoning = [item.raw_item for item in result.new_items if item.type == "reasoning_item"]
    assert [r.summary[0].text for r in reasoning] == ["I should look up the weather.", "The tool said sunny."]
    assert [r.content[0].text for r in reasoning] == [r.summary[0].text for r in reasoning]  # type: ignore[index]
    kinds = [event.type for event in raw]
    first_raw = kinds.index("response.reasoning_text.delta")
    assert first_raw < kinds.index("response.reasoning_summary_text.done")
    assert kinds[first_raw - 1] == "response.reasoning_summary_text.delta"


def test_run_non_streamed_with_a_function_tool(serve: Serve) -> None:
    live = serve([CALL, ANSWER])
    calls: list[str] = []

    async def main() -> Any:
        async with async_openai_client(live) as client:
            return await Runner.run(_agent(client, calls), "What's the weather in Paris?")

    result = asyncio.run(main())
    assert calls == ["Paris"]
    assert result.final_output == "It is sunny in Paris."


def test_a_compaction_session_compacts_through_responses_compact(serve: Serve) -> None:
    # The SDK's OpenAIResponsesCompactionSession calls responses.compact after a turn; the next turn's prompt
    # holds the model's summary instead of the tool call and its output.
    from harmony_responses.render._compaction import SUMMARY_PREFIX

    from .test_compaction import Scripted

    summary = "The user asked about Paris; get_weather said sunny in Paris."
    model = Scripted(CALL, ANSWER, summary + "<|return|>", ANSWER)
    live = serve(model.engine)
    calls: list[str] = []

    async def main() -> list[Any]:
        async with async_openai_client(live) as client:
            session = agents.OpenAIResponsesCompactionSession(
                "weather",
                agents.SQLiteSession("weather"),
                client=client,
                model=MODEL,
                should_trigger_compaction=lambda context: True,
            )
            agent = _agent(client, calls)
            await Runner.run(agent, "What's the weather in Paris?", session=session)
            await Runner.run(agent, "And tomorrow?", session=session)
            return await session.get_items()

    items = asyncio.run(main())
    assert calls == ["Paris"]
    compact_prompt, answer_prompt = model.prompts[2], model.prompts[3]
    assert "sunny in Paris" in compact_prompt and compact_prompt.endswith("<|channel|>final<|message|>")
    assert f"<|start|>user<|message|>{SUMMARY_PREFIX}{summary}<|end|>" in answer_prompt, answer_prompt[-600:]
    assert "get_weather <|constrain|>json" not in answer_prompt.split(SUMMARY_PREFIX)[0]  # the call was replaced
    assert answer_prompt.endswith("<|start|>user<|message|>And tomorrow?<|end|><|start|>assistant")
    assert any(isinstance(item, dict) and item.get("type") == "compaction" for item in items), items
