"""The real-engine tier against vLLM 0.33.0's own server: our server, then the openai client, end to end.

vLLM runs its API server, scheduler, prefix cache, structured outputs (xgrammar) and detokenizer; its
model executor is scripted (scripted_executor.py), so what the model writes is exact and a test can
check each id. Each test keys its script on a word of its own input (``case-…``). The executor's log
tells what vLLM resolved for each request (sampling after its defaults, stop ids) and when a request
finished, which is how aborts are seen reaching the engine.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from harmony_responses.engine import EngineOptions, EngineRefused, GenerateRequest, VLLMEngine, _lines
from harmony_responses.engine._lines import Lines
from harmony_responses.engine._vllm import CompletionsReader
from harmony_responses.tokens import TokenChunk

from ..gateway import Gateway, start_gateway
from .conftest import MAX_LOGPROBS, MAX_MODEL_LEN, VLLM, EarlyGateway, harmony

MODEL = "gpt-oss-20b"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
LOGPROBS = ["message.output_text.logprobs"]


def final(text: str, analysis: str = "Thinking.") -> str:
    return (
        f"<|channel|>analysis<|message|>{analysis}<|end|><|start|>assistant<|channel|>final<|message|>{text}<|return|>"
    )


def wait_for(condition: Any, timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not met in {timeout:g} s"
        time.sleep(0.1)


def text_of(response: Any) -> str:
    return "".join(
        part.text
        for item in response.output
        if item.type == "message"
        for part in item.content
        if part.type == "output_text"
    )


# ------------------------------------------------------------------------------ answers


def test_plain_answer_and_vllm_resolved_sampling(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    ids = completions.script.say("case-plain", final("Hello from vLLM."))
    with gateway.client() as client:
        response = client.responses.create(model=MODEL, input="case-plain: say hello")
    assert response.status == "completed"
    assert text_of(response) == "Hello from vLLM."
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.usage is not None and response.usage.output_tokens == len(ids)
    (new,) = completions.events("case-plain", "new")
    sampling = new["sampling"]
    # The model's generation_config.json says temperature 0.7, top_p 0.8, top_k 20, min_p 0.05: what the
    # API means (plain sampling) must be what vLLM resolved.
    assert (sampling["temperature"], sampling["top_p"], sampling["min_p"]) == (1.0, 1.0, 0.0)
    assert sampling["top_k"] in (0, -1)  # both mean off to vLLM
    assert sampling["repetition_penalty"] == 1.0
    # vLLM adds the generation config's <|endoftext|> to the stop ids we send.
    assert sampling["all_stop_token_ids"] == [199999, 200002, 200012]
    # No max_output_tokens on a 4096-token engine: the budget is what the engine's context leaves.
    assert sampling["max_tokens"] == MAX_MODEL_LEN - new["prompt_len"]


def test_streamed_answer(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    completions.script.say("case-stream", final("One, two, three."))
    with gateway.client() as client:
        events = list(client.responses.create(model=MODEL, input="case-stream: count", stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "One, two, three."
    assert text_of(events[-1].response) == "One, two, three."


def test_emoji_and_cjk_across_token_boundaries(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    text = "Hi 🚀 ok 你好世界 🇫🇷!"
    ids = completions.script.say("case-emoji", final(text))
    # 🚀 is two ids here (169883, 222): the first ends partway through the character.
    assert [169883, 222] == harmony(" 🚀")[-2:] or 222 in ids
    with gateway.client() as client:
        events = list(client.responses.create(model=MODEL, input="case-emoji: icons", stream=True))
        response = client.responses.create(model=MODEL, input="case-emoji: icons again")
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == text
    assert text_of(events[-1].response) == text == text_of(response)
    assert response.usage is not None and response.usage.output_tokens == len(ids)


def test_function_call_round_trip(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    completions.script.say(
        "case-fn",
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
    )
    completions.script.say("case-fn-result", final("It is 21 °C in Paris."))
    with gateway.client() as client:
        first = client.responses.create(model=MODEL, input="case-fn: weather in Paris?", tools=[WEATHER])  # type: ignore[list-item]
        calls = [item for item in first.output if item.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "get_weather"
        assert json.loads(calls[0].arguments) == {"city": "Paris"}
        second = client.responses.create(
            model=MODEL,
            tools=[WEATHER],  # type: ignore[list-item]
            input=[
                {"role": "user", "content": "case-fn: weather in Paris?"},
                *[item.model_dump(exclude_none=True) for item in first.output],
                {"type": "function_call_output", "call_id": calls[0].call_id, "output": "case-fn-result: 21 °C"},
            ],  # type: ignore[arg-type]
        )
    assert second.status == "completed" and text_of(second) == "It is 21 °C in Paris."
    # The second prompt carried the call and its output: vLLM saw both turns.
    (new,) = completions.events("case-fn-result", "new")
    assert new["prompt_len"] > completions.events("case-fn", "new")[0]["prompt_len"]


@pytest.mark.parametrize("endpoint", ["completions", "generate"])
def test_strict_json_schema_through_vllm_structured_outputs(
    endpoint: str, gateway: Gateway, gateway_generate: Gateway, completions: VLLM, scale_out: VLLM
) -> None:
    # The structural tag once ended with "<|return|>", which xgrammar matches as text: the grammar then made
    # the model spell those ten characters before it could stop, and the response failed the schema.
    server, gw = (completions, gateway) if endpoint == "completions" else (scale_out, gateway_generate)
    assert server.script is not None
    server.script.say("case-json", final('{"answer": "yes"}'))
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    text_format = {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}}
    with gw.client() as client:
        response = client.responses.create(
            model=MODEL,
            input="case-json: answer in JSON",
            text=text_format,  # type: ignore[arg-type]
            top_logprobs=3,
            include=LOGPROBS,  # type: ignore[list-item]
        )
    assert response.status == "completed", response.error
    assert json.loads(text_of(response)) == {"answer": "yes"}
    # xgrammar constrained the request (structural tag from the final channel on).
    (new,) = server.events("case-json", "new")
    assert new["sampling"]["structured_outputs"] and "structural_tag" in new["sampling"]["structured_outputs"]
    assert response.usage is not None and response.usage.output_tokens == len(harmony(final('{"answer": "yes"}')))
    # Alternatives the grammar forbids have probability zero: a finite floor, never -3.4e38 or -inf.
    part = response.output[-1].content[0]  # type: ignore[union-attr]
    values = [alt.logprob for lp in part.logprobs for alt in lp.top_logprobs]  # type: ignore[union-attr]
    assert values and min(values) >= -9999.0
    assert -9999.0 in values


def test_logprobs_with_top_alternatives(
    gateway: Gateway, gateway_generate: Gateway, completions: VLLM, scale_out: VLLM
) -> None:
    for server, gw in ((completions, gateway), (scale_out, gateway_generate)):
        assert server.script is not None
        server.script.say("case-lp", final("Hi there"))
        with gw.client() as client:
            response = client.responses.create(model=MODEL, input="case-lp: hi", top_logprobs=3, include=LOGPROBS)  # type: ignore[list-item]
        part = response.output[-1].content[0]  # type: ignore[union-attr]
        assert part.text == "Hi there"
        assert part.logprobs and "".join(lp.token for lp in part.logprobs) == "Hi there"
        for lp in part.logprobs:
            assert lp.logprob == -0.25
            # The sampled token first, then the scripted alternatives: -1, -2 (generate sends integer ids).
            assert [alt.logprob for alt in lp.top_logprobs] == [-0.25, -1.0, -2.0], server.name
        # Plain sampling on this endpoint too, not generation_config.json's.
        (new,) = server.events("case-lp", "new")
        sampling = new["sampling"]
        assert (sampling["temperature"], sampling["top_p"], sampling["min_p"], sampling["top_k"] in (0, -1)) == (
            1.0,
            1.0,
            0.0,
            True,
        )
        assert sampling["logprobs"] == 3 and sampling["skip_special_tokens"] is False


@pytest.mark.parametrize("endpoint", ["completions", "generate"])
def test_a_stop_on_endoftext_adds_nothing(
    endpoint: str, gateway: Gateway, gateway_generate: Gateway, completions: VLLM, scale_out: VLLM
) -> None:
    # <|endoftext|> is among vLLM's stop ids (from generation_config.json): it ends the answer, and no
    # <|return|> is invented after it (which counted one output token too many).
    server, gw = (completions, gateway) if endpoint == "completions" else (scale_out, gateway_generate)
    assert server.script is not None
    ids = server.script.say("case-eot", "<|channel|>final<|message|>Bye.<|endoftext|>")
    with gw.client() as client:
        response = client.responses.create(model=MODEL, input="case-eot: bye")
    assert response.status == "completed" and text_of(response) == "Bye."
    assert response.usage is not None and response.usage.output_tokens == len(ids)


@pytest.mark.parametrize("endpoint", ["completions", "generate"])
def test_text_without_a_header_keeps_its_logprobs(
    endpoint: str, gateway: Gateway, gateway_generate: Gateway, completions: VLLM, scale_out: VLLM
) -> None:
    # A model that skips Harmony's header: its text is the answer, with the logprobs include asked for.
    server, gw = (completions, gateway) if endpoint == "completions" else (scale_out, gateway_generate)
    assert server.script is not None
    ids = server.script.say("case-garbage", "Plain words, no header 🚀<|return|>")
    with gw.client() as client:
        response = client.responses.create(model=MODEL, input="case-garbage: hi", top_logprobs=2, include=LOGPROBS)  # type: ignore[list-item]
    part = response.output[-1].content[0]  # type: ignore[union-attr]
    assert part.text == "Plain words, no header 🚀"
    assert part.logprobs is not None and len(part.logprobs) == len(ids) - 1  # all but <|return|>
    assert all(len(lp.top_logprobs) == 2 for lp in part.logprobs)


# ------------------------------------------------------------------------------ limits and errors


def test_length_cut(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    completions.script.say("case-long", final("word " * 200))
    with gateway.client() as client:
        response = client.responses.create(model=MODEL, input="case-long: go on", max_output_tokens=20)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 20
    (new,) = completions.events("case-long", "new")
    assert new["sampling"]["max_tokens"] == 20


def test_prompt_over_the_context(gateway: Gateway) -> None:
    with gateway.client() as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="case-huge " + "lorem ipsum " * 3000, truncation="disabled")
    assert info.value.status_code == 400
    assert info.value.code == "context_length_exceeded"


def test_no_max_output_tokens_on_a_small_context(gateway: Gateway, completions: VLLM) -> None:
    # Once answered 400 by vLLM ("max_tokens=130999 cannot be greater than max_model_len=4096").
    assert completions.script is not None
    completions.script.say("case-nomax", final("Fits."))
    with gateway.client() as client:
        response = client.responses.create(model=MODEL, input="case-nomax " + "pad " * 1000)
    assert response.status == "completed" and text_of(response) == "Fits."
    (new,) = completions.events("case-nomax", "new")
    assert new["sampling"]["max_tokens"] + new["prompt_len"] <= MAX_MODEL_LEN


def test_error_object_in_a_200_stream_maps_by_its_code(gateway: Gateway, completions: VLLM) -> None:
    # vLLM checks --max-logprobs after admission: the refusal comes as data: {"error": {..., "code": 400}}.
    # A JSON answer has sent nothing yet: the client's 400. A stream began at the admission: it ends in-band.
    assert completions.script is not None
    completions.script.say("case-toomany", final("unused"))
    body: dict[str, Any] = {"model": MODEL, "input": "case-toomany: hi", "top_logprobs": MAX_LOGPROBS + 3}
    with gateway.client() as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(**body, include=LOGPROBS)  # type: ignore[arg-type]
    assert info.value.status_code == 400
    assert info.value.code == "invalid_request_error"
    assert "greater than max allowed: 5" in info.value.message
    with gateway.client() as client, pytest.raises(openai.APIError) as streamed:
        for _ in client.responses.create(**body, include=LOGPROBS, stream=True):  # type: ignore[arg-type]
            pass
    assert "greater than max allowed: 5" in streamed.value.message


def test_cached_tokens_from_prefix_caching(gateway: Gateway, completions: VLLM) -> None:
    assert completions.script is not None
    completions.script.say("case-cache", final("Cached."))
    long_input = "case-cache " + " ".join(f"fact {i}." for i in range(300))
    with gateway.client() as client:
        first = client.responses.create(model=MODEL, input=long_input)
        second = client.responses.create(model=MODEL, input=long_input)
    assert first.usage is not None and second.usage is not None
    assert first.usage.input_tokens == second.usage.input_tokens > 600
    # The first shares only the system message's blocks with earlier tests' prompts.
    assert first.usage.input_tokens_details.cached_tokens < 200
    # vLLM caches whole blocks of 16 tokens: all but the last partial block and the last token.
    assert second.usage.input_tokens_details.cached_tokens >= second.usage.input_tokens - 32


# ------------------------------------------------------------------------------ aborts


def _slow(server: VLLM, key: str, n: int = 400) -> int:
    assert server.script is not None
    ids = server.script.say(key, final(" ".join(["tick"] * n)), delay=0.02)
    return len(ids)


def _finished_early(server: VLLM, key: str, total: int) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        ended = server.events(key, "finished")
        return ended[0] if ended else None

    # vLLM's scheduler hands the executor a finished (or aborted) id with its next step.
    event = None
    deadline = time.monotonic() + 20
    while event is None and time.monotonic() < deadline:
        event = done()
        if event is None:
            time.sleep(0.3)
    assert event is not None, f"vLLM never finished {key}"
    assert event["generated"] < total, f"{key} ran to its end: the abort did not reach vLLM"
    return event


@pytest.mark.parametrize("endpoint", ["completions", "generate"])
def test_disconnect_aborts_the_engine_request(
    endpoint: str, gateway: Gateway, gateway_generate: Gateway, completions: VLLM, scale_out: VLLM
) -> None:
    server, gw = (completions, gateway) if endpoint == "completions" else (scale_out, gateway_generate)
    key = f"case-disconnect-{endpoint}"
    total = _slow(server, key)
    with httpx.Client(base_url=gw.url, timeout=60) as http:
        body = {"model": MODEL, "input": f"{key}: go", "stream": True}
        with http.stream("POST", "/v1/responses", json=body) as stream:
            for n, _line in enumerate(stream.iter_lines()):
                if n > 40:
                    break
    _finished_early(server, key, total)


@pytest.mark.parametrize("endpoint", ["completions", "generate"])
def test_background_cancel_aborts_the_engine_request(
    endpoint: str, gateway: Gateway, gateway_generate: Gateway, completions: VLLM, scale_out: VLLM
) -> None:
    server, gw = (completions, gateway) if endpoint == "completions" else (scale_out, gateway_generate)
    key = f"case-cancel-{endpoint}"
    total = _slow(server, key)
    with gw.client() as client:
        response = client.responses.create(model=MODEL, input=f"{key}: go", background=True)
        wait_for(lambda: server.events(key, "new"), what="vLLM got the request")
        time.sleep(0.5)
        cancelled = client.responses.cancel(response.id)
        assert cancelled.status == "cancelled"
        _finished_early(server, key, total)
        assert client.responses.retrieve(response.id).status == "cancelled"


def test_generate_abort_needs_vllms_request_id_prefix(scale_out: VLLM) -> None:
    """The fact the adapter's abort rests on: vLLM knows a generate request as generate-tokens-<id>."""
    key = "case-prefix"
    total = _slow(scale_out, key)
    prompt = harmony(f"<|start|>user<|message|>{key}<|end|><|start|>assistant")
    body = {
        "model": "tiny-gpt-oss",
        "request_id": "probe-1",
        "token_ids": prompt,
        "sampling_params": {"max_tokens": 1000, "stop_token_ids": [200002, 200012]},
        "stream": True,
    }
    with httpx.Client(base_url=scale_out.url, timeout=60) as http:
        with http.stream("POST", "/inference/v1/generate", json=body) as stream:
            lines = stream.iter_lines()
            next(lines)
            bare = http.post("/inference/v1/abort_requests", json={"request_ids": ["probe-1"]})
            assert bare.status_code == 200  # accepted, and aborts nothing:
            time.sleep(1.0)
            assert not scale_out.events(key, "finished")
            prefixed = http.post("/inference/v1/abort_requests", json={"request_ids": ["generate-tokens-probe-1"]})
            assert prefixed.status_code == 200
            rest = list(lines)
    assert any('"finish_reason":"abort"' in line for line in rest), rest[-3:]
    _finished_early(scale_out, key, total)


