"""vLLM's Harmony extensions through the openai client against a real server: ``enable_response_messages``
(``input_messages``/``output_messages``), ``usage.output_tokens_details.tool_output_tokens`` and
``previous_input_messages``, as vLLM's own tests use them (``extra_body``, ``model_extra``).

The engine is scripted and keeps every prompt's token ids, so the messages the Response reports can be checked
against what the model was really given and what it really wrote.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai_harmony import Conversation, Message, Role

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding
from translate.invariants import check_stream

from .conftest import Serve
from .helpers import MODEL, WEATHER_TOOL, openai_client, post, sse_events

MESSAGES = {"enable_response_messages": True}
ANSWER = (
    "<|channel|>analysis<|message|>Easy: 4.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>"
)
SEARCH = (
    "<|channel|>analysis<|message|>I need a weather tool.<|end|><|start|>assistant"
    '<|channel|>commentary to=functions.tool_search <|constrain|>json<|message|>{"query": "weather"}<|call|>'
)
CALL_WEATHER = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>'
SEARCH_TOOLS: list[Any] = [{"type": "tool_search"}, dict(WEATHER_TOOL, defer_loading=True)]


class Scripted:
    """Answers each engine call with the next completion, round and round, keeping every prompt's ids."""

    def __init__(self, *completions: str) -> None:
        self.completions = completions
        self.prompts: list[list[int]] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        self.prompts.append(list(request.prompt_ids))
        text = self.completions[(len(self.prompts) - 1) % len(self.completions)]
        ids = tokens(text)
        for start in range(0, len(ids), 4):  # a few tokens a chunk, as engines stream
            yield TokenChunk(token_ids=ids[start : start + 4])
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


def tokens(text: str) -> list[int]:
    return load_encoding().encode(text, allowed_special="all")


def harmony(messages: list[dict[str, Any]]) -> list[Message]:
    return [Message.from_dict(message) for message in messages]


def test_the_messages_are_what_the_model_was_given_and_wrote(serve: Serve) -> None:
    scripted = Scripted(ANSWER)
    client = openai_client(serve(scripted.engine))
    response = client.responses.create(model=MODEL, input="2 + 2?", instructions="Be brief.", extra_body=MESSAGES)

    given = harmony(response.model_extra["input_messages"])  # type: ignore[index]
    assert [m.author.role for m in given] == [Role.SYSTEM, Role.DEVELOPER, Role.USER]
    # Rendered again, they are the prompt, token for token.
    rendered = load_encoding().render_conversation_for_completion(Conversation.from_messages(given), Role.ASSISTANT)
    assert rendered == scripted.prompts[0]
    written = response.model_extra["output_messages"]  # type: ignore[index]
    assert [(m["role"], m.get("channel"), m["content"]) for m in written] == [
        ("assistant", "analysis", [{"type": "text", "text": "Easy: 4."}]),
        ("assistant", "final", [{"type": "text", "text": "2 + 2 = 4."}]),
    ]
    assert response.output_text == "2 + 2 = 4."
    # Stored with the Response.
    stored = client.responses.retrieve(response.id)
    assert stored.model_extra["output_messages"] == written  # type: ignore[index]


def test_streamed_the_lifecycle_events_carry_them(serve: Serve) -> None:
    client = openai_client(serve(Scripted(ANSWER).engine))
    events = list(client.responses.create(model=MODEL, input="2 + 2?", stream=True, extra_body=MESSAGES))
    lifecycle = {
        e.type: e.response.model_extra for e in events if e.type.startswith("response.") and hasattr(e, "response")
    }
    assert set(lifecycle) == {"response.created", "response.in_progress", "response.completed"}
    for extra in lifecycle.values():
        assert [m["role"] for m in extra["input_messages"]] == ["system", "user"]
    assert lifecycle["response.created"]["output_messages"] == []
    assert [m["channel"] for m in lifecycle["response.completed"]["output_messages"]] == ["analysis", "final"]
    for message in lifecycle["response.completed"]["output_messages"]:
        Message.from_dict(message)  # as vLLM's test checks: each converts back into harmony


