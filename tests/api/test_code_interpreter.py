"""The tool loop and the code interpreter, end to end: replay scripts through the real server and the openai client.

Each script line is one engine call; a line ending ``<|call|>`` to ``python`` makes the server run the code in
its sandbox and call the engine again with the result spliced into the prompt. Every stream passes
``check_stream`` (protocol invariants, openai's types and its stream accumulator).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine, ReplayEngine
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.tools.code_interpreter import SandboxLimits, probe_sandbox
from harmony_responses.tools.code_interpreter._containers import CodeInterpreterSession
from harmony_responses.vocab import load_encoding
from translate.invariants import check_stream

from .conftest import Serve
from .helpers import MODEL, WEATHER_TOOL, openai_client, post, sse_events, write_script

CODE_TOOL: dict[str, Any] = {"type": "code_interpreter", "container": {"type": "auto"}}
LIMITS = SandboxLimits(wall_seconds=2, cpu_seconds=2, grace_seconds=1, output_bytes=2000)
THINK = "<|channel|>analysis<|message|>Let me compute.<|end|><|start|>assistant"
CALL = THINK + "<|channel|>analysis to=python code<|message|>{code}<|call|>"
ANSWER = "<|channel|>final<|message|>{text}<|return|>"


@pytest.fixture(scope="module", autouse=True)
def _sandbox_works() -> None:
    assert probe_sandbox() is None, f"the sandbox cannot run here: {probe_sandbox()}"


class Recording(ReplayEngine):
    """A replay engine that keeps every request it was sent (the prompts of the tool loop)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.requests: list[GenerateRequest] = []

    def generate(self, request: GenerateRequest) -> EngineStream:
        self.requests.append(request)
        return super().generate(request)

    def prompt_text(self, i: int) -> str:
        return load_encoding().decode(self.requests[i].prompt_ids)


def _script(tmp_path: Path, lines: list[str | dict[str, Any]]) -> Recording:
    return Recording(write_script(tmp_path / f"script-{time.monotonic_ns()}.jsonl", lines).removeprefix("replay:"))


def _start(serve: Serve, engine: Recording, **config: Any) -> Any:
    config.setdefault("code_interpreter", LIMITS)
    return serve(engine, **config)


def _stream(live: Any, **body: Any) -> list[dict[str, Any]]:
    body = {"model": MODEL, "input": "What is 6 times 7?", "tools": [CODE_TOOL], "stream": True, **body}
    response = post(live, body)
    assert response.status_code == 200, response.text
    events = sse_events(response.content)
    check_stream(events)
    return events


def _tokens(text: str) -> int:
    return len(load_encoding().encode(text, allowed_special="all"))


def _items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return events[-1]["response"]["output"]


# ------------------------------------------------------------------------------------------ the loop


def test_code_computes_an_answer_the_model_then_states(serve: Serve, tmp_path: Path) -> None:
    first = CALL.format(code="print(6 * 7)")
    engine = _script(tmp_path, [first, ANSWER.format(text="6 times 7 is 42.")])
    live = _start(serve, engine)

    events = _stream(live)  # the raw events, checked
    assert [e["response"]["status"] for e in events if e["type"] == "response.completed"] == ["completed"]
    with openai_client(live).responses.stream(model=MODEL, input="What is 6 times 7?", tools=[CODE_TOOL]) as stream:  # type: ignore[list-item]
        final = stream.get_final_response()  # the same script again, through openai's stream helper
    assert final.status == "completed" and final.output_text == "6 times 7 is 42."
    reasoning, call, answer = final.output
    assert call.type == "code_interpreter_call" and call.code == "print(6 * 7)" and call.status == "completed"
    assert call.container_id.startswith("cntr_") and call.outputs is None  # outputs only when included
    streamed_call = next(i for i in _items(events) if i["type"] == "code_interpreter_call")
    assert [e["type"] for e in events if e.get("item_id") == streamed_call["id"] and "_call." in e["type"]] == [
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
    ]

    # The next prompt: the first prompt, the raw generated ids through <|call|>, the tool message on the
    # call's channel (no <|end|> after <|call|>), then <|start|>assistant.
    assert len(engine.requests) == 4
    first_prompt, second_prompt = engine.requests[0].prompt_ids, engine.requests[1].prompt_ids
    generated = load_encoding().encode(first, allowed_special="all")
    assert second_prompt[: len(first_prompt) + len(generated)] == first_prompt + generated
    assert engine.prompt_text(1).endswith(
        "print(6 * 7)<|call|><|start|>python to=assistant<|channel|>analysis<|message|>42\n<|end|><|start|>assistant"
    )
    # Usage sums both engine calls; the tool's output is input of the second one, never output.
    usage = final.usage
    assert usage is not None
    assert usage.input_tokens == len(first_prompt) + len(second_prompt)
    assert usage.output_tokens == _tokens(first) + _tokens(ANSWER.format(text="6 times 7 is 42."))