# ------------------------------------------------------------------------------ start-up


def test_a_tokens_only_server(tokens_only: VLLM, tmp_path: Path) -> None:
    # vllm serve --tokens-only has no tokenizer: /detokenize answers 400, and start-up goes on without it.
    assert tokens_only.script is not None
    ids = tokens_only.script.say("case-tokens-only", final("No tokenizer here."))
    total = _slow(tokens_only, "case-tokens-only-slow", 200)
    gw = start_gateway(f"vllm:{tokens_only.url}", args=["--current-date", "2026-12-01"], log_dir=tmp_path)
    try:
        assert "/inference/v1/generate" in gw.output()
        with gw.client() as client:
            response = client.responses.create(
                model=MODEL, input="case-tokens-only: hi", top_logprobs=2, include=LOGPROBS
            )  # type: ignore[list-item]
            assert text_of(response) == "No tokenizer here."
            assert response.usage is not None and response.usage.output_tokens == len(ids)
            part = response.output[-1].content[0]  # type: ignore[union-attr]
            assert all(len(lp.top_logprobs) == 2 for lp in part.logprobs)  # type: ignore[union-attr]
        with httpx.Client(base_url=gw.url, timeout=60) as http:
            body = {"model": MODEL, "input": "case-tokens-only-slow: go", "stream": True}
            with http.stream("POST", "/v1/responses", json=body) as stream:
                for n, _line in enumerate(stream.iter_lines()):
                    if n > 40:
                        break
        _finished_early(tokens_only, "case-tokens-only-slow", total)
    finally:
        gw.stop()


