"""Custom (freeform) tools through the openai SDK against the real server: a call is a
``custom_tool_call`` in every mode (streamed, not, stored, background, WebSocket), ``tool_choice`` forces one,
its output goes back into the prompt (``tool_search`` and deferred tools: test_tool_search.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding
from translate.invariants import check_stream

from .conftest import Serve
from .helpers import MODEL, WEATHER_TOOL, openai_client, sse_events

PATCH = '*** Begin Patch\n*** Add File: hello.txt\n+Hello, "world"\n*** End Patch\n'
APPLY_PATCH: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" LF /(.|\\n)*/'},
}
HEADER = "<|channel|>commentary to=functions.apply_patch <|constrain|>json<|message|>"
CALL = "<|channel|>analysis<|message|>Patch it.<|end|><|start|>assistant" + HEADER + json.dumps({"input": PATCH})
CALL += "<|call|>"
ANSWER = "<|channel|>final<|message|>Done.<|return|>"


class Scripted:
    """Answers each engine call with the next completion, keeping every prompt (decoded)."""

    def __init__(self, *completions: str) -> None:
        self.completions = list(completions)
        self.prompts: list[str] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        encoding = load_encoding()
        self.prompts.append(encoding.decode(request.prompt_ids))
        text = self.completions[min(len(self.prompts) - 1, len(self.completions) - 1)]
        yield TokenChunk(token_ids=encoding.encode(text, allowed_special="all"))
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


def _only_call(output: list[Any]) -> Any:
    calls = [item for item in output if item.type == "custom_tool_call"]
    assert len(calls) == 1, output
    return calls[0]


def test_a_call_streamed_and_not(serve: Serve) -> None:
    client = openai_client(serve(Scripted(CALL).engine))
    response = client.responses.create(model=MODEL, input="Add hello.txt", tools=[APPLY_PATCH, WEATHER_TOOL])
    call = _only_call(response.output)
    assert (call.name, call.input) == ("apply_patch", PATCH) and call.call_id.startswith("call_")
    assert response.status == "completed"

    with client.responses.stream(model=MODEL, input="Add hello.txt", tools=[APPLY_PATCH]) as stream:
        deltas = [e.delta for e in stream if e.type == "response.custom_tool_call_input.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == PATCH and len(deltas) > 3
    assert _only_call(final.output).input == PATCH
    # Stored as streamed: retrieved and replayed alike.
    stored = client.responses.retrieve(final.id)
    assert _only_call(stored.output).model_dump() == _only_call(final.output).model_dump()
    replay = httpx.get(f"{client.base_url}responses/{final.id}", params={"stream": "true"}, timeout=10)
    events = sse_events(replay.content)
    check_stream(events)
    assert [e["input"] for e in events if e["type"] == "response.custom_tool_call_input.done"] == [PATCH]


def test_a_call_in_the_background(serve: Serve) -> None:
    client = openai_client(serve(Scripted(CALL).engine))
    queued = client.responses.create(model=MODEL, input="Add hello.txt", tools=[APPLY_PATCH], background=True)
    with client.responses.stream(response_id=queued.id) as stream:
        deltas = [e.delta for e in stream if e.type == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == PATCH
    replay = httpx.get(f"{client.base_url}responses/{queued.id}", params={"stream": "true"}, timeout=10)
    check_stream(sse_events(replay.content))
    assert _only_call(client.responses.retrieve(queued.id).output).input == PATCH


def test_a_call_over_websocket(serve: Serve) -> None:
    client = openai_client(serve(Scripted(CALL).engine))
    with client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Add hello.txt", tools=[APPLY_PATCH])  # type: ignore[list-item]
        events = [json.loads(connection.recv_bytes())]
        while events[-1]["type"] != "response.completed":
            events.append(json.loads(connection.recv_bytes()))
    check_stream(events)
    assert events[-1]["response"]["output"][-1]["input"] == PATCH


def test_tool_choice_forces_a_custom_tool_and_its_output_goes_back(serve: Serve) -> None:
    scripted = Scripted(json.dumps({"input": PATCH}) + "<|call|>", ANSWER)
    client = openai_client(serve(scripted.engine))
    forced = {"type": "custom", "name": "apply_patch"}
    first = client.responses.create(model=MODEL, input="Add hello.txt", tools=[APPLY_PATCH], tool_choice=forced)
    assert scripted.prompts[-1].endswith("<|start|>assistant" + HEADER)  # the model continues the call's JSON
    call = _only_call(first.output)
    assert call.input == PATCH
    # The client runs the tool and sends its output back: the model reads its call and the result.
    second = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "Add hello.txt"},
            call.model_dump(exclude_none=True),
            {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Success. Updated: A hello.txt"},
        ],
        tools=[APPLY_PATCH],
    )
    assert second.output_text == "Done."
    prompt = scripted.prompts[-1]
    # The call as harmony renders a past function call (the recipient after the role), the JSON as the model wrote it.
    rendered_call = "to=functions.apply_patch<|channel|>commentary <|constrain|>json<|message|>" + json.dumps(
        {"input": PATCH}
    )
    assert rendered_call + "<|call|>" in prompt
    result = "<|start|>functions.apply_patch to=assistant<|channel|>commentary<|message|>Success. Updated: A hello.txt"
    assert result + "<|end|>" in prompt
    # previous_response_id: the same prompt from the stored call.
    client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Success. Updated: A hello.txt"}],
        tools=[APPLY_PATCH],
    )
    assert rendered_call + "<|call|><|start|>functions.apply_patch to=assistant" in scripted.prompts[-1]


def test_bad_custom_tools_are_400(serve: Serve) -> None:
    client = openai_client(serve(Scripted(ANSWER).engine))
    with pytest.raises(openai.BadRequestError) as undeclared:
        client.responses.create(
            model=MODEL, input="x", tools=[APPLY_PATCH], tool_choice={"type": "custom", "name": "nope"}
        )
    assert undeclared.value.body["param"] == "tool_choice.name"  # type: ignore[index]
    bad_format = dict(APPLY_PATCH, format={"type": "grammar", "syntax": "peg", "definition": "x"})
    with pytest.raises(openai.BadRequestError) as syntax:
        client.responses.create(model=MODEL, input="x", tools=[bad_format])  # type: ignore[list-item]
    assert syntax.value.body["param"] == "tools[0].format.syntax"  # type: ignore[index]
