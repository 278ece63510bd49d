"""Agent frameworks' tool round trips against a real server on 127.0.0.1: what the model receives.

The server is the real app under uvicorn on a loopback port, in this process rather than a subprocess, so
that its engine (``frameworks.PromptRecorder``) can keep every prompt's token ids for the test to read.

Each framework resends the history of a tool turn in its own shape (the openai SDK as the items it got,
LangChain's content blocks, LiteLLM's chat-completions bridge, pydantic-ai's message parts, the Vercel AI
SDK's and openai-node's, run by node; haystack's reasoning, call, preamble, output). Whatever the
shape, the second engine call must read the turn as the model wrote it: its reasoning, its preamble on
commentary, its call's arguments byte for byte, then the tool's result (``frameworks.HISTORY``). Before
issue 14 the same turn rendered to 179 tokens through LangChain streaming and LiteLLM (reasoning lost) and
177 through pydantic-ai (the preamble read as a final answer, the reasoning dropped, the arguments
re-serialised), instead of 197. The tests also check that reasoning summaries reach the frameworks that read
only summaries, and that a failed response raises in every one of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from api.helpers import Live, start_live
from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.serve import Config, create_app
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding

from .conftest import ALLOW_MISSING_ENV, REPO
from .frameworks import ANSWER, HISTORY, MODEL, PREAMBLE, QUESTION, REASONING, TOOL_OUTPUT, PromptRecorder

# LiteLLM fetches its model price list from GitHub at import unless told to use the copy it ships.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
Start = Callable[..., tuple[PromptRecorder, Live]]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """``start(engine=None)``: a live server (the scripted ``PromptRecorder`` by default) on its own store."""
    started: list[Live] = []

    def _start(engine: MockEngine | None = None) -> tuple[PromptRecorder, Live]:
        recorder = PromptRecorder()
        config = Config(models=(MODEL,), current_date="2025-06-01", store=f"sqlite:{tmp_path / 'store.sqlite3'}")
        live = start_live(create_app(config, engine=engine or recorder.engine))
        started.append(live)
        return recorder, live

    yield _start
    for live in started:
        live.stop()


def failing_engine() -> MockEngine:
    async def fail(request: GenerateRequest) -> EngineStream:
        yield TokenChunk(token_ids=load_encoding().encode("<|channel|>final<|message|>Hel", allowed_special="all"))
        yield EngineEnd(reason="error", message="GPU on fire")

    return MockEngine(fail)


def assert_model_read_the_turn_as_written(recorder: PromptRecorder) -> None:
    assert len(recorder.prompts) == 2, "one engine call per model turn"
    assert recorder.history(1) == HISTORY
    assert len(recorder.prompts[1]) == 197


# ---------------------------------------------------------------------------------------------- openai SDK


def test_openai_sdk_resending_the_output_items(start: Start) -> None:
    from openai import OpenAI

    recorder, live = start()
    client = OpenAI(base_url=live.base_url, api_key="unused", max_retries=0)
    live.clients.append(client)
    question = [{"role": "user", "content": QUESTION}]
    first = client.responses.create(model=MODEL, input=question, tools=[TOOL])  # type: ignore[arg-type]
    call = first.output[-1]
    assert call.type == "function_call"
    items = [*question, *(item.model_dump(exclude_none=True) for item in first.output)]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": TOOL_OUTPUT})
    second = client.responses.create(model=MODEL, input=items, tools=[TOOL])  # type: ignore[arg-type]
    assert second.output_text == ANSWER
    assert_model_read_the_turn_as_written(recorder)


def test_openai_sdk_with_previous_response_id(start: Start) -> None:
    from openai import OpenAI

    recorder, live = start()
    client = OpenAI(base_url=live.base_url, api_key="unused", max_retries=0)
    live.clients.append(client)
    first = client.responses.create(model=MODEL, input=QUESTION, tools=[TOOL])  # type: ignore[arg-type]
    call = first.output[-1]
    assert call.type == "function_call"
    output = [{"type": "function_call_output", "call_id": call.call_id, "output": TOOL_OUTPUT}]
    second = client.responses.create(
        model=MODEL,
        input=output,  # type: ignore[arg-type]
        tools=[TOOL],  # type: ignore[list-item]
        previous_response_id=first.id,
    )
    assert second.output_text == ANSWER
    assert_model_read_the_turn_as_written(recorder)


def test_openai_sdk_failed_response_raises(start: Start) -> None:
    import openai

    _, live = start(failing_engine())
    client = openai.OpenAI(base_url=live.base_url, api_key="unused", max_retries=0)
    live.clients.append(client)
    with pytest.raises(openai.InternalServerError, match="GPU on fire"):
        client.responses.create(model=MODEL, input=QUESTION)


# ---------------------------------------------------------------------------------------------- LangChain


def _langchain(live: Live, **kwargs: Any) -> Any:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        return TOOL_OUTPUT

    llm = ChatOpenAI(
        model=MODEL, base_url=live.base_url, api_key="unused", use_responses_api=True, max_retries=0, **kwargs
    )
    return llm.bind_tools([get_weather]), get_weather


def _langchain_round_trip(live: Live, *, stream: bool, **kwargs: Any) -> Any:
    from langchain_core.messages import HumanMessage, ToolMessage

    model, get_weather = _langchain(live, **kwargs)
    messages: list[Any] = [HumanMessage(QUESTION)]
    if stream:
        ai = None
        for chunk in model.stream(messages):
            ai = chunk if ai is None else ai + chunk
    else:
        ai = model.invoke(messages)
    messages.append(ai)
    for call in ai.tool_calls:
        messages.append(ToolMessage(content=get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    final = model.invoke(messages)
    assert final.text == ANSWER
    return ai


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_langchain_tool_round_trip(start: Start, stream: bool) -> None:
    # Streamed, LangChain keeps the reasoning item's id and drops its text: the store gives it back.
    recorder, live = start()
    _langchain_round_trip(live, stream=stream)
    assert_model_read_the_turn_as_written(recorder)


def test_langchain_streaming_shows_reasoning_as_its_summary(start: Start) -> None:
    recorder, live = start()
    ai = _langchain_round_trip(live, stream=True, reasoning={"effort": "low", "summary": "auto"})
    (reasoning,) = [block for block in ai.content if block.get("type") == "reasoning"]
    assert [part["text"] for part in reasoning["summary"]] == [REASONING]
    assert_model_read_the_turn_as_written(recorder)


def test_langchain_failed_response_raises(start: Start) -> None:
    import openai

    _, live = start(failing_engine())
    model, _ = _langchain(live)
    with pytest.raises(openai.InternalServerError, match="GPU on fire"):
        model.invoke(QUESTION)


# ---------------------------------------------------------------------------------------------- LiteLLM


def _litellm(live: Live, messages: list[Any], **kwargs: Any) -> Any:
    import litellm

    tools = [{"type": "function", "function": {k: TOOL[k] for k in ("name", "description", "parameters")}}]
    # "responses/": LiteLLM's bridge from its chat-completions interface to the Responses API.
    return litellm.completion(
        model=f"openai/responses/{MODEL}",
        api_base=live.base_url,
        api_key="unused",
        messages=messages,
        tools=tools,
        num_retries=0,
        **kwargs,
    )


@pytest.mark.parametrize("summary", [False, True], ids=["plain", "summary"])
def test_litellm_responses_bridge_tool_round_trip(start: Start, summary: bool) -> None:
    # The bridge resends reasoning as {"type": "reasoning", "id": …, "summary": []}: the store gives it back.
    # Its reasoning_content comes from summaries only.
    recorder, live = start()
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    kwargs = {"reasoning_effort": {"effort": "low", "summary": "auto"}} if summary else {}
    message = _litellm(live, messages, **kwargs).choices[0].message
    assert getattr(message, "reasoning_content", None) == (REASONING if summary else None)
    assert message.tool_calls and message.tool_calls[0].function.name == "get_weather"
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": TOOL_OUTPUT})
    assert _litellm(live, messages).choices[0].message.content == ANSWER
    assert_model_read_the_turn_as_written(recorder)


def test_litellm_failed_response_raises(start: Start) -> None:
    import litellm

    _, live = start(failing_engine())
    with pytest.raises(litellm.InternalServerError, match="GPU on fire"):
        _litellm(live, [{"role": "user", "content": QUESTION}])


# ---------------------------------------------------------------------------------------------- pydantic-ai


def _run_agent(live: Live, **settings: Any) -> Any:
    """One pydantic-ai agent run (its client closed within the run's event loop, sockets and all)."""
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
    from pydantic_ai.providers.openai import OpenAIProvider

    async def run() -> Any:
        async with AsyncOpenAI(base_url=live.base_url, api_key="unused", max_retries=0) as client:
            model = OpenAIResponsesModel(MODEL, provider=OpenAIProvider(openai_client=client))
            agent = Agent(model, model_settings=OpenAIResponsesModelSettings(**settings))  # type: ignore[typeddict-item]

            @agent.tool_plain
            def get_weather(city: str) -> str:
                """Get the weather for a city."""
                return TOOL_OUTPUT

            return await agent.run(QUESTION)

    return asyncio.run(run())


def test_pydantic_ai_tool_round_trip(start: Start) -> None:
    # pydantic-ai resends the preamble without phase and the call's arguments re-serialised, without its id.
    recorder, live = start()
    result = _run_agent(live)
    assert result.output == ANSWER
    assert_model_read_the_turn_as_written(recorder)


def test_pydantic_ai_shows_reasoning_as_its_summary(start: Start) -> None:
    from pydantic_ai.messages import ThinkingPart

    recorder, live = start()
    result = _run_agent(live, openai_reasoning_summary="auto")
    thinking = [part.content for m in result.all_messages() for part in m.parts if isinstance(part, ThinkingPart)]
    assert REASONING in thinking
    assert_model_read_the_turn_as_written(recorder)


def test_pydantic_ai_failed_response_raises(start: Start) -> None:
    from pydantic_ai.exceptions import ModelHTTPError

    _, live = start(failing_engine())
    with pytest.raises(ModelHTTPError, match="GPU on fire"):
        _run_agent(live)


# ---------------------------------------------------------------------------------------------- haystack


@pytest.mark.parametrize("streaming", [False, True], ids=["run", "stream"])
def test_haystack_tool_round_trip(start: Start, streaming: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Haystack resends the turn as reasoning, call, then the preamble (without phase), then the call's output.
    monkeypatch.setenv("HAYSTACK_TELEMETRY_ENABLED", "False")
    from haystack.components.generators.chat import OpenAIResponsesChatGenerator
    from haystack.dataclasses import ChatMessage
    from haystack.tools import Tool
    from haystack.utils import Secret

    recorder, live = start()
    tool = Tool(
        name="get_weather",
        description=TOOL["description"],
        parameters=TOOL["parameters"],
        function=lambda city: TOOL_OUTPUT,
    )
    generator = OpenAIResponsesChatGenerator(
        api_key=Secret.from_token("unused"),
        model=MODEL,
        api_base_url=live.base_url,
        tools=[tool],
        max_retries=0,
        streaming_callback=(lambda chunk: None) if streaming else None,
    )
    messages = [ChatMessage.from_user(QUESTION)]
    (reply,) = generator.run(messages=messages)["replies"]
    assert reply.text == PREAMBLE and reply.reasoning is not None
    (call,) = reply.tool_calls
    messages += [reply, ChatMessage.from_tool(tool_result=TOOL_OUTPUT, origin=call)]
    (answer,) = generator.run(messages=messages)["replies"]
    assert answer.text == ANSWER
    assert_model_read_the_turn_as_written(recorder)


# ---------------------------------------------------------------------------------------------- Vercel AI SDK

VERCEL_SCRIPT = Path(__file__).with_name("vercel_round_trip.mjs")


def _node_client(script: Path, package: str, what: str, live: Live, mode: str) -> dict[str, Any]:
    """``node script BASE_URL mode`` on our server: a JS client (npm ``package``, pinned in package.json) whose
    script prints one JSON line last."""
    if not (REPO / "node_modules" / package).is_dir():
        if os.environ.get(ALLOW_MISSING_ENV):
            pytest.skip(f"{what} is not installed (npm ci)")
        pytest.fail(f"{what} is not installed: run scripts/install (npm ci)")
    # node finds the packages in the repository's node_modules, up from the script's folder.
    done = subprocess.run(
        ["node", str(script), live.base_url, mode], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _vercel(live: Live, mode: str) -> dict[str, Any]:
    """The AI SDK (npm ``ai`` and ``@ai-sdk/openai``) run by node on our server."""
    return _node_client(VERCEL_SCRIPT, "ai", "the Vercel AI SDK", live, mode)


@pytest.mark.parametrize("mode", ["generate", "stream"])
def test_vercel_ai_sdk_tool_round_trip_shows_reasoning(start: Start, mode: str) -> None:
    recorder, live = start()
    result = _vercel(live, mode)
    assert result == {"text": ANSWER, "reasoning": REASONING}
    assert_model_read_the_turn_as_written(recorder)


def test_vercel_ai_sdk_failed_response_raises(start: Start) -> None:
    # A 200 with status "failed" was "Invalid JSON response" to generateText.
    _, live = start(failing_engine())
    assert "GPU on fire" in _vercel(live, "generate")["error"]


# ---------------------------------------------------------------------------------------------- openai-node

OPENAI_NODE_SCRIPT = Path(__file__).with_name("openai_node_round_trip.mjs")


def _openai_node(live: Live, mode: str) -> dict[str, Any]:
    """openai-node (npm ``openai``) run by node on our server."""
    return _node_client(OPENAI_NODE_SCRIPT, "openai", "openai-node", live, mode)


@pytest.mark.parametrize("mode", ["items", "previous", "stream"])
def test_openai_node_tool_round_trip(start: Start, mode: str) -> None:
    recorder, live = start()
    assert _openai_node(live, mode) == {"text": ANSWER, "reasoning": REASONING}
    assert_model_read_the_turn_as_written(recorder)


def test_openai_node_failed_response_raises(start: Start) -> None:
    _, live = start(failing_engine())
    assert "GPU on fire" in _openai_node(live, "items")["error"]