def test_start_up_waits_for_an_engine_still_loading(
    early_gateway: EarlyGateway, gateway_generate: Gateway, scale_out: VLLM
) -> None:
    # The gateway was started with --engine-start-wait before vLLM answered /health.
    assert not early_gateway.engine_was_ready, "vLLM was already up: this run did not test the wait"
    assert scale_out.script is not None
    scale_out.script.say("case-late", final("Up."))
    with gateway_generate.client() as client:
        response = client.responses.create(model=MODEL, input="case-late: are you up?")
    assert text_of(response) == "Up."
    assert "/inference/v1/generate" in gateway_generate.output()


# ------------------------------------------------------------------------------ the adapter alone


def _adapter_call(server: VLLM, request: GenerateRequest) -> tuple[VLLMEngine, list[Any]]:
    async def run() -> tuple[VLLMEngine, list[Any]]:
        engine = VLLMEngine(EngineOptions(url=server.url))
        async with engine:
            return engine, [item async for item in engine.generate(request)]

    return asyncio.run(run())


def test_the_adapter_reads_max_model_len_as_context_window(completions: VLLM) -> None:
    assert completions.script is not None
    completions.script.say("case-adapter", "<|channel|>final<|message|>ok<|return|>")
    prompt = harmony("<|start|>user<|message|>case-adapter<|end|><|start|>assistant")
    engine, items = _adapter_call(completions, GenerateRequest(prompt_ids=prompt, max_tokens=10))
    assert engine.context_window == MAX_MODEL_LEN
    assert items[-1].reason == "stop"


