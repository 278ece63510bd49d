"""The ``openai`` package (sync and async) against the real server on 127.0.0.1 with the replay engine."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from .conftest import Serve
from .helpers import ANSWER, CALL_WEATHER, MODEL, WEATHER_TOOL, async_openai_client, openai_client

LONG_ANSWER = "<|channel|>final<|message|>" + "word " * 200 + "<|return|>"


def test_create_non_streaming(serve: Serve) -> None:
    live = serve([ANSWER])
    response = openai_client(live).responses.create(model=MODEL, input="Hi", instructions="Be brief.")
    assert response.status == "completed"
    assert response.output_text == "Hello there!"
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output[0].content[0].text == "Easy."  # type: ignore[union-attr,index]
    assert response.model == MODEL
    assert response.instructions == "Be brief."
    assert response.usage is not None and response.usage.output_tokens > 0 and response.usage.input_tokens > 0
    assert response.id.startswith("resp_") and response.completed_at is not None


def test_create_streaming(serve: Serve) -> None:
    live = serve([ANSWER])
    events = list(openai_client(live).responses.create(model=MODEL, input="Hi", stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Hello there!"
    assert events[-1].response.output_text == "Hello there!"  # type: ignore[union-attr]


def test_stream_helper_and_final_response(serve: Serve) -> None:
    live = serve([ANSWER])
    with openai_client(live).responses.stream(model=MODEL, input="Hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Hello there!"
    assert final.output_text == "Hello there!"


class Weather(BaseModel):
    city: str
    degrees: int


def test_parse_text_format(serve: Serve) -> None:
    answer = '<|channel|>final<|message|>{"city": "Paris", "degrees": 21}<|return|>'
    live = serve([answer, answer])
    client = openai_client(live)
    parsed = client.responses.parse(model=MODEL, input="Weather?", text_format=Weather)
    assert parsed.output_parsed == Weather(city="Paris", degrees=21)
    with client.responses.stream(model=MODEL, input="Weather?", text_format=Weather) as stream:
        final = stream.get_final_response()
    assert final.output_parsed == Weather(city="Paris", degrees=21)


def test_parse_mismatch_fails_clearly(serve: Serve) -> None:
    live = serve(['<|channel|>final<|message|>{"city": "Paris"}<|return|>'] * 2)
    client = openai_client(live)
    # Not streamed: an HTTP 500 with the reason (a 200 with status "failed" reads as success to many clients);
    # the failed response is stored, and x-response-id names it.
    with pytest.raises(openai.InternalServerError) as info:
        client.responses.create(
            model=MODEL,
            input="Weather?",
            text={"format": {"type": "json_schema", "name": "weather", "strict": True, "schema": _weather_schema()}},
        )
    assert "does not match the JSON schema 'weather'" in info.value.message
    assert "'degrees' is a required property" in info.value.message
    assert info.value.code == "server_error" and info.value.type == "server_error"
    stored = client.responses.retrieve(info.value.response.headers["x-response-id"])
    assert stored.status == "failed" and stored.error is not None
    # It ran once: the SDK's automatic retry of a 500 (twice by default) would generate it again.
    assert info.value.response.headers["x-should-retry"] == "false"
    sent: list[str] = []
    counting = httpx.Client(event_hooks={"request": [lambda request: sent.append(request.url.path)]})
    retrying = openai.OpenAI(base_url=live.base_url, api_key="x", max_retries=2, http_client=counting)
    with pytest.raises(openai.InternalServerError):
        retrying.responses.create(
            model=MODEL,
            input="Weather?",
            text={"format": {"type": "json_schema", "name": "weather", "strict": True, "schema": _weather_schema()}},
        )
    counting.close()
    assert sent == ["/v1/responses"]
    assert "'degrees' is a required property" in stored.error.message
    # Streaming: the error event reaches the client as an APIError with the same message. (The
    # ``text_format`` helpers parse the text client-side as soon as it is done, so there pydantic's
    # ValidationError comes first.)
    with pytest.raises(openai.APIError, match="does not match the JSON schema 'weather'"):
        for _ in client.responses.create(
            model=MODEL,
            input="Weather?",
            text={"format": {"type": "json_schema", "name": "weather", "strict": True, "schema": _weather_schema()}},
            stream=True,
        ):
            pass


def _weather_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"city": {"type": "string"}, "degrees": {"type": "integer"}},
        "required": ["city", "degrees"],
        "additionalProperties": False,
    }


def test_function_tool_round_trip(serve: Serve) -> None:
    live = serve([CALL_WEATHER, "<|channel|>final<|message|>It is sunny in Paris.<|return|>"])
    client = openai_client(live)
    history: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.responses.create(model=MODEL, input=history, tools=[WEATHER_TOOL])  # type: ignore[list-item]
    call = first.output[-1]
    assert call.type == "function_call"
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id.startswith("call_") and call.id is not None and call.id.startswith("fc_")
    assert first.tools[0].type == "function" and first.tools[0].name == "get_weather"  # echoed

    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'})
    second = client.responses.create(model=MODEL, input=history, tools=[WEATHER_TOOL])  # type: ignore[list-item]
    assert second.status == "completed"
    assert second.output_text == "It is sunny in Paris."


def test_function_output_reaches_the_model(serve: Serve) -> None:
    # The echo engine quotes the tool result it finds at the end of the prompt: proof that the
    # function_call_output was rendered into the next prompt.
    live = serve("echo")
    client = openai_client(live)
    first = client.responses.create(
        model=MODEL,
        input="Weather?",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
    )
    call = first.output[-1]
    assert call.type == "function_call" and call.name == "get_weather"
    history: list[Any] = [{"role": "user", "content": "Weather?"}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"})
    second = client.responses.create(model=MODEL, input=history, tools=[WEATHER_TOOL])  # type: ignore[list-item]
    assert second.output_text == "The tool functions.get_weather returned: sunny, 21 C"


def test_logprobs(serve: Serve) -> None:
    live = serve([{"harmony": "<|channel|>final<|message|>Hello world<|return|>", "logprobs": True}] * 2)
    client = openai_client(live)
    response = client.responses.create(
        model=MODEL, input="Hi", include=["message.output_text.logprobs"], top_logprobs=2
    )
    part = response.output[-1].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text" and part.logprobs
    assert "".join(lp.token for lp in part.logprobs) == "Hello world"
    assert all(len(lp.top_logprobs) == 2 and lp.logprob < 0 for lp in part.logprobs)
    assert response.top_logprobs == 2
    # Without the include there are none (the engine is not even asked for them).
    plain = client.responses.create(model=MODEL, input="Hi", top_logprobs=2)
    assert plain.output[-1].content[0].logprobs == []  # type: ignore[union-attr]


def test_length_cut_is_incomplete(serve: Serve) -> None:
    live = serve([LONG_ANSWER, LONG_ANSWER])
    client = openai_client(live)
    response = client.responses.create(model=MODEL, input="Talk", max_output_tokens=16)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[-1].status == "incomplete"  # type: ignore[union-attr]
    assert response.usage is not None and response.usage.output_tokens == 16
    assert response.max_output_tokens == 16
    events = list(client.responses.create(model=MODEL, input="Talk", max_output_tokens=16, stream=True))
    assert events[-1].type == "response.incomplete"


def test_engine_error_fails_the_response(serve: Serve) -> None:
    line = {"harmony": "<|channel|>final<|message|>Hel", "error": "GPU on fire"}
    live = serve([line, line])
    client = openai_client(live)
    with pytest.raises(openai.InternalServerError, match="GPU on fire"):
        client.responses.create(model=MODEL, input="Hi")
    with pytest.raises(openai.APIError, match="GPU on fire"):
        for _ in client.responses.create(model=MODEL, input="Hi", stream=True):
            pass


def test_async_client(serve: Serve) -> None:
    live = serve([ANSWER, ANSWER])

    async def main() -> tuple[str, str]:
        async with async_openai_client(live) as client:
            response = await client.responses.create(model=MODEL, input="Hi")
            text = ""
            async with client.responses.stream(model=MODEL, input="Hi") as stream:
                async for event in stream:
                    if event.type == "response.output_text.delta":
                        text += event.delta
                final = await stream.get_final_response()
            assert final.output_text == text
            return response.output_text, text

    assert asyncio.run(main()) == ("Hello there!", "Hello there!")


def test_encrypted_reasoning_round_trip(serve: Serve) -> None:
    live = serve([CALL_WEATHER, "<|channel|>final<|message|>Sunny.<|return|>"])
    client = openai_client(live)
    history: list[Any] = [{"role": "user", "content": "Weather?"}]
    first = client.responses.create(
        model=MODEL,
        input=history,
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        include=["reasoning.encrypted_content"],
        store=False,
    )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning"
    blob = reasoning.encrypted_content
    assert isinstance(blob, str) and "Need the weather" not in blob
    sealer = live.app.state.server.sealer
    assert sealer.open(blob) == "Need the weather."
    # A client that keeps only the blob (no content) still gets its reasoning rendered back.
    history.append({"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": blob})
    history.append(first.output[1].model_dump(exclude_none=True))
    history.append({"type": "function_call_output", "call_id": first.output[1].call_id, "output": "sunny"})  # type: ignore[union-attr]
    second = client.responses.create(model=MODEL, input=history, tools=[WEATHER_TOOL])  # type: ignore[list-item]
    assert second.output_text == "Sunny."
