"""Stored responses, chains, conversations, background mode, resume and cancel — with the ``openai`` client,
against SQLite and a real PostgreSQL (the ``serve`` fixture is parameterised over both)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest

from api.helpers import ANSWER, CALL_WEATHER, MODEL, WEATHER_TOOL, openai_client, post, sse_events, write_script
from harmony_responses.engine import Engine, EngineStream, GenerateRequest, ReplayEngine
from harmony_responses.vocab import load_encoding
from translate.invariants import check_stream

from .conftest import Serve

SLOW = {"harmony": "<|channel|>final<|message|>" + "word " * 300 + "<|return|>", "delay_ms": 10}
AFTER_CALL = "<|channel|>final<|message|>It is sunny in Paris.<|return|>"


class Recording(Engine):
    """A replay engine that keeps every prompt it was given (to check what prior items were rendered)."""

    name = "recording"

    def __init__(self, path: str) -> None:
        self.inner = ReplayEngine(path)
        self.prompts: list[str] = []

    def generate(self, request: GenerateRequest) -> EngineStream:
        self.prompts.append(load_encoding().decode(request.prompt_ids))
        return self.inner.generate(request)


def _wait(client: openai.OpenAI, response_id: str, statuses: tuple[str, ...], timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        response = client.responses.retrieve(response_id)
        if response.status in statuses or time.monotonic() > deadline:
            return response
        time.sleep(0.02)


def _raw_events(live: Any, response_id: str, query: str = "") -> list[dict[str, Any]]:
    reply = httpx.get(f"{live.base_url}/responses/{response_id}?stream=true{query}", timeout=30)
    assert reply.status_code == 200, reply.text
    return sse_events(reply.content) if reply.content else []


def test_store_retrieve_delete(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    created = client.responses.create(model=MODEL, input="Hi", instructions="Be brief.", metadata={"k": "v"})
    got = client.responses.retrieve(created.id)
    assert got.model_dump() == created.model_dump()
    assert got.status == "completed" and got.output_text == "Hello there!" and got.store is True
    # Every stored response can be streamed again from its log, identical to what was sent.
    events = _raw_events(live, created.id)
    check_stream(events)
    assert events[-1]["response"] == created.model_dump(mode="json", exclude_unset=True) | events[-1]["response"]
    assert client.responses.delete(created.id) is None
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.retrieve(created.id)
    assert caught.value.body == {
        "message": f"Response with id '{created.id}' not found.",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_store_false_is_never_written(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    created = client.responses.create(model=MODEL, input="Hi", store=False)
    assert created.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="Again", previous_response_id=created.id)
    assert caught.value.code == "previous_response_not_found"


def test_input_items_pagination(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    given = [{"role": "user", "content": f"message {i}"} for i in range(24)] + [
        {"type": "message", "id": "msg_client", "role": "user", "content": [{"type": "input_text", "text": "last"}]}
    ]
    created = client.responses.create(model=MODEL, input=given)  # type: ignore[arg-type]
    everything = list(client.responses.input_items.list(created.id, order="asc", limit=7))  # auto-paging
    assert [item.content[0].text for item in everything] == [f"message {i}" for i in range(24)] + ["last"]  # type: ignore[union-attr]
    assert all(item.id.startswith("msg_") for item in everything) and everything[-1].id == "msg_client"
    first = client.responses.input_items.list(created.id, limit=10)  # default order: desc
    assert [item.id for item in first.data] == [item.id for item in reversed(everything)][:10]
    assert first.has_more and first.first_id == "msg_client" and first.last_id == first.data[-1].id
    second = client.responses.input_items.list(created.id, limit=100, after=first.last_id)
    assert len(second.data) == 15 and not second.has_more
    raw = httpx.get(f"{live.base_url}/responses/{created.id}/input_items?limit=101", timeout=10)
    assert raw.status_code == 400 and raw.json()["error"]["code"] == "integer_above_max_value"
    raw = httpx.get(f"{live.base_url}/responses/{created.id}/input_items?order=up", timeout=10)
    assert raw.status_code == 400
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_nope")


def test_previous_response_chain_with_function_calls(serve: Serve, tmp_path: Any) -> None:
    script = write_script(
        tmp_path / "chain.jsonl", [CALL_WEATHER, AFTER_CALL, "<|channel|>final<|message|>Bye!<|return|>"]
    )
    engine = Recording(script.removeprefix("replay:"))
    live = serve(engine)
    client = openai_client(live)
    first = client.responses.create(
        model=MODEL, input="Weather in Paris?", instructions="Answer like a pirate.", tools=[WEATHER_TOOL]
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'}],
        tools=[WEATHER_TOOL],
    )
    assert second.previous_response_id == first.id and second.output_text == "It is sunny in Paris."
    third = client.responses.create(model=MODEL, previous_response_id=second.id, input="Thanks!")
    assert third.output_text == "Bye!"
    prompts = engine.prompts
    assert "Answer like a pirate." in prompts[0]
    assert "Answer like a pirate." not in prompts[1] and "Answer like a pirate." not in prompts[2]  # not carried
    # Turn 2 continues the tool call: the call, its output, and the reasoning of this unfinished turn.
    assert "to=functions.get_weather" in prompts[1] and '{"sky": "sunny"}' in prompts[1]
    assert "Need the weather." in prompts[1]
    # Turn 3: the whole chain, but the reasoning of the finished turn is dropped (harmony.md §6.2).
    assert "Weather in Paris?" in prompts[2] and "It is sunny in Paris." in prompts[2] and "Thanks!" in prompts[2]
    assert "Need the weather." not in prompts[2]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_x")
    assert caught.value.body == {
        "message": "Previous response with id 'resp_x' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }


def test_item_reference(serve: Serve) -> None:
    engine_lines = [ANSWER, ANSWER]
    live = serve(engine_lines)
    client = openai_client(live)
    first = client.responses.create(model=MODEL, input="Hi")
    message = first.output[-1]
    second = client.responses.create(
        model=MODEL,
        input=[{"type": "item_reference", "id": message.id}, {"role": "user", "content": "And?"}],  # type: ignore[list-item]
    )
    items = client.responses.input_items.list(second.id, order="asc").data
    assert items[0].id == message.id and items[0].role == "assistant"  # type: ignore[union-attr]
    bad = post(live, {"model": MODEL, "input": [{"type": "item_reference", "id": "msg_nope"}]})
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "Item with id 'msg_nope' not found."


def test_reasoning_resent_by_id_comes_back_from_the_store_for_its_owner(serve: Serve, tmp_path: Any) -> None:
    """LangChain streaming, LiteLLM and llm resend reasoning as ``{"type": "reasoning", "id": …}`` alone."""
    engine = Recording(write_script(tmp_path / "calls.jsonl", [CALL_WEATHER, AFTER_CALL]).removeprefix("replay:"))
    live = serve(engine, api_keys=("key-one", "key-two"))
    one, two = openai_client(live, api_key="key-one"), openai_client(live, api_key="key-two")
    question = {"role": "user", "content": "Weather in Paris?"}
    first = one.responses.create(model=MODEL, input=[question], tools=[WEATHER_TOOL])  # type: ignore[list-item]
    reasoning, call = first.output[0], first.output[-1]
    assert reasoning.type == "reasoning" and call.type == "function_call"
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"sunny": true}'}
    bare = {"type": "reasoning", "id": reasoning.id, "summary": []}
    turn = [question, bare, call.model_dump(exclude_none=True), result]

    one.responses.create(model=MODEL, input=turn, tools=[WEATHER_TOOL])  # type: ignore[arg-type]
    assert "<|channel|>analysis<|message|>Need the weather.<|end|>" in engine.prompts[-1]
    # Another key's request names an item it cannot see: nothing is restored.
    two.responses.create(model=MODEL, input=turn, tools=[WEATHER_TOOL])  # type: ignore[arg-type]
    assert "Need the weather." not in engine.prompts[-1]
    # Both resent copies are stored now (the same second as the original): a reference still names the
    # item as the model wrote it, the first stored.
    referenced = [question, {"type": "item_reference", "id": reasoning.id}, turn[2], result]
    third = one.responses.create(model=MODEL, input=referenced, tools=[WEATHER_TOOL])  # type: ignore[arg-type]
    assert "<|channel|>analysis<|message|>Need the weather.<|end|>" in engine.prompts[-1]
    stored = one.responses.input_items.list(third.id, order="asc").data[1]
    assert stored.type == "reasoning" and stored.content[0].text == "Need the weather."  # type: ignore[union-attr,index]


def test_conversations(serve: Serve) -> None:
    live = serve([ANSWER, "<|channel|>final<|message|>Second.<|return|>"])
    client = openai_client(live)
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "developer", "content": "Be nice."}], metadata={"topic": "demo"}
    )
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "demo"}
    assert client.conversations.retrieve(conversation.id).id == conversation.id
    one = client.responses.create(model=MODEL, input="Hi", conversation=conversation.id)
    assert one.conversation is not None and one.conversation.id == conversation.id
    two = client.responses.create(model=MODEL, input="More", conversation={"id": conversation.id})
    assert two.output_text == "Second."
    items = list(client.conversations.items.list(conversation.id, order="asc", limit=3))
    kinds = [(item.type, getattr(item, "role", None)) for item in items]
    assert kinds == [
        ("message", "developer"),
        ("message", "user"),
        ("reasoning", None),
        ("message", "assistant"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    added = client.conversations.items.create(conversation.id, items=[{"role": "user", "content": "Note."}])
    (note,) = added.data
    assert client.conversations.items.retrieve(note.id, conversation_id=conversation.id).id == note.id
    assert client.conversations.items.delete(note.id, conversation_id=conversation.id).id == conversation.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(note.id, conversation_id=conversation.id)
    updated = client.conversations.update(conversation.id, metadata={"topic": "other"})
    assert updated.metadata == {"topic": "other"}
    assert client.conversations.delete(conversation.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="x", conversation=conversation.id)


def test_background_poll(serve: Serve) -> None:
    live = serve([{"harmony": ANSWER, "delay_ms": 20}])
    client = openai_client(live)
    created = client.responses.create(model=MODEL, input="Hi", background=True)
    assert created.status == "queued" and created.background is True
    done = _wait(client, created.id, ("completed",))
    assert done.status == "completed" and done.output_text == "Hello there!"
    events = _raw_events(live, created.id)
    assert [e["type"] for e in events[:3]] == ["response.created", "response.queued", "response.in_progress"]
    check_stream(events)
    bad = post(live, {"model": MODEL, "input": "Hi", "background": True, "store": False})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "background"


def test_background_stream_resumed_after_a_dropped_connection(serve: Serve) -> None:
    live = serve([{"harmony": ANSWER.replace("Hello there!", "word " * 40), "delay_ms": 15}])
    client = openai_client(live)
    seen: list[Any] = []
    stream = client.responses.create(model=MODEL, input="Hi", background=True, stream=True)
    for event in stream:
        seen.append(event)
        if len(seen) == 12:
            break
    stream.close()  # the connection drops; the response goes on
    response_id = seen[0].response.id
    last = seen[-1].sequence_number
    assert [e.type for e in seen[:3]] == ["response.created", "response.queued", "response.in_progress"]
    rest = list(client.responses.retrieve(response_id, stream=True, starting_after=last))
    assert rest[0].sequence_number == last + 1 and rest[-1].type == "response.completed"
    # The helper asks for the whole log and drops what the client had already seen.
    with client.responses.stream(response_id=response_id, starting_after=last) as helper:
        helped = list(helper)
        final = helper.get_final_response()
    assert [e.sequence_number for e in helped] == [e.sequence_number for e in rest]
    assert final.output_text == "word " * 40
    combined = [e.model_dump(mode="json", exclude_unset=True) for e in seen + rest]
    full = _raw_events(live, response_id)
    assert [e["sequence_number"] for e in full] == list(range(len(full)))
    assert [e["type"] for e in full] == [e["type"] for e in combined]
    check_stream(full)


def test_cancel_during_generation(serve: Serve) -> None:
    live = serve([SLOW])
    client = openai_client(live)
    created = client.responses.create(model=MODEL, input="Hi", background=True)
    started = _wait(client, created.id, ("in_progress",))
    assert started.status == "in_progress"
    time.sleep(0.2)
    cancelled = client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(created.id).status == "cancelled"
    assert client.responses.cancel(created.id).status == "cancelled"  # idempotent
    events = _raw_events(live, created.id)  # the replay ends: the log has its terminal event
    check_stream(events)
    assert events[-1]["type"] == "response.incomplete" and events[-1]["response"]["status"] == "cancelled"
    text = events[-1]["response"]["output"][-1]["content"][0]["text"]
    assert 0 < len(text) < len("word " * 300)  # the engine was stopped mid-answer
    assert events[-1]["response"]["output"][-1]["status"] == "incomplete"


def test_cancel_a_synchronous_response_is_refused(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    created = client.responses.create(model=MODEL, input="Hi")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.cancel(created.id)
    assert caught.value.body["message"] == "Cannot cancel a synchronous response."  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nope")


def test_foreground_client_gone_ends_the_stored_response_cancelled(serve: Serve) -> None:
    live = serve([SLOW])
    client = openai_client(live)
    stream = client.responses.create(model=MODEL, input="Hi", stream=True)
    first = [event for _, event in zip(range(8), stream, strict=False)]
    stream.close()
    response = _wait(client, first[0].response.id, ("cancelled",))
    assert response.status == "cancelled"
    check_stream(_raw_events(live, response.id))


def test_isolation_per_api_key(serve: Serve) -> None:
    live = serve([ANSWER] * 3, api_keys=("key-one", "key-two"))
    one = openai_client(live, api_key="key-one")
    two = openai_client(live, api_key="key-two")
    created = one.responses.create(model=MODEL, input="Hi")
    conversation = one.conversations.create()
    assert one.responses.retrieve(created.id).id == created.id
    with pytest.raises(openai.NotFoundError):
        two.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        two.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        two.responses.input_items.list(created.id)
    with pytest.raises(openai.BadRequestError):
        two.responses.create(model=MODEL, input="x", previous_response_id=created.id)
    with pytest.raises(openai.NotFoundError):
        two.conversations.retrieve(conversation.id)
    assert one.responses.retrieve(created.id).id == created.id


def test_retention_expires_stored_data(serve: Serve) -> None:
    live = serve([ANSWER], retention=1.0)
    client = openai_client(live)
    created = client.responses.create(model=MODEL, input="Hi")
    conversation = client.conversations.create()
    for fetch in (
        lambda: client.responses.retrieve(created.id),
        lambda: client.conversations.retrieve(conversation.id),
    ):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                fetch()
            except openai.NotFoundError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("stored data outlived its retention")