def test_an_output_budget_over_max_model_len_is_a_clear_400(completions: VLLM) -> None:
    # What every request without max_output_tokens got before the budget knew the engine's context.
    prompt = harmony("<|start|>user<|message|>case-budget<|end|><|start|>assistant")
    with pytest.raises(EngineRefused) as info:
        _adapter_call(completions, GenerateRequest(prompt_ids=prompt, max_tokens=130999))
    assert (info.value.status_hint, info.value.code_hint) == (400, "invalid_request_error")
    assert "the output budget (130999 tokens) is larger than the engine's context (4096 tokens)" in str(info.value)


@pytest.mark.parametrize("endpoint", ["completions", "generate"])
def test_a_token_id_out_of_the_models_vocabulary_is_the_clients_400(
    endpoint: str, completions: VLLM, scale_out: VLLM
) -> None:
    # vLLM admits the request, then refuses it inside the 200 stream: data: {"error": {..., "code": 400}}
    # (a model whose vocabulary is smaller than Harmony's would see this for Harmony's own ids).
    server = completions if endpoint == "completions" else scale_out
    prompt = [*harmony("<|start|>user<|message|>hi"), 201100, *harmony("<|end|><|start|>assistant")]
    with pytest.raises(EngineRefused) as info:
        _adapter_call(server, GenerateRequest(prompt_ids=prompt, max_tokens=3))
    assert (info.value.status_hint, info.value.code_hint) == (400, "invalid_request_error")
    assert "an error in the stream" in str(info.value) and "out of vocabulary" in str(info.value)