def test_the_system_message_describes_the_real_sandbox(serve: Serve, tmp_path: Path) -> None:
    engine = _script(tmp_path, [ANSWER.format(text="Hi")])
    _stream(_start(serve, engine))
    system = engine.prompt_text(0)
    assert "## python" in system and "stateful" in system and "time out after 2 seconds" in system
    assert "/mnt/data" in system and "Internet access for this session is disabled" in system


def test_state_is_kept_across_calls_and_outputs_are_included_when_asked(serve: Serve, tmp_path: Path) -> None:
    engine = _script(
        tmp_path,
        [
            CALL.format(code="x = 6 * 7"),
            CALL.format(code="x"),
            ANSWER.format(text="42"),
        ],
    )
    events = _stream(_start(serve, engine), include=["code_interpreter_call.outputs"])
    calls = [item for item in _items(events) if item["type"] == "code_interpreter_call"]
    assert [c["outputs"] for c in calls] == [
        [{"type": "logs", "logs": "[no output]"}],
        [{"type": "logs", "logs": "42\n"}],
    ]
    assert calls[0]["container_id"] == calls[1]["container_id"]
    assert engine.prompt_text(2).endswith("<|message|>42\n<|end|><|start|>assistant")
    assert events[-1]["response"]["status"] == "completed"