def test_not_asked_for_the_response_stays_the_apis(serve: Serve) -> None:
    live = serve(Scripted(ANSWER).engine)
    raw = sse_events(post(live, {"model": MODEL, "input": "2 + 2?", "stream": True}).content)
    check_stream(raw)
    for event in raw:
        response = event.get("response") or {}
        assert "input_messages" not in response and "output_messages" not in response
        assert "tool_output_tokens" not in ((response.get("usage") or {}).get("output_tokens_details") or {})
    bad = post(live, {"model": MODEL, "input": "2 + 2?", "enable_response_messages": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "enable_response_messages"


def test_a_built_in_tool_loop_reports_the_results_tokens_and_messages(serve: Serve) -> None:
    # The server runs the tool search itself: its result is fed back to the model in a second engine call.
    scripted = Scripted(SEARCH, CALL_WEATHER)
    live = serve(scripted.engine)
    client = openai_client(live)
    response = client.responses.create(model=MODEL, input="Weather in Oslo?", tools=SEARCH_TOOLS, extra_body=MESSAGES)

    first, second = scripted.prompts
    assert second[: len(first)] == first
    fed_back = len(second) - len(first) - len(tokens(SEARCH))  # the tool message and the <|start|>assistant after it
    usage = response.usage
    assert usage is not None and usage.output_tokens_details.model_extra == {"tool_output_tokens": fed_back}
    assert fed_back > 20 and usage.input_tokens == len(first) + len(second)  # still input, as before
    assert usage.output_tokens == len(tokens(SEARCH)) + len(tokens(CALL_WEATHER))

    written = response.model_extra["output_messages"]  # type: ignore[index]
    shape = [(m["role"], m.get("name"), m.get("channel"), m.get("recipient")) for m in written]
    assert shape == [
        ("assistant", None, "analysis", None),
        ("assistant", None, "commentary", "functions.tool_search"),
        ("tool", "functions.tool_search", "commentary", "assistant"),
        ("assistant", None, "commentary", "functions.get_weather"),
    ]
    # The tool message is what the model read: rendered, it is the second prompt's tokens after the call.
    result = load_encoding().render(harmony(written)[2])
    assert second[len(first) + len(tokens(SEARCH)) :] == [*result, *tokens("<|start|>assistant")]

    # Streamed and without the messages, the detail is there all the same (a response that runs built-in tools).
    plain = sse_events(post(live, {"model": MODEL, "input": "Weather?", "tools": SEARCH_TOOLS, "stream": True}).content)
    check_stream(plain)
    details = plain[-1]["response"]["usage"]["output_tokens_details"]
    assert details["tool_output_tokens"] == fed_back and "output_messages" not in plain[-1]["response"]


def test_without_built_in_tools_there_is_no_detail(serve: Serve) -> None:
    client = openai_client(serve(Scripted(CALL_WEATHER).engine))
    response = client.responses.create(model=MODEL, input="Weather?", tools=[WEATHER_TOOL])  # type: ignore[list-item]
    assert response.usage is not None and response.usage.output_tokens_details.model_extra == {}


@pytest.mark.parametrize("streamed", [False, True])
def test_a_length_cut_keeps_the_message_as_far_as_it_was_written(serve: Serve, streamed: bool) -> None:
    client = openai_client(serve(Scripted(ANSWER).engine))
    request: dict[str, Any] = {"model": MODEL, "input": "2 + 2?", "max_output_tokens": 16, "extra_body": MESSAGES}
    if streamed:
        response = [e for e in client.responses.create(stream=True, **request) if e.type == "response.incomplete"][
            0
        ].response
    else:
        response = client.responses.create(**request)
    assert response.status == "incomplete"
    written = response.model_extra["output_messages"]  # type: ignore[index]
    # The same texts as the output items the translator read from those tokens, the cut message included.
    items = [(item.type, item.content[0].text) for item in response.output]  # type: ignore[union-attr]
    assert [
        ("reasoning" if m["channel"] == "analysis" else "message", m["content"][0]["text"]) for m in written
    ] == items
    assert items[-1] == ("message", "2 +")


def test_an_unknown_extra_field_is_a_typed_error_through_the_sdk(serve: Serve) -> None:
    client = openai_client(serve(Scripted(ANSWER).engine))
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input="Hi", extra_body={"enable_response_messages": 1})
    assert raised.value.param == "enable_response_messages"


def test_previous_input_messages_are_refused_naming_them(serve: Serve) -> None:
    # Harmony messages would skip the checks input items get, and a stored response keeps input items only.
    scripted = Scripted(ANSWER)
    client = openai_client(serve(scripted.engine))
    first = client.responses.create(model=MODEL, input="2 + 2?", extra_body=MESSAGES)
    history = [*first.model_extra["input_messages"], *first.model_extra["output_messages"]]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input="", extra_body={"previous_input_messages": history})
    assert raised.value.param == "previous_input_messages" and raised.value.code == "unsupported_parameter"
    assert "'input' items" in raised.value.message
    assert len(scripted.prompts) == 1  # refused before the engine