def test_a_prompt_over_max_model_len_is_context_length_exceeded(completions: VLLM) -> None:
    # Our server refuses such a prompt itself now that it knows the context; the engine's own refusal
    # (HTTP 400 "This model's maximum context length is 4096 tokens…") still maps to the same 400.
    prompt = harmony("<|start|>user<|message|>" + "lorem ipsum " * 2500 + "<|end|><|start|>assistant")
    assert len(prompt) > MAX_MODEL_LEN
    with pytest.raises(EngineRefused) as info:
        _adapter_call(completions, GenerateRequest(prompt_ids=prompt, max_tokens=10))
    assert (info.value.status_hint, info.value.code_hint) == (400, "context_length_exceeded")
    assert "maximum context length is 4096 tokens" in str(info.value)


def test_a_priority_sent_to_an_fcfs_vllm_is_taken_and_ignored(completions: VLLM) -> None:
    # --engine-priority against a vLLM started without --scheduling-policy priority: vLLM's API reference says a
    # priority other than 0 raises an error there, but vLLM 0.33 answers 200 and schedules first come, first
    # served (docs/production/operating.md says so: a forgotten flag shows as no ordering, not as errors).
    assert completions.script is not None
    completions.script.say("case-fcfs-priority", final("Unordered."))
    prompt = harmony("<|start|>user<|message|>case-fcfs-priority<|end|><|start|>assistant")

    async def run() -> list[Any]:
        async with VLLMEngine(EngineOptions(url=completions.url, priority=True)) as engine:
            return [item async for item in engine.generate(GenerateRequest(prompt_ids=prompt, priority=1))]

    items = asyncio.run(run())
    assert items and completions.events("case-fcfs-priority", "new")