def test_a_container_is_reused_by_id_and_an_unknown_one_is_400(serve: Serve, tmp_path: Path) -> None:
    engine = _script(
        tmp_path,
        [
            CALL.format(code="secret = 'kept'"),
            ANSWER.format(text="ok"),
            CALL.format(code="secret"),
            ANSWER.format(text="ok"),
        ],
    )
    live = _start(serve, engine)
    first = _stream(live)
    container = next(i for i in _items(first) if i["type"] == "code_interpreter_call")["container_id"]
    second = _stream(
        live, tools=[{"type": "code_interpreter", "container": container}], include=["code_interpreter_call.outputs"]
    )
    call = next(i for i in _items(second) if i["type"] == "code_interpreter_call")
    assert call["container_id"] == container and call["outputs"] == [{"type": "logs", "logs": "'kept'\n"}]

    response = post(
        live, {"model": MODEL, "input": "x", "tools": [{"type": "code_interpreter", "container": "cntr_gone"}]}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "tools[0].container" and "'cntr_gone' not found" in error["message"]


def test_errors_in_the_code_are_results_the_model_reads(serve: Serve, tmp_path: Path) -> None:
    engine = _script(tmp_path, [CALL.format(code="1 / 0"), ANSWER.format(text="Division by zero.")])
    events = _stream(_start(serve, engine), include=["code_interpreter_call.outputs"])
    call = next(i for i in _items(events) if i["type"] == "code_interpreter_call")
    assert call["status"] == "completed" and "ZeroDivisionError" in call["outputs"][0]["logs"]
    assert "ZeroDivisionError: division by zero\n<|end|><|start|>assistant" in engine.prompt_text(1)
    assert events[-1]["response"]["status"] == "completed"


def test_a_timeout_fails_the_item_and_the_response_goes_on(serve: Serve, tmp_path: Path) -> None:
    engine = _script(tmp_path, [CALL.format(code="while True:\n    pass"), ANSWER.format(text="It timed out.")])
    events = _stream(_start(serve, engine), include=["code_interpreter_call.outputs"])
    call = next(i for i in _items(events) if i["type"] == "code_interpreter_call")
    assert call["status"] == "failed" and "time limit" in call["outputs"][0]["logs"]
    assert "[ERROR] Execution interrupted" in engine.prompt_text(1)
    assert events[-1]["response"]["status"] == "completed" and _items(events)[-1]["type"] == "message"


def test_a_tool_that_raises_becomes_an_error_result(
    serve: Serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: CodeInterpreterSession, call: Any) -> Any:
        raise RuntimeError("the tool is broken")

    monkeypatch.setattr(CodeInterpreterSession, "call", broken)
    engine = _script(tmp_path, [CALL.format(code="print(1)"), ANSWER.format(text="The tool failed.")])
    events = _stream(_start(serve, engine))
    call = next(i for i in _items(events) if i["type"] == "code_interpreter_call")
    assert call["status"] == "failed"
    assert "[ERROR] The tool python failed: RuntimeError: the tool is broken" in engine.prompt_text(1)
    assert events[-1]["response"]["status"] == "completed"


def test_non_streamed_responses_run_the_loop_too(serve: Serve, tmp_path: Path) -> None:
    engine = _script(tmp_path, [CALL.format(code="print(2 ** 10)"), ANSWER.format(text="1024")])
    live = _start(serve, engine)
    response = openai_client(live).responses.create(
        model=MODEL,
        input="2**10?",
        tools=[CODE_TOOL],  # type: ignore[list-item]
        include=["code_interpreter_call.outputs"],
    )
    assert response.status == "completed" and response.output_text == "1024"
    call = response.output[1]
    assert call.type == "code_interpreter_call" and call.outputs is not None
    assert call.outputs[0].type == "logs" and call.outputs[0].logs == "1024\n"


# ------------------------------------------------------------------------------------------ limits


def test_max_output_tokens_counts_every_engine_call(serve: Serve, tmp_path: Path) -> None:
    first = CALL.format(code="print(6 * 7)")
    engine = _script(tmp_path, [first, ANSWER.format(text="The answer is " + "very " * 40 + "clearly 42.")])
    budget = _tokens(first) + 10
    events = _stream(_start(serve, engine), max_output_tokens=budget)
    assert engine.requests[0].max_tokens == budget
    assert engine.requests[1].max_tokens == 10  # what the first engine call left
    response = events[-1]["response"]
    assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"]["output_tokens"] == budget
    assert _items(events)[-1]["type"] == "message" and _items(events)[-1]["status"] == "incomplete"


def test_a_budget_spent_by_the_call_ends_the_response_after_the_tool(serve: Serve, tmp_path: Path) -> None:
    first = CALL.format(code="print(6 * 7)")
    engine = _script(tmp_path, [first, ANSWER.format(text="never")])
    events = _stream(_start(serve, engine), max_output_tokens=_tokens(first))
    assert len(engine.requests) == 1
    response = events[-1]["response"]
    assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert _items(events)[-1]["type"] == "code_interpreter_call" and _items(events)[-1]["status"] == "completed"


def test_max_tool_calls_refuses_the_next_call_and_tells_the_model(serve: Serve, tmp_path: Path) -> None:
    engine = _script(
        tmp_path,
        [CALL.format(code="print(1)"), CALL.format(code="print(2)"), ANSWER.format(text="One call was enough.")],
    )
    events = _stream(_start(serve, engine), max_tool_calls=1, include=["code_interpreter_call.outputs"])
    calls = [item for item in _items(events) if item["type"] == "code_interpreter_call"]
    assert [c["status"] for c in calls] == ["completed", "failed"]
    assert calls[1]["outputs"] is None  # not run
    assert "max_tool_calls (1) is reached" in engine.prompt_text(2)
    assert events[-1]["response"]["status"] == "completed" and _items(events)[-1]["type"] == "message"


def test_a_model_that_keeps_calling_past_max_tool_calls_is_stopped(serve: Serve, tmp_path: Path) -> None:
    engine = _script(tmp_path, [CALL.format(code="print(1)")])  # calls python forever
    events = _stream(_start(serve, engine), max_tool_calls=0)
    assert len(engine.requests) == 2  # the first refused call is told; the second ends the response
    assert [i["status"] for i in _items(events) if i["type"] == "code_interpreter_call"] == ["failed", "failed"]
    assert events[-1]["response"]["status"] == "completed"


def test_an_engine_error_after_a_tool_result_fails_the_response_in_band(serve: Serve, tmp_path: Path) -> None:
    engine = _script(
        tmp_path,
        [CALL.format(code="print(1)"), {"harmony": "<|channel|>final<|message|>Par", "error": "GPU fell over"}],
    )
    events = _stream(_start(serve, engine))
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert "GPU fell over" in events[-1]["response"]["error"]["message"]


def test_a_function_call_after_a_tool_ends_the_response_for_the_client(serve: Serve, tmp_path: Path) -> None:
    weather = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    engine = _script(tmp_path, [CALL.format(code="print(1)"), weather])
    events = _stream(_start(serve, engine), tools=[CODE_TOOL, WEATHER_TOOL])
    assert _items(events)[-1]["type"] == "function_call" and events[-1]["response"]["status"] == "completed"
    assert len(engine.requests) == 2


def test_a_call_closed_without_its_call_token_still_splices_a_well_formed_prompt(serve: Serve, tmp_path: Path) -> None:
    # The model ends its code with <|end|> and goes on writing: the engine is stopped, the call runs, and the
    # next prompt has the call ending <|call|>, not what the model wrote after it.
    call = "<|channel|>analysis to=python code<|message|>print(5)<|end|>"
    sloppy = THINK + call + "<|start|>assistant<|channel|>final<|message|>ignored"
    engine = _script(tmp_path, [sloppy, ANSWER.format(text="5")])
    events = _stream(_start(serve, engine))
    assert events[-1]["response"]["status"] == "completed"
    assert engine.prompt_text(1).endswith(
        "print(5)<|call|><|start|>python to=assistant<|channel|>analysis<|message|>5\n<|end|><|start|>assistant"
    )
    assert "ignored" not in engine.prompt_text(1)


def test_client_disconnect_during_the_tool_stops_the_loop_and_the_sandbox(serve: Serve, tmp_path: Path) -> None:
    engine = _script(tmp_path, [CALL.format(code="import time\ntime.sleep(30)"), ANSWER.format(text="never")])
    live = _start(serve, engine, code_interpreter=dataclasses.replace(LIMITS, wall_seconds=60))
    body = {"model": MODEL, "input": "sleep", "tools": [CODE_TOOL], "stream": True}
    container = None
    with httpx.stream("POST", f"{live.base_url}/responses", json=body, timeout=20) as response:
        for line in response.iter_lines():
            if '"container_id"' in line and container is None:
                container = line.split('"container_id":"')[1].split('"')[0]
            if "code_interpreter_call.interpreting" in line:
                break
    assert container is not None
    managed = live.app.state.server.containers.get(container)
    deadline = time.monotonic() + 10
    while managed.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not managed.running, "the sandbox kept running after the client left"
    assert len(engine.requests) == 1


def test_concurrent_responses_get_their_own_containers(serve: Serve) -> None:
    encoding = load_encoding()
    code = "import os\nprint(len(os.listdir('.')))\nopen('mine', 'w').close()"

    async def handler(request: GenerateRequest) -> EngineStream:
        # Prompt-aware, so that interleaved responses each get the call first and the answer after it.
        done = "<|start|>python to=assistant" in encoding.decode(request.prompt_ids[-40:])
        text = ANSWER.format(text="done") if done else CALL.format(code=code)
        yield TokenChunk(token_ids=encoding.encode(text, allowed_special="all"))
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))

    live = serve(MockEngine(handler), code_interpreter=LIMITS)
    results: list[list[dict[str, Any]]] = []

    def one() -> None:
        results.append(_stream(live, include=["code_interpreter_call.outputs"]))

    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 3
    calls = [next(i for i in _items(events) if i["type"] == "code_interpreter_call") for events in results]
    assert len({c["container_id"] for c in calls}) == 3
    assert all(c["outputs"] == [{"type": "logs", "logs": "0\n"}] for c in calls)  # private /mnt/data each


