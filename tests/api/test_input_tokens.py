"""``POST /v1/responses/input_tokens`` through the openai SDK's ``responses.input_tokens.count``: the count is
the prompt a create with the same body sends the engine, history and stored state included."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding

from .conftest import Serve
from .helpers import MODEL, WEATHER_TOOL, openai_client

ENCODING = load_encoding()
ANSWER_IDS = ENCODING.encode("<|channel|>final<|message|>OK<|return|>", allowed_special="all")
# A forced call's prompt ends in its prefilled header: the model writes the (strict) arguments.
CALL_IDS = ENCODING.encode('{"city": "Rome"}<|call|>', allowed_special="all")
MESSAGE = ENCODING.encode("<|message|>", allowed_special="all")


class Recorder:
    """An engine that remembers every prompt and answers "OK" (or a forced call's arguments)."""

    def __init__(self) -> None:
        self.prompts: list[list[int]] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        self.prompts.append(list(request.prompt_ids))
        yield TokenChunk(token_ids=CALL_IDS if request.prompt_ids[-1:] == MESSAGE else ANSWER_IDS)
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


def _count_then_create(client: openai.OpenAI, recorder: Recorder, **body: Any) -> tuple[int, int]:
    counted = client.responses.input_tokens.count(**body)
    assert counted.object == "response.input_tokens"
    client.responses.create(**body)
    return counted.input_tokens, len(recorder.prompts[-1])


def test_count_is_the_prompt_create_sends(serve: Serve) -> None:
    recorder = Recorder()
    client = openai_client(serve(recorder.engine))
    plain = client.responses.input_tokens.count(model=MODEL, input="Hi")
    counted, sent = _count_then_create(client, recorder, model=MODEL, input="Hi")
    assert counted == sent == plain.input_tokens
    # Tools, instructions, reasoning effort and a forced tool (its prefill is part of the prompt) all count.
    full: dict[str, Any] = {
        "model": MODEL,
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "21 C"},
            {"role": "user", "content": "And in Rome?"},
        ],
        "instructions": "Answer in one word.",
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "reasoning": {"effort": "high"},
    }
    counted, sent = _count_then_create(client, recorder, **full)
    assert counted == sent
    assert counted > plain.input_tokens + 50


def test_model_is_optional(serve: Serve) -> None:
    recorder = Recorder()
    client = openai_client(serve(recorder.engine))
    assert client.responses.input_tokens.count(input="Hi").input_tokens == (
        client.responses.input_tokens.count(model=MODEL, input="Hi").input_tokens
    )


def test_previous_response_and_conversation_count(serve: Serve) -> None:
    recorder = Recorder()
    client = openai_client(serve(recorder.engine))
    first = client.responses.create(model=MODEL, input="My name is Ada.")
    alone = client.responses.input_tokens.count(model=MODEL, input="What is my name?").input_tokens
    counted, sent = _count_then_create(
        client, recorder, model=MODEL, input="What is my name?", previous_response_id=first.id
    )
    assert counted == sent > alone

    conversation = client.conversations.create(items=[{"role": "user", "content": "I live in Oslo."}])
    counted, sent = _count_then_create(
        client, recorder, model=MODEL, input="Where do I live?", conversation=conversation.id
    )
    assert counted == sent > alone
    # Counting adds nothing to the conversation (only the create did).
    items = client.conversations.items.list(conversation.id).data
    assert len(items) == 3  # the seeded message, the create's input and its answer


def test_bad_input_is_the_create_4xx(serve: Serve) -> None:
    client = openai_client(serve(Recorder().engine))
    with pytest.raises(openai.BadRequestError) as missing:
        client.responses.input_tokens.count(model=MODEL, input="Hi", previous_response_id="resp_nope")
    with pytest.raises(openai.BadRequestError) as created:
        client.responses.create(model=MODEL, input="Hi", previous_response_id="resp_nope")
    assert missing.value.body == created.value.body
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.input_tokens.count(model=MODEL, input=[{"role": "user", "content": 3}])  # type: ignore[list-item]
    assert bad.value.body["param"] == "input[0].content"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.input_tokens.count(model="gpt-7", input="Hi")
    assert unknown.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_a_prompt_over_the_window_is_still_counted(serve: Serve) -> None:
    recorder = Recorder()
    client = openai_client(serve(recorder.engine, context_window=300))
    long = "word " * 400
    counted = client.responses.input_tokens.count(model=MODEL, input=long).input_tokens
    assert counted > 400
    # Create refuses it; with truncation "auto" the count is that of the prompt create keeps.
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input=long)
    turns: list[Any] = [{"role": "user", "content": long}, {"role": "assistant", "content": "OK"}]
    turns.append({"role": "user", "content": "Hi"})
    counted, sent = _count_then_create(client, recorder, model=MODEL, input=turns, truncation="auto")
    assert counted == sent < 300