def test_the_compiled_scanner_takes_vllms_token_lines(
    completions: VLLM, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """vLLM's own stream is what the scanner (engine/_lines.py) is for: it takes exactly the lines of token ids
    that do not finish the generation (several ids a line, text of emoji and CJK split mid-character, included),
    and the pure-Python path reads the same bytes to the same ids.

    vLLM may send a whole short answer in its finishing line (its steps outran its output): the request is held
    (the executor's ``hold``) until the scanner has taken a line, so that there are lines for it to take."""
    scanner = _lines.COMPILED
    if scanner is None:
        pytest.skip(f"no compiled scanner here ({_lines.describe()})")
    assert completions.script is not None
    hold = tmp_path / "hold"
    hold.touch()
    completions.script.say("case-scan", final("Hi 🚀 ok 你好世界, one two three."), hold=hold)
    prompt = harmony("<|start|>user<|message|>case-scan<|end|><|start|>assistant")
    taken: list[int] = []
    reads: list[bytes] = []  # what each read gave the stream loop

    def counting(buf: bytes, pos: int, max_line: int, vocab_size: int, out: list[int]) -> int:
        before = len(out)
        end = scanner(buf, pos, max_line, vocab_size, out)
        taken.extend(out[before:])
        return end

    read = Lines.read

    def recording(self: Lines, data: bytes) -> None:
        reads.append(data)
        read(self, data)

    monkeypatch.setattr(_lines, "COMPILED", counting)
    monkeypatch.setattr(Lines, "read", recording)
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(_adapter_call, completions, GenerateRequest(prompt_ids=prompt, max_tokens=100))
        try:
            wait_for(lambda: taken or call.done(), timeout=120, what="a line taken by the scanner")
        finally:
            hold.unlink()  # the request finishes
        _, items = call.result(timeout=120)
    assert items[-1].reason == "stop"
    got = [t for item in items if isinstance(item, TokenChunk) for t in item.token_ids]

    body = b"".join(reads)
    expected = []  # the ids of the lines that do not finish the generation
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            choices = json.loads(line[6:])["choices"]
            if choices and choices[0]["finish_reason"] is None:
                expected += choices[0]["token_ids"]
    assert taken and taken == expected

    reader = CompletionsReader(GenerateRequest(prompt_ids=prompt, max_tokens=100), "vllm")
    pure = Lines(reader, "vllm", None)
    for data in reads:
        read(pure, data)
    assert reader.generated == got