def test_a_container_belongs_to_the_api_key_that_made_it(serve: Serve, tmp_path: Path) -> None:
    engine = _script(
        tmp_path,
        [
            CALL.format(code="open('/mnt/data/secret.txt', 'w').write('mine')"),
            ANSWER.format(text="ok"),
            CALL.format(code="open('/mnt/data/secret.txt').read()"),
            ANSWER.format(text="ok"),
        ],
    )
    live = _start(serve, engine, api_keys=("key-a", "key-b"))
    alice, mallory = openai_client(live, api_key="key-a"), openai_client(live, api_key="key-b")
    first = alice.responses.create(model=MODEL, input="Write it.", tools=[CODE_TOOL])  # type: ignore[list-item]
    container = next(i for i in first.output if i.type == "code_interpreter_call").container_id  # type: ignore[union-attr]
    tools: Any = [{"type": "code_interpreter", "container": container}]

    # Another key that knows the id gets exactly what an unknown id gets: the container is not theirs.
    with pytest.raises(openai.BadRequestError) as refused:
        mallory.responses.create(model=MODEL, input="Read it.", tools=tools)
    with pytest.raises(openai.BadRequestError) as unknown:
        mallory.responses.create(
            model=MODEL, input="Read it.", tools=[{"type": "code_interpreter", "container": "cntr_gone"}]
        )
    assert refused.value.body["param"] == unknown.value.body["param"] == "tools[0].container"  # type: ignore[index]
    assert refused.value.body["message"] == unknown.value.body["message"].replace("cntr_gone", container)  # type: ignore[index]

    # Its owner still reaches it, files and all (the refused request ran no engine call).
    second = alice.responses.create(
        model=MODEL, input="Read it.", tools=tools, include=["code_interpreter_call.outputs"]
    )
    call = next(i for i in second.output if i.type == "code_interpreter_call")
    assert call.container_id == container and call.outputs[0].logs == "'mine'\n"  # type: ignore[union-attr,index]
