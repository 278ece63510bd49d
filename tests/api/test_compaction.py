"""Compaction through the openai SDK against the real server: ``responses.compact``, the ``compaction_trigger``
input item and ``context_management`` on create, and what the model reads when a ``compaction`` item comes back.

The engine is scripted and keeps every prompt it was given, so each test checks both what the client gets
and what the model was asked: the summary prompt (the conversation, then the request for a summary, the
final channel prefilled), and the follow-up prompt (the summary in place of the history it replaced). Every
stream passes ``check_stream`` (protocol invariants, openai's types and its accumulator).
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest

from harmony_responses.engine import EngineError, EngineStream, GenerateRequest, MockEngine
from harmony_responses.render._compaction import SUMMARY_INSTRUCTION, SUMMARY_PREFIX
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding
from translate.invariants import check_stream

from .conftest import Serve
from .helpers import CALL_WEATHER, MODEL, WEATHER_TOOL, openai_client, post, sse_events

SUMMARY = "The user asked for the weather in Paris; get_weather said 18C and sunny. Next: answer in French."
SUMMARY_COMPLETION = SUMMARY + "<|return|>"  # the final channel is prefilled: the summary follows at once
ANSWER = "<|channel|>analysis<|message|>Use the summary.<|end|><|start|>assistant<|channel|>final<|message|>"
ANSWER += "Il fait 18C et beau.<|return|>"
SUMMARY_PROMPT_END = (
    f"<|start|>user<|message|>{SUMMARY_INSTRUCTION}<|end|><|start|>assistant<|channel|>final<|message|>"
)

CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "18C and sunny"},
    {"role": "assistant", "content": "It is 18C and sunny in Paris."},
    {"role": "user", "content": "Say it in French."},
]


class Scripted:
    """Answers each engine call with the next completion (the last one repeats), keeping every prompt."""

    def __init__(self, *completions: str) -> None:
        self.completions = list(completions)
        self.requests: list[GenerateRequest] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        encoding = load_encoding()
        self.requests.append(request)
        text = self.completions[min(len(self.requests) - 1, len(self.completions) - 1)]
        yield TokenChunk(token_ids=encoding.encode(text, allowed_special="all"))
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))

    @property
    def prompts(self) -> list[str]:
        return [load_encoding().decode(r.prompt_ids) for r in self.requests]


def _summary_message() -> str:
    return f"<|start|>user<|message|>{SUMMARY_PREFIX}{SUMMARY}<|end|>"


def _error(response: httpx.Response, param: str) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    return error


# ------------------------------------------------------------------------------------ POST /v1/responses/compact


def test_compact_returns_the_user_messages_and_a_sealed_summary(serve: Serve) -> None:
    model = Scripted(SUMMARY_COMPLETION)
    client = openai_client(serve(model.engine))

    compacted = client.responses.compact(model=MODEL, input=CONVERSATION, instructions="Be brief.")  # type: ignore[arg-type]

    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    *messages, item = compacted.output
    assert [(m.type, m.role, m.content[0].text) for m in messages] == [  # type: ignore[union-attr]
        ("message", "user", "What's the weather in Paris?"),
        ("message", "user", "Say it in French."),
    ]
    assert item.type == "compaction" and item.id.startswith("cmp_")
    assert isinstance(item.encrypted_content, str) and SUMMARY not in item.encrypted_content
    # The model was asked once: the whole conversation as create renders it, then the request for a summary.
    [prompt] = model.prompts
    assert prompt.endswith(SUMMARY_PROMPT_END), prompt[-400:]
    assert "Be brief." in prompt and "18C and sunny" in prompt and "It is 18C and sunny in Paris." in prompt
    summary_tokens = len(load_encoding().encode(SUMMARY_COMPLETION, allowed_special="all"))
    assert compacted.usage.input_tokens == len(model.requests[0].prompt_ids)
    assert compacted.usage.output_tokens == summary_tokens
    assert compacted.usage.total_tokens == compacted.usage.input_tokens + summary_tokens


def test_the_compacted_window_renders_the_summary_in_place_of_what_it_replaced(serve: Serve) -> None:
    model = Scripted(SUMMARY_COMPLETION, ANSWER)
    client = openai_client(serve(model.engine))
    compacted = client.responses.compact(model=MODEL, input=CONVERSATION)  # type: ignore[arg-type]
    window = [item.model_dump(exclude_none=True, warnings=False) for item in compacted.output]
    follow_up = {"role": "user", "content": "Thanks. And tomorrow?"}

    answer = client.responses.create(model=MODEL, input=[*window, follow_up], tools=[WEATHER_TOOL])  # type: ignore[list-item]

    assert answer.output_text == "Il fait 18C et beau."
    prompt = model.prompts[1]
    # The user messages, then the summary as a user message, then the new message; what the summary replaced
    # (the call, its output, the assistant's answer) is not in the prompt.
    user_turns = (
        "<|start|>user<|message|>What's the weather in Paris?<|end|><|start|>user<|message|>Say it in French.<|end|>"
        + _summary_message()
        + "<|start|>user<|message|>Thanks. And tomorrow?<|end|><|start|>assistant"
    )
    assert prompt.endswith(user_turns), prompt[-600:]
    assert "18C and sunny" not in prompt.replace(SUMMARY, "") and "get_weather" in prompt  # declared, not called
    assert "It is 18C and sunny in Paris." not in prompt

    # The same conversation renders to the same tokens however it is resent: the whole history before the item
    # (as a stateless client that appends without pruning sends it) or only the compacted window.
    client.responses.create(
        model=MODEL,
        input=[*CONVERSATION, window[-1], follow_up],  # type: ignore[list-item]
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert model.requests[2].prompt_ids == model.requests[1].prompt_ids


def test_compact_with_previous_response_id(serve: Serve) -> None:
    model = Scripted(CALL_WEATHER, SUMMARY_COMPLETION)
    client = openai_client(serve(model.engine))
    first = client.responses.create(model=MODEL, input="What's the weather in Paris?", tools=[WEATHER_TOOL])  # type: ignore[list-item]

    compacted = client.responses.compact(model=MODEL, previous_response_id=first.id)

    assert [item.type for item in compacted.output] == ["message", "compaction"]
    assert '{"city": "Paris"}<|call|>' in model.prompts[1]  # the stored call
    assert model.prompts[1].endswith(SUMMARY_PROMPT_END)


def test_compact_refuses_what_create_refuses(serve: Serve) -> None:
    live = serve(Scripted(SUMMARY_COMPLETION).engine)
    response = httpx.post(f"{live.base_url}/responses/compact", json={"model": MODEL, "input": 5}, timeout=10)
    _error(response, "input")
    response = httpx.post(f"{live.base_url}/responses/compact", json={"model": "gpt-7", "input": "Hi"}, timeout=10)
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        openai_client(live).responses.compact(model=MODEL, previous_response_id="resp_missing")


def test_compact_with_nothing_to_compact_is_a_400_without_an_engine_call(serve: Serve) -> None:
    model = Scripted(SUMMARY_COMPLETION)
    live = serve(model.engine)
    client = openai_client(live)
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.compact(model=MODEL)
    assert raised.value.param == "input" and raised.value.code == "missing_required_parameter"
    error = _error(httpx.post(f"{live.base_url}/responses/compact", json={"model": MODEL, "input": []}), "input")
    assert "nothing to compact" in error["message"]
    conversation = client.conversations.create()
    with pytest.raises(openai.BadRequestError):
        client.responses.compact(model=MODEL, extra_body={"conversation": conversation.id})
    assert model.requests == []


# ------------------------------------------------------------------------------------ what a compaction item is


def _compaction_item(client: openai.OpenAI) -> dict[str, Any]:
    compacted = client.responses.compact(model=MODEL, input=CONVERSATION)  # type: ignore[arg-type]
    return compacted.output[-1].model_dump(exclude_none=True)


def test_a_tampered_or_foreign_compaction_item_is_refused(serve: Serve) -> None:
    model = Scripted(SUMMARY_COMPLETION, ANSWER)
    live = serve(model.engine, secret_key="the-first-servers-key")
    item = _compaction_item(openai_client(live))
    follow_up = {"role": "user", "content": "And tomorrow?"}

    blob = item["encrypted_content"]
    tampered = blob[:40] + ("A" if blob[40] != "A" else "B") + blob[41:]
    for bad in (tampered, "", "not a blob", blob[:-8]):
        response = post(live, {"model": MODEL, "input": [follow_up, {**item, "encrypted_content": bad}]})
        error = _error(response, "input[1].encrypted_content")
        assert error["code"] == "invalid_encrypted_content" and "could not be opened" in error["message"]
    response = post(live, {"model": MODEL, "input": [{"type": "compaction", "id": item["id"]}]})
    assert _error(response, "input[0].encrypted_content")["code"] == "missing_required_parameter"

    # Another server's key.
    other = serve(Scripted(ANSWER).engine, secret_key="another-servers-key")
    _error(post(other, {"model": MODEL, "input": [item, follow_up]}), "input[0].encrypted_content")
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client(other).responses.create(model=MODEL, input=[item, follow_up])  # type: ignore[list-item]
    assert raised.value.param == "input[0].encrypted_content"  # type: ignore[attr-defined]
    assert len(model.requests) == 1  # nothing refused reached the engine


def test_reasoning_and_compaction_blobs_are_not_interchangeable(serve: Serve) -> None:
    model = Scripted(ANSWER, SUMMARY_COMPLETION, ANSWER)
    live = serve(model.engine)
    client = openai_client(live)
    answered = client.responses.create(model=MODEL, input="Hi", store=False, include=["reasoning.encrypted_content"])
    reasoning = next(item for item in answered.output if item.type == "reasoning").to_dict()
    assert reasoning["encrypted_content"]

    # A reasoning blob is not a compaction…
    forged = {"type": "compaction", "encrypted_content": reasoning["encrypted_content"]}
    _error(
        post(live, {"model": MODEL, "input": [forged, {"role": "user", "content": "Go on"}]}),
        "input[0].encrypted_content",
    )

    # …and a compaction blob is not reasoning: it does not open as one, so nothing of it reaches the model.
    item = _compaction_item(client)
    passed_off = {"type": "reasoning", "summary": [], "encrypted_content": item["encrypted_content"]}
    call = {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": "{}"}
    client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": "Weather?"}, passed_off, call],  # type: ignore[list-item]
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert SUMMARY not in model.prompts[-1]


# ------------------------------------------------------------------------------------ compaction_trigger on create


def test_compaction_trigger_streams_one_compaction_item(serve: Serve) -> None:
    model = Scripted(SUMMARY_COMPLETION)
    live = serve(model.engine)

    response = post(live, {"model": MODEL, "input": [*CONVERSATION, {"type": "compaction_trigger"}], "stream": True})

    events = sse_events(response.content)
    check_stream(events)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
        "response.completed",
    ]
    item = events[4]["item"]
    assert events[3]["item_id"] == item["id"] and events[3]["output_index"] == 0
    assert SUMMARY not in response.text  # the summary never streams in clear
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["output"] == [item]
    assert final["usage"]["input_tokens"] == len(model.requests[0].prompt_ids)
    [prompt] = model.prompts
    assert prompt.endswith(SUMMARY_PROMPT_END) and "compaction_trigger" not in prompt

    # Codex resends the user and developer messages with the item: the model continues from the summary.
    model.completions = [ANSWER]
    answer = openai_client(live).responses.create(
        model=MODEL,
        input=[CONVERSATION[0], CONVERSATION[-1], item],  # type: ignore[list-item]
    )
    assert answer.output_text == "Il fait 18C et beau."
    assert model.prompts[-1].endswith(_summary_message() + "<|start|>assistant")


def test_compaction_trigger_without_streaming_and_with_the_sdk(serve: Serve) -> None:
    client = openai_client(serve(Scripted(SUMMARY_COMPLETION).engine))
    response = client.responses.create(
        model=MODEL,
        input=[*CONVERSATION, {"type": "compaction_trigger"}],  # type: ignore[list-item]
    )
    assert response.status == "completed"
    [item] = response.output
    assert item.type == "compaction" and item.encrypted_content  # type: ignore[union-attr]
    assert response.usage is not None and response.usage.output_tokens > 0


def test_compaction_trigger_must_be_the_last_item(serve: Serve) -> None:
    model = Scripted(SUMMARY_COMPLETION)
    live = serve(model.engine)
    body = {"model": MODEL, "input": [{"type": "compaction_trigger"}, {"role": "user", "content": "Hi"}]}
    assert "final input item" in _error(post(live, body), "input[0]")["message"]
    assert model.requests == []


def test_stored_compaction_continues_with_previous_response_id(serve: Serve) -> None:
    model = Scripted(CALL_WEATHER, SUMMARY_COMPLETION, ANSWER)
    client = openai_client(serve(model.engine))
    first = client.responses.create(model=MODEL, input="What's the weather in Paris?", tools=[WEATHER_TOOL])  # type: ignore[list-item]
    call = first.output[-1]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "18C and sunny"}  # type: ignore[union-attr]

    compacted = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[output, {"type": "compaction_trigger"}],  # type: ignore[list-item]
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert [item.type for item in compacted.output] == ["compaction"]
    assert "18C and sunny" in model.prompts[1] and model.prompts[1].endswith(SUMMARY_PROMPT_END)

    answer = client.responses.create(
        model=MODEL,
        previous_response_id=compacted.id,
        input="In French, please.",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert answer.output_text == "Il fait 18C et beau."
    # The stored chain (the call, its output, the trigger) is replaced by the summary; the user message stays.
    assert model.prompts[2].endswith(
        "<|start|>user<|message|>What's the weather in Paris?<|end|>"
        + _summary_message()
        + "<|start|>user<|message|>In French, please.<|end|><|start|>assistant"
    ), model.prompts[2][-500:]
    assert "18C and sunny" not in model.prompts[2].replace(SUMMARY, "")


def test_compaction_in_a_conversation(serve: Serve) -> None:
    model = Scripted(SUMMARY_COMPLETION, ANSWER)
    client = openai_client(serve(model.engine))
    conversation = client.conversations.create(items=CONVERSATION)  # type: ignore[arg-type]

    compacted = client.responses.create(
        model=MODEL,
        conversation=conversation.id,
        input=[{"type": "compaction_trigger"}],  # type: ignore[list-item]
    )
    assert [item.type for item in compacted.output] == ["compaction"]
    client.responses.create(model=MODEL, conversation=conversation.id, input="Merci.")

    assert model.prompts[1].endswith(
        "<|start|>user<|message|>What's the weather in Paris?<|end|><|start|>user<|message|>Say it in French.<|end|>"
        + _summary_message()
        + "<|start|>user<|message|>Merci.<|end|><|start|>assistant"
    ), model.prompts[1][-500:]
    # An item in the conversation that does not open is named by the conversation, not by the input.
    client.conversations.items.create(conversation.id, items=[{"type": "compaction", "encrypted_content": "junk"}])  # type: ignore[list-item]
    live_error = post_conversation_error(client, conversation.id)
    assert live_error["param"] == "conversation" and live_error["code"] == "invalid_encrypted_content"


def post_conversation_error(client: openai.OpenAI, conversation_id: str) -> dict[str, Any]:
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, conversation=conversation_id, input="Again?")
    return raised.value.body  # type: ignore[return-value]


def test_compaction_trigger_in_the_background(serve: Serve) -> None:
    client = openai_client(serve(Scripted(SUMMARY_COMPLETION).engine))
    queued = client.responses.create(
        model=MODEL,
        input=[*CONVERSATION, {"type": "compaction_trigger"}],  # type: ignore[list-item]
        background=True,
    )
    deadline = time.monotonic() + 10
    while (done := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, done.status
        time.sleep(0.02)
    assert done.status == "completed" and [item.type for item in done.output] == ["compaction"]
    replay = httpx.get(f"{client.base_url}responses/{queued.id}", params={"stream": "true"}, timeout=10)
    events = sse_events(replay.content)
    check_stream(events)
    assert "response.compaction.compacting" in [e["type"] for e in events]


def test_compaction_trigger_over_websocket(serve: Serve) -> None:
    client = openai_client(serve(Scripted(SUMMARY_COMPLETION).engine))
    with client.responses.connect() as connection:
        connection.response.create(model=MODEL, input=[*CONVERSATION, {"type": "compaction_trigger"}])  # type: ignore[list-item]
        events = [json.loads(connection.recv_bytes())]
        while events[-1]["type"] not in ("response.completed", "response.failed", "error"):
            events.append(json.loads(connection.recv_bytes()))
    check_stream(events)
    assert events[-1]["response"]["output"][0]["type"] == "compaction"


def test_a_failed_summary_fails_the_response_and_closes_the_item(serve: Serve) -> None:
    async def broken(request: GenerateRequest) -> EngineStream:
        yield TokenChunk(token_ids=load_encoding().encode("Half a summ", allowed_special="all"))
        yield EngineEnd(reason="error", message="GPU on fire", prompt_tokens=len(request.prompt_ids))

    live = serve(MockEngine(broken))
    response = post(live, {"model": MODEL, "input": [*CONVERSATION, {"type": "compaction_trigger"}], "stream": True})
    events = sse_events(response.content)
    check_stream(events)
    assert events[-1]["type"] == "response.failed"
    assert "GPU on fire" in events[-1]["response"]["error"]["message"]
    assert events[-1]["response"]["output"] == [
        {"id": events[2]["item"]["id"], "type": "compaction", "encrypted_content": ""}
    ]


def test_an_engine_refusing_the_summary_is_a_503(serve: Serve) -> None:
    async def refuse(request: GenerateRequest) -> EngineStream:
        raise EngineError("the engine at http://gpu:8000 is unreachable")
        yield  # pragma: no cover

    live = serve(MockEngine(refuse))
    trigger = {"model": MODEL, "input": [*CONVERSATION, {"type": "compaction_trigger"}]}
    for response in (
        post(live, trigger),
        post(live, {**trigger, "stream": True}),
        httpx.post(f"{live.base_url}/responses/compact", json={"model": MODEL, "input": CONVERSATION}, timeout=10),
    ):
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "engine_unavailable"


def test_truncation_keeps_the_compaction_item(serve: Serve) -> None:
    # With truncation "auto", the oldest turns go first; the compaction item (the history they had) stays.
    model = Scripted(SUMMARY_COMPLETION, ANSWER)
    client = openai_client(serve(model.engine, context_window=700))
    item = _compaction_item(client)
    filler = [{"role": "user", "content": "word " * 250}, {"role": "assistant", "content": "ok"}] * 3
    client.responses.create(
        model=MODEL,
        input=[item, *filler, {"role": "user", "content": "Go on."}],  # type: ignore[list-item]
        truncation="auto",
        max_output_tokens=16,
    )
    prompt = model.prompts[-1]
    kept = prompt.count("<|start|>user<|message|>word")
    assert 0 < kept < 3, prompt  # some of the filler turns were dropped
    assert _summary_message() in prompt and prompt.endswith("Go on.<|end|><|start|>assistant")


# ------------------------------------------------------------------------------------ context_management on create


def test_context_management_compacts_first_then_answers_from_the_summary(serve: Serve) -> None:
    model = Scripted(SUMMARY_COMPLETION, ANSWER)
    live = serve(model.engine)
    body = {
        "model": MODEL,
        "input": CONVERSATION,
        "tools": [WEATHER_TOOL],
        "context_management": [{"type": "compaction", "compact_threshold": 100}],
        "stream": True,
    }

    events = sse_events(post(live, body).content)

    check_stream(events)
    types = [e["type"] for e in events]
    assert types[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
    ]
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["compaction", "reasoning", "message"]
    assert final["output"][-1]["content"][0]["text"] == "Il fait 18C et beau."
    assert events[-1]["type"] == "response.completed"
    summary_prompt, answer_prompt = model.requests
    assert model.prompts[0].endswith(SUMMARY_PROMPT_END)
    # The answer came from the compacted conversation: the user messages, then the summary.
    assert model.prompts[1].endswith(
        "<|start|>user<|message|>What's the weather in Paris?<|end|><|start|>user<|message|>Say it in French.<|end|>"
        + _summary_message()
        + "<|start|>assistant"
    ), model.prompts[1][-500:]
    encoding = load_encoding()
    generated = sum(len(encoding.encode(c, allowed_special="all")) for c in (SUMMARY_COMPLETION, ANSWER))
    assert final["usage"]["input_tokens"] == len(summary_prompt.prompt_ids) + len(answer_prompt.prompt_ids)
    assert final["usage"]["output_tokens"] == generated

    # A client appending the output to its input (stateless chaining) gets the answer's own prompt back.
    model.completions = [ANSWER]
    openai_client(live).responses.create(
        model=MODEL,
        input=[*CONVERSATION, final["output"][0]],  # type: ignore[list-item]
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        context_management=[{"type": "compaction", "compact_threshold": 100_000}],
    )
    assert model.requests[-1].prompt_ids == answer_prompt.prompt_ids


def test_context_management_below_the_threshold_does_not_compact(serve: Serve) -> None:
    model = Scripted(ANSWER)
    client = openai_client(serve(model.engine))
    response = client.responses.create(
        model=MODEL,
        input=CONVERSATION,  # type: ignore[arg-type]
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        context_management=[{"type": "compaction", "compact_threshold": 100_000}],
    )
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert len(model.requests) == 1 and SUMMARY_INSTRUCTION not in model.prompts[0]


def test_context_management_stored_and_in_the_background(serve: Serve) -> None:
    model = Scripted(SUMMARY_COMPLETION, ANSWER)
    client = openai_client(serve(model.engine))
    queued = client.responses.create(
        model=MODEL,
        input=CONVERSATION,  # type: ignore[arg-type]
        context_management=[{"type": "compaction", "compact_threshold": 50}],
        background=True,
    )
    with client.responses.stream(response_id=queued.id) as stream:
        types = [event.type for event in stream]
    assert "response.compaction.compacting" in types
    done = client.responses.retrieve(queued.id)
    assert [item.type for item in done.output] == ["compaction", "reasoning", "message"]
    replay = httpx.get(f"{client.base_url}responses/{queued.id}", params={"stream": "true"}, timeout=10)
    check_stream(sse_events(replay.content))


@pytest.mark.parametrize(
    ("entry", "param", "code"),
    [
        ({"type": "truncation"}, "context_management[0].type", "invalid_value"),
        ({"compact_threshold": 5}, "context_management[0].type", "missing_required_parameter"),
        ({"type": "compaction", "compact_threshold": "5"}, "context_management[0].compact_threshold", "invalid_type"),
        (
            {"type": "compaction", "compact_threshold": 0},
            "context_management[0].compact_threshold",
            "integer_below_min_value",
        ),
        ("compaction", "context_management[0]", "invalid_type"),
    ],
)
def test_context_management_is_validated(serve: Serve, entry: Any, param: str, code: str) -> None:
    live = serve(Scripted(ANSWER).engine)
    body = {"model": MODEL, "input": "Hi", "context_management": [entry]}
    assert _error(post(live, body), param)["code"] == code
