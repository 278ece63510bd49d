"""The four HTTP adapters against wire-faithful fakes, through our real server and the ``openai`` client."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import openai
import pytest

from harmony_responses.engine import _lines

from .fakes import CALL, FAKES, RETURN, LlamaCppFake, Scenario, SGLangFake, VLLMFake, harmony
from .helpers import ANSWER, CALL_WEATHER, MODEL, WEATHER_TOOL, Stack, sse_events, stack

ENGINES = list(FAKES)
HELLO = harmony(ANSWER)


def fake_for(kind: str, *scenarios: Scenario, **kwargs: Any) -> Any:
    return FAKES[kind](*scenarios, **kwargs)


def text_of(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


# ------------------------------------------------------------------------------ answers and calls


@pytest.mark.parametrize("kind", ENGINES)
def test_plain_answer_streamed_and_not(kind: str) -> None:
    with stack(kind, fake_for(kind, Scenario(tokens=HELLO, cached=3))) as s:
        client = s.client()
        events = list(client.responses.create(model=MODEL, input="Hi", stream=True))
        assert events[-1].type == "response.completed"
        assert text_of(events) == "Hello there!"
        usage = events[-1].response.usage
        request = s.fake.requests[0]
        prompt = request.get("prompt") or request.get("input_ids") or request.get("token_ids")
        assert usage.input_tokens == len(prompt)
        assert usage.output_tokens == len(HELLO)
        if kind != "trtllm":  # trtllm-serve reports no cached tokens over HTTP
            assert usage.input_tokens_details.cached_tokens == 3
        response = client.responses.create(model=MODEL, input="Hi")
        assert response.status == "completed" and response.output_text == "Hello there!"
        client.close()


@pytest.mark.parametrize("kind", ENGINES)
def test_function_call(kind: str) -> None:
    with stack(kind, fake_for(kind, Scenario(tokens=harmony(CALL_WEATHER)))) as s:
        with s.client() as client:
            response = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER_TOOL])  # type: ignore[list-item]
        call = response.output[-1]
        assert (call.type, call.name, call.arguments) == ("function_call", "get_weather", '{"city": "Paris"}')  # type: ignore[union-attr]
        assert response.status == "completed"


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize("tokens", [ANSWER, CALL_WEATHER], ids=["answer", "call"])
def test_chunking_and_stop_id_presence_do_not_change_the_response(kind: str, tokens: str) -> None:
    ids = harmony(tokens)
    scenarios = [
        Scenario(tokens=ids),
        Scenario(tokens=ids, chunk=4),
        Scenario(tokens=ids, include_stop=False),
        Scenario(tokens=ids, chunk=7, include_stop=False),
    ]
    with stack(kind, fake_for(kind, *scenarios)) as s, s.client() as client:
        outputs = []
        for _ in scenarios:
            response = client.responses.create(model=MODEL, input="Hi", tools=[WEATHER_TOOL])  # type: ignore[list-item]
            outputs.append(([item.model_dump(exclude={"id", "call_id"}) for item in response.output], response.usage))
    first = outputs[0]
    for other in outputs[1:]:
        assert other[0] == first[0]
        assert other[1].output_tokens == first[1].output_tokens == len(ids)  # a stripped stop id is put back


def test_stop_ids_sent_and_never_end() -> None:
    for kind in ("vllm", "sglang", "trtllm"):
        with stack(kind, fake_for(kind, Scenario(tokens=HELLO))) as s:
            s.post({"input": "Hi"})
            body = s.fake.requests[0]
            stops = body.get("stop_token_ids") or body["sampling_params"]["stop_token_ids"]
            assert sorted(stops) == [RETURN, CALL]


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
def test_sglang_cumulative_and_incremental_output_ids(incremental: bool) -> None:
    scenarios = [Scenario(tokens=HELLO, chunk=3), Scenario(tokens=HELLO, chunk=2, include_stop=False)]
    with stack("sglang", SGLangFake(*scenarios, incremental=incremental)) as s, s.client() as client:
        for _ in scenarios:
            events = list(
                client.responses.create(
                    model=MODEL, input="Hi", stream=True, include=["message.output_text.logprobs"], top_logprobs=2
                )
            )
            assert text_of(events) == "Hello there!"
            assert events[-1].response.usage.output_tokens == len(HELLO)
            lps = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
            assert len(lps) == len(harmony("Hello there!"))


@pytest.mark.parametrize("kind", ENGINES)
def test_logprobs_align_with_token_ids(kind: str) -> None:
    with stack(kind, fake_for(kind, Scenario(tokens=HELLO, chunk=3))) as s, s.client() as client:
        events = list(
            client.responses.create(
                model=MODEL, input="Hi", stream=True, include=["message.output_text.logprobs"], top_logprobs=2
            )
        )
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    lps = [lp for e in deltas for lp in e.logprobs]
    # The fake's k-th generated token has logprob -0.05 * (k + 1); the answer starts after the header.
    first = HELLO.index(200008, HELLO.index(17196)) + 1
    expected = [round(-0.05 * (k + 1), 6) for k in range(first, len(HELLO) - 1)]
    assert [lp.logprob for lp in lps] == pytest.approx(expected)
    assert all(len(lp.top_logprobs) == 2 and lp.top_logprobs[0].logprob == lp.logprob for lp in lps)


@pytest.mark.parametrize("kind", ENGINES)
def test_length_cut_is_incomplete(kind: str) -> None:
    long = harmony("<|channel|>final<|message|>" + "word " * 40 + "<|return|>")
    with stack(kind, fake_for(kind, Scenario(tokens=long))) as s, s.client() as client:
        events = list(client.responses.create(model=MODEL, input="Hi", stream=True, max_output_tokens=16))
    final = events[-1]
    assert final.type == "response.incomplete"
    assert final.response.incomplete_details.reason == "max_output_tokens"
    assert final.response.usage.output_tokens == 16


def test_model_eos_is_the_end_of_the_stream() -> None:
    # vLLM: finish "stop" with stop_reason null is the model's own end of sequence: nothing is added.
    tokens = harmony("<|channel|>final<|message|>Hi") + [199999]
    with stack("vllm", VLLMFake(Scenario(tokens=tokens, eos=True))) as s:
        response = s.post({"input": "Hi"}).json()
    assert response["status"] == "completed"
    assert response["usage"]["output_tokens"] == len(tokens)


def test_llamacpp_stopping_on_end_is_reported() -> None:
    with stack("llamacpp", LlamaCppFake(Scenario(tokens=HELLO), end_is_eog=True, done_line=True)) as s:
        message = _failed(_stream(s))
    assert "<|end|>" in message and "llamacpp" in message


@pytest.mark.parametrize("tokens_only", [False, True])
def test_vllm_generate_endpoint_and_abort(tokens_only: bool) -> None:
    # --enable-scale-out, or --tokens-only (whose /detokenize answers 400: start-up goes on without it).
    fake = VLLMFake(
        Scenario(tokens=HELLO), Scenario(tokens=HELLO, stall_after=5), generate_endpoint=True, tokens_only=tokens_only
    )
    with stack("vllm", fake) as s:
        body = {"input": "Hi", "top_logprobs": 2, "include": ["message.output_text.logprobs"]}
        response = s.post(body).json()
        part = response["output"][-1]["content"][0]
        assert part["text"] == "Hello there!"
        # Integer token_id alternatives are kept (they were dropped while only "token_id:N" strings were read).
        assert all(len(lp["top_logprobs"]) == 2 for lp in part["logprobs"])
        assert response["usage"]["output_tokens"] == len(HELLO)
        assert "sampling_params" in fake.requests[0] and "token_ids" in fake.requests[0]
        _disconnect_midway(s.root)
        # vLLM knows the request as generate-tokens-<id>: the bare id would abort nothing.
        _wait(lambda: fake.aborts == ["generate-tokens-" + fake.requests[1]["request_id"]])


def test_vllm_sends_plain_sampling_and_stops_cleanly_on_endoftext() -> None:
    # vLLM fills what a request leaves out from generation_config.json; <|endoftext|> is among its stop ids.
    tokens = harmony("<|channel|>final<|message|>Hello<|endoftext|>")
    with stack("vllm", VLLMFake(Scenario(tokens=tokens))) as s:
        response = s.post({"input": "Hi"}).json()
        sent = s.fake.requests[0]
    assert {k: sent[k] for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")} == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
    }
    assert response["output"][-1]["content"][0]["text"] == "Hello"
    # Nothing appended after <|endoftext|>: the usage counts what the engine generated.
    assert response["usage"]["output_tokens"] == len(tokens)


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("Requested sample logprobs of 8, which is greater than max allowed: 5", "invalid_request_error"),
        ("The input (5000 tokens) is longer than the model's context length (4096 tokens).", "context_length_exceeded"),
    ],
)
def test_error_object_with_code_400_before_the_first_token_is_the_clients_400(
    kind: str, message: str, code: str
) -> None:
    # As vLLM (after admission) and SGLang (validation) send them: HTTP 200, then data: {"error": {..., 400}}.
    # A JSON answer has sent nothing yet: the client's 400. A stream has begun at the engine's admission
    # (response.created does not wait for the prefill): the refusal ends it in-band, with the engine's words.
    scenario = Scenario(tokens=HELLO, error_after=0, error_message=message, error_code=400)
    with stack(kind, fake_for(kind, scenario)) as s:
        with s.client() as client, pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model=MODEL, input="Hi")
        events = _stream(s)
    assert info.value.status_code == 400 and info.value.code == code
    assert message in info.value.message
    assert events[0]["type"] == "response.created"
    assert message in _failed(events)


@pytest.mark.parametrize("kind", ENGINES)
def test_response_created_goes_out_at_the_engines_admission_not_its_first_token(kind: str) -> None:
    # The engine answers its status line at once and holds its first token (a long prefill) until the test
    # has read response.created: before, the stream sent nothing until the first token, so this waited forever.
    gate = threading.Event()
    with stack(kind, fake_for(kind, Scenario(tokens=HELLO, first_token_gate=gate))) as s:
        seen: list[str] = []
        body = {"model": MODEL, "input": "Hi", "stream": True}
        with httpx.stream("POST", f"{s.base_url}/responses", json=body, timeout=30) as answer:
            assert answer.status_code == 200
            lines = answer.iter_lines()
            for text in lines:
                if text.startswith("event: "):
                    seen.append(text[7:])
                    if text == "event: response.in_progress":
                        break
            assert not gate.is_set() and seen == ["response.created", "response.in_progress"]
            gate.set()
            seen += [text[7:] for text in lines if text.startswith("event: ")]
    assert "response.output_text.delta" in seen and seen[-1] == "response.completed"


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize("status", [400, 500, 503])
def test_http_error_before_the_stream_is_503(kind: str, status: int) -> None:
    with stack(kind, fake_for(kind, Scenario(status=status, message="the engine says no"))) as s:
        with s.client() as client, pytest.raises(openai.InternalServerError) as info:
            client.responses.create(model=MODEL, input="Hi", stream=True)
        assert info.value.status_code == 503
        error = info.value.body
        assert error["code"] == "engine_unavailable"  # type: ignore[index]
        assert f"{kind} at {s.fake.url}: HTTP {status}: the engine says no" in error["message"]  # type: ignore[index]


def test_context_length_refusal_is_400() -> None:
    message = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."
    with stack("vllm", VLLMFake(Scenario(status=400, message=message))) as s:
        response = s.post({"input": "Hi"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


def _failed(events: list[dict[str, Any]]) -> str:
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["error"]["message"] == events[-2]["message"]
    return str(events[-1]["response"]["error"]["message"])


def _stream(s: Stack) -> list[dict[str, Any]]:
    # Raw SSE: the openai client raises on the in-band ``error`` event before we could see the rest.
    return sse_events(s.post({"input": "Hi", "stream": True}).content)


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize(
    ("what", "says"),
    [
        ("error_after", "an error in the stream: CUDA error"),
        ("drop_after", "the connection was cut mid-response"),
        ("garbage_after", "sent a line that is not JSON"),
    ],
)
def test_failure_mid_stream_fails_the_response(kind: str, what: str, says: str) -> None:
    with stack(kind, fake_for(kind, Scenario(tokens=HELLO, **{what: 12}))) as s:
        events = _stream(s)
    message = _failed(events)
    assert f"{kind} at {s.fake.url}" in message and says in message


def test_a_line_too_long_fails_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM's first chunk echoes the prompt's ids: longer than a line may be here.
    monkeypatch.setattr(_lines, "MAX_LINE", 200)
    with stack("vllm", VLLMFake(Scenario(tokens=HELLO))) as s:
        response = s.post({"input": "Hi"})
    assert response.status_code == 503
    assert f"vllm at {s.fake.url}: sent a line longer than" in response.json()["error"]["message"]


@pytest.mark.parametrize("kind", ENGINES)
def test_stalled_stream_hits_the_timeout(kind: str) -> None:
    scenarios = [Scenario(tokens=HELLO, stall_after=6), Scenario(tokens=HELLO, stall_after=0)]
    with stack(kind, fake_for(kind, *scenarios), engine_stall_timeout=0.4, engine_first_token_timeout=0.6) as s:
        started = time.monotonic()
        events = _stream(s)
        assert "the stream stalled: no data for 0.4 s" in _failed(events)
        assert time.monotonic() - started < 5
        with s.client() as client, pytest.raises(openai.InternalServerError) as info:
            client.responses.create(model=MODEL, input="Hi")
        assert "no first token within 0.6 s" in info.value.body["message"]  # type: ignore[index]
        _wait(lambda: len(s.fake.disconnects) == 2)  # both streams were closed, i.e. aborted


def test_a_slow_consumer_is_not_a_stall() -> None:
    # The watchdog only counts time spent waiting for the engine.
    with stack("vllm", VLLMFake(Scenario(tokens=HELLO)), engine_stall_timeout=0.3) as s:
        with s.client() as client, client.responses.stream(model=MODEL, input="Hi") as stream:
            for i, _ in enumerate(stream):
                if i == 3:
                    time.sleep(0.8)
            assert stream.get_final_response().status == "completed"


def _disconnect_midway(root: str) -> None:
    import httpx

    with httpx.stream(
        "POST", f"{root}/v1/responses", json={"model": MODEL, "input": "Hi", "stream": True}, timeout=10
    ) as response:
        for line in response.iter_lines():
            if "output_text.delta" in line or "reasoning_text.delta" in line:
                break


def _wait(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.mark.parametrize("kind", ENGINES)
def test_client_disconnect_aborts_the_engine_request(kind: str) -> None:
    with stack(kind, fake_for(kind, Scenario(tokens=HELLO * 200, delay=0.005))) as s:
        _disconnect_midway(s.root)
        _wait(lambda: len(s.fake.disconnects) == 1)
        rid = s.fake.disconnects[0]
        if kind == "sglang":
            _wait(lambda: s.fake.aborts == [rid])  # and the abort endpoint is called
        assert s.fake.sent[rid] < len(HELLO) * 200


# ------------------------------------------------------------------------------ request bodies


def test_sampling_options_budget_and_schema_reach_the_engine() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    body = {
        "input": "Hi",
        "temperature": 0.3,
        "top_p": 0.9,
        "max_output_tokens": 77,
        "text": {"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}},
    }
    final = harmony('<|channel|>final<|message|>{"a": 1}<|return|>')
    with stack("vllm", VLLMFake(Scenario(tokens=final))) as s:
        assert s.post(body).json()["status"] == "completed"
        sent = s.fake.requests[0]
        assert (sent["temperature"], sent["top_p"], sent["max_tokens"]) == (0.3, 0.9, 77)
        assert sent["model"] == VLLMFake.model and sent["skip_special_tokens"] is False
        assert '"begin":"<|channel|>final<|message|>"' in sent["structured_outputs"]["structural_tag"]
    with stack("sglang", SGLangFake(Scenario(tokens=final))) as s:
        assert s.post(body).json()["status"] == "completed"
        sampling = s.fake.requests[0]["sampling_params"]
        assert (sampling["temperature"], sampling["top_p"], sampling["max_new_tokens"]) == (0.3, 0.9, 77)
        assert sampling["no_stop_trim"] is True and "structural_tag" in sampling
    with stack("llamacpp", LlamaCppFake(Scenario(tokens=final))) as s:
        assert s.post(body).json()["status"] == "completed"
        sent = s.fake.requests[0]
        assert (sent["temperature"], sent["top_p"], sent["n_predict"]) == (0.3, 0.9, 77)
        assert "json_schema" not in sent and "grammar" not in sent  # would constrain the Harmony headers too


def test_engine_refusing_the_constraint_is_retried_without_it() -> None:
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    fmt = {"format": {"type": "json_schema", "name": "x", "schema": schema, "strict": True}}
    final = harmony("<|channel|>final<|message|>{}<|return|>")
    with stack("vllm", VLLMFake(Scenario(status=400, message="unknown structural tag"), Scenario(tokens=final))) as s:
        assert s.post({"input": "Hi", "text": fmt}).json()["status"] == "completed"
        assert "structured_outputs" in s.fake.requests[0] and "structured_outputs" not in s.fake.requests[1]
        s.post({"input": "Hi", "text": fmt})
        assert "structured_outputs" not in s.fake.requests[2]  # remembered
