"""What the server asks the engine for: prompt, budget, sampling, logprobs, schema; and truncation."""

from __future__ import annotations

from typing import Any

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding

from .conftest import Serve
from .helpers import MODEL, WEATHER_TOOL, post

ANSWER_IDS = load_encoding().encode("<|channel|>final<|message|>OK<|return|>", allowed_special="all")


class Recorder:
    """An engine that remembers every request and answers "OK"."""

    def __init__(self) -> None:
        self.requests: list[GenerateRequest] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        self.requests.append(request)
        yield TokenChunk(token_ids=ANSWER_IDS)
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))

    @property
    def prompt(self) -> str:
        return load_encoding().decode(self.requests[-1].prompt_ids)


def test_sampling_options_reach_the_engine(serve: Serve) -> None:
    recorder = Recorder()
    live = serve(recorder.engine, context_window=100_000)
    schema = {"type": "object", "properties": {}, "additionalProperties": False, "required": []}
    body: dict[str, Any] = {
        "model": MODEL,
        "input": "Hi",
        "max_output_tokens": 300,
        "temperature": 0.25,
        "top_p": 0.5,
        "top_logprobs": 3,
        "include": ["message.output_text.logprobs"],
        "text": {"format": {"type": "json_schema", "name": "s", "schema": schema}},
    }
    assert post(live, body).status_code == 200
    request = recorder.requests[-1]
    assert (request.max_tokens, request.temperature, request.top_p, request.top_logprobs) == (300, 0.25, 0.5, 3)
    assert request.response_schema == schema
    assert request.request_id is not None and request.request_id.startswith("resp_")
    assert request.stop_token_ids == (200012, 200002)

    assert post(live, {"model": MODEL, "input": "Hi"}).status_code == 200
    request = recorder.requests[-1]
    # Defaults: the engine's own sampling defaults, no logprobs, and the rest of the window as the budget.
    assert (request.temperature, request.top_p, request.top_logprobs) == (None, None, None)
    assert request.max_tokens == 100_000 - len(request.prompt_ids)


class SmallContext(Recorder):
    """A recorder whose engine reports a context of ``n`` tokens at start-up, as vLLM, SGLang and llama.cpp do."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.engine.context_window = n


def test_the_engines_reported_context_bounds_every_budget(serve: Serve) -> None:
    recorder = SmallContext(4096)
    live = serve(recorder.engine)  # --context-window left at its default (131072)
    assert post(live, {"model": MODEL, "input": "Hi"}).status_code == 200
    request = recorder.requests[-1]
    assert request.max_tokens == 4096 - len(request.prompt_ids)
    assert post(live, {"model": MODEL, "input": "Hi", "max_output_tokens": 100_000}).status_code == 200
    assert recorder.requests[-1].max_tokens == 4096 - len(recorder.requests[-1].prompt_ids)

    # A prompt over the engine's context is the API's 400, not an engine error mid-way.
    long_input = "word " * 5000
    response = post(live, {"model": MODEL, "input": long_input})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert "4096" in response.json()["error"]["message"]

    # truncation "auto" fits the prompt into the engine's context, oldest turns first.
    turns: list[dict[str, Any]] = []
    for i in range(6):
        turns += [
            {"role": "user", "content": f"question {i} " + "word " * 1200},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    turns.append({"role": "user", "content": "the last question"})
    response = post(live, {"model": MODEL, "input": turns, "truncation": "auto"})
    assert response.status_code == 200
    sent = recorder.requests[-1]
    assert len(sent.prompt_ids) + sent.max_tokens <= 4096
    assert "the last question" in recorder.prompt and "question 0 " not in recorder.prompt


def test_context_window_option_may_only_lower_the_engines(serve: Serve) -> None:
    recorder = SmallContext(4096)
    live = serve(recorder.engine, context_window=2048)
    assert post(live, {"model": MODEL, "input": "Hi"}).status_code == 200
    assert recorder.requests[-1].max_tokens == 2048 - len(recorder.requests[-1].prompt_ids)


def test_prompt_has_the_configured_date_and_no_web_search(serve: Serve) -> None:
    recorder = Recorder()
    live = serve(recorder.engine, current_date="2031-02-03", knowledge_cutoff="2030-01")
    tools = [WEATHER_TOOL, {"type": "web_search", "external_web_access": False}]
    response = post(live, {"model": MODEL, "input": "Hi", "tools": tools}).json()
    assert "Current date: 2031-02-03" in recorder.prompt
    assert "Knowledge cutoff: 2030-01" in recorder.prompt
    assert "get_weather" in recorder.prompt
    assert "browser" not in recorder.prompt  # web_search is accepted but not offered to the model
    assert [t["type"] for t in response["tools"]] == ["function", "web_search"]  # still echoed


def test_encrypted_reasoning_is_rendered_back(serve: Serve) -> None:
    recorder = Recorder()
    live = serve(recorder.engine)
    sealer = live.app.state.server.sealer
    history = [
        {"role": "user", "content": "Weather?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": sealer.seal("SECRET-PLAN")},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    assert post(live, {"model": MODEL, "input": history, "tools": [WEATHER_TOOL]}).status_code == 200
    assert "<|channel|>analysis<|message|>SECRET-PLAN<|end|>" in recorder.prompt
    # A blob this server did not seal is ignored, not an error.
    history[1]["encrypted_content"] = "gAAAAAforged"
    assert post(live, {"model": MODEL, "input": history, "tools": [WEATHER_TOOL]}).status_code == 200
    assert "SECRET-PLAN" not in recorder.prompt


def _conversation(turns: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "developer", "content": "Stay polite."}]
    for i in range(turns):
        items.append({"role": "user", "content": f"question {i} " + "filler " * 40})
        items.append({"role": "assistant", "content": f"answer {i}"})
    items.append({"role": "user", "content": "last question"})
    return items


def test_truncation_disabled_refuses_an_overlong_prompt(serve: Serve) -> None:
    live = serve(Recorder().engine, context_window=400)
    response = post(live, {"model": MODEL, "input": _conversation(6)})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert "context window" in error["message"]


def test_truncation_auto_drops_the_oldest_turns(serve: Serve) -> None:
    recorder = Recorder()
    live = serve(recorder.engine, context_window=400)
    response = post(live, {"model": MODEL, "input": _conversation(6), "truncation": "auto"})
    assert response.status_code == 200, response.text
    prompt = recorder.prompt
    assert "question 0" not in prompt and "last question" in prompt
    assert "Stay polite." in prompt  # developer messages are kept
    assert len(recorder.requests[-1].prompt_ids) <= 400 - 16
    # It keeps as many turns as fit: the whole conversation renders to 421 tokens, without its first turn
    # to 364 (the limit is 400 - 16), so exactly one turn goes.
    assert [i for i in range(6) if f"question {i} " in prompt] == [1, 2, 3, 4, 5]
    # Even one turn too long: still 400.
    huge = [{"role": "user", "content": "word " * 1000}]
    assert post(live, {"model": MODEL, "input": huge, "truncation": "auto"}).json()["error"]["code"] == (
        "context_length_exceeded"
    )
