"""llama.cpp, for real: ``harmony-responses serve --engine llamacpp:URL`` before a real ``llama-server``.

Every test goes through the real boundary (the ``openai`` client → our server → llama-server on
127.0.0.1) and asserts what a user sees: exact text, items, usage, status; where it matters also what
llama-server received (``GET /slots``: the last task's sampling parameters and counts) or sent (the
``--record`` file: every id our server got). The scripted model and its markers: conftest.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from harmony_responses.engine import EngineOptions
from harmony_responses.engine._base import EngineMismatch, EngineRefused, EngineUnavailable, GenerateRequest
from harmony_responses.engine._llamacpp import LlamaCppEngine
from harmony_responses.tokens import EngineEnd, TokenChunk

from ..gateway import EngineProcess, Gateway, free_port, gateway, run_gateway_until_exit, start_engine
from ..tiny_model import ASSISTANT, harmony_ids
from .conftest import (
    AFTER_TOOL_TEXT,
    ANSWER,
    ANSWER_TEXT,
    CALL,
    EOT,
    EOT_TEXT,
    N_CTX,
    RUNNER_UP,
    RUNNER_UP_GAP,
    WEATHER_TOOL,
    llama_server_argv,
    slot,
)

MODEL = "gpt-oss-20b"
# The ids llama-server leaves out of its stream for ANSWER (their text ends inside a character).
CUT_IDS = {169883, 3348, 109}


def _generated(record: dict[str, Any]) -> list[int]:
    return list(record["tokens"])  # type: ignore[call-overload]


# ------------------------------------------------------------------------------ answers


def test_plain_answer_is_exact_with_emoji_and_cjk_cut_across_tokens(gw: Gateway, llama: EngineProcess) -> None:
    response = gw.client().responses.create(model=MODEL, input="Say hi zebra")
    assert response.status == "completed"
    assert response.output_text == ANSWER_TEXT
    # Every id counts, those llama.cpp left out of its stream too.
    assert response.usage is not None
    assert response.usage.output_tokens == len(harmony_ids(ANSWER))
    # llama-server's slot holds the prompt and every id it generated but the last (never evaluated).
    assert slot(llama)["n_prompt_tokens"] == response.usage.input_tokens + len(harmony_ids(ANSWER)) - 1


def test_streamed_answer_is_exact_and_no_replacement_character_reaches_the_client(gw: Gateway) -> None:
    deltas: list[str] = []
    done: Any = None
    with gw.client().responses.stream(model=MODEL, input="Stream hi zebra") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type == "response.completed":
                done = event.response
    assert "".join(deltas) == ANSWER_TEXT
    assert not any("\ufffd" in d for d in deltas)
    assert done is not None and done.output_text == ANSWER_TEXT
    assert done.usage.output_tokens == len(harmony_ids(ANSWER))


def test_the_adapter_recovers_every_id_llama_cpp_leaves_out(llama: EngineProcess) -> None:
    # The ids themselves, exactly as the model wrote them (the stream carried 10 of these 13).
    prompt = harmony_ids("<|start|>user<|message|>Say hi zebra<|end|><|start|>assistant")
    ids, end = asyncio.run(_generate(llama.url, GenerateRequest(prompt_ids=prompt, max_tokens=50)))
    assert ids == harmony_ids(ANSWER)
    assert CUT_IDS <= set(ids)
    assert end.reason == "stop"


async def _generate(url: str, request: GenerateRequest, **options: Any) -> tuple[list[int], EngineEnd]:
    async with LlamaCppEngine(EngineOptions(url=url, **options)) as engine:
        ids: list[int] = []
        async for item in engine.generate(request):
            if isinstance(item, TokenChunk):
                ids.extend(item.token_ids)
            else:
                return ids, item
    raise AssertionError("no EngineEnd")


def test_sampling_is_sent_plain_whatever_llama_server_defaults_to(gw: Gateway, llama: EngineProcess) -> None:
    # llama-server's own defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05.
    gw.client().responses.create(model=MODEL, input="Plain zebra")
    params: dict[str, Any] = slot(llama)["params"]  # type: ignore[assignment]
    assert params["temperature"] == 1.0 and params["top_p"] == 1.0
    assert params["top_k"] == 0 and params["min_p"] == 0.0
    assert params["typical_p"] == 1.0 and params["repeat_penalty"] == 1.0 and params["dry_multiplier"] == 0.0
    assert params["xtc_probability"] == 0.0 and params["mirostat"] == 0
    assert params["samplers"] == ["top_k", "top_p", "min_p", "temperature"]
    gw.client().responses.create(model=MODEL, input="Cooler zebra", temperature=0.5, top_p=0.9)
    params = slot(llama)["params"]  # type: ignore[assignment]
    assert params["temperature"] == 0.5 and abs(params["top_p"] - 0.9) < 1e-6


def test_a_stop_on_endoftext_appends_nothing(gw: Gateway) -> None:
    response = gw.client().responses.create(model=MODEL, input="Say bye lemon")
    assert response.status == "completed" and response.output_text == EOT_TEXT
    record = gw.records()[-1]
    # The ids are the model's, <|endoftext|> last: no <|return|> invented after it.
    assert _generated(record) == harmony_ids(EOT)
    assert response.usage is not None and response.usage.output_tokens == len(harmony_ids(EOT))


# ------------------------------------------------------------------------------ tools


def test_function_call_round_trip(gw: Gateway) -> None:
    client = gw.client()
    first = client.responses.create(model=MODEL, input="What is the weather in Paris?", tools=[WEATHER_TOOL])
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    assert first.usage is not None and first.usage.output_tokens == len(harmony_ids(CALL))
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[WEATHER_TOOL],
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "It is sunny"}],
    )
    assert second.status == "completed" and second.output_text == AFTER_TOOL_TEXT
    # The model writes AFTER_TOOL only when " sunny" is in its prompt: llama-server got the tool's output.
    assert second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


# ------------------------------------------------------------------------------ logprobs


def test_logprobs_with_top_alternatives(gw: Gateway) -> None:
    response = gw.client().responses.create(
        model=MODEL, input="Logprobs zebra", include=["message.output_text.logprobs"], top_logprobs=3
    )
    assert response.output_text == ANSWER_TEXT
    message = next(item for item in response.output if item.type == "message")
    logprobs = message.content[0].logprobs  # type: ignore[union-attr]
    assert logprobs, "no logprobs"
    # One entry per id, those llama.cpp left out too; a token cut inside a character has its bytes.
    assert len(logprobs) == len(harmony_ids(ANSWER)) - 4  # the header's 3 ids and <|return|> have none
    assert b"".join(bytes(lp.bytes or b"") for lp in logprobs) == ANSWER_TEXT.encode()
    for lp, token in zip(logprobs, harmony_ids(ANSWER)[3:-1], strict=True):
        assert lp.logprob > -0.01  # the scripted model is sure of every token
        # llama.cpp sends no logprobs for the ids it left out (their text ended inside a character):
        # they get 0.0 and no alternatives; every other token has its 3.
        assert len(lp.top_logprobs) == (0 if token in CUT_IDS else 3), lp
        # A zero probability is OpenAI's -9999.0 at worst, never float32's -3.4e38.
        assert all(alt.logprob >= -9999.0 for alt in lp.top_logprobs)
    ok = next(lp for lp in logprobs if lp.token == " ok")
    assert ok.top_logprobs[0].token == " ok"
    runner = ok.top_logprobs[1]
    assert runner.token == " OK" and abs(runner.logprob - (-RUNNER_UP_GAP)) < 0.1
    assert RUNNER_UP == harmony_ids(" OK")[0]


# ------------------------------------------------------------------------------ budgets and context


def test_length_cut(gw: Gateway) -> None:
    response = gw.client().responses.create(model=MODEL, input="Sing kiwi", max_output_tokens=20)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 20


def test_a_prompt_over_the_context_is_context_length_exceeded(gw: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gw.client().responses.create(model=MODEL, input="zebra " + "word " * (2 * N_CTX))
    assert caught.value.status_code == 400
    assert caught.value.code == "context_length_exceeded"  # type: ignore[attr-defined]


def test_llama_cpp_refuses_a_prompt_over_n_ctx_as_context_length(llama: EngineProcess) -> None:
    # The adapter alone, without the server's own budget check: llama-server's 400 exceed_context_size_error.
    async def run() -> EngineRefused:
        engine = LlamaCppEngine(EngineOptions(url=llama.url))
        try:
            request = GenerateRequest(prompt_ids=[200006] * (N_CTX + 10) + [ASSISTANT], max_tokens=10)
            with pytest.raises(EngineRefused) as caught:
                async for _ in engine.generate(request):
                    pass
            return caught.value
        finally:
            await engine.aclose()

    error = asyncio.run(run())
    assert error.status_hint == 400 and error.code_hint == "context_length_exceeded"


def test_the_engine_reports_its_context_window(llama: EngineProcess) -> None:
    async def run() -> int | None:
        async with LlamaCppEngine(EngineOptions(url=llama.url)) as engine:
            return engine.context_window

    assert asyncio.run(run()) == N_CTX


def test_no_max_output_tokens_on_a_small_context(gw: Gateway, llama: EngineProcess) -> None:
    # The model never stops: it writes until the context (N_CTX) is full, and the response says so.
    response = gw.client().responses.create(model=MODEL, input="Sing on kiwi")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None
    assert response.usage.input_tokens + response.usage.output_tokens <= N_CTX
    assert response.usage.input_tokens + response.usage.output_tokens >= N_CTX - 2


# ------------------------------------------------------------------------------ caching, disconnects


def test_cached_tokens_come_from_llama_cpp_prefix_caching(gw: Gateway, llama: EngineProcess) -> None:
    client = gw.client()
    first = client.responses.create(model=MODEL, input="Cache me zebra")
    second = client.responses.create(model=MODEL, input="Cache me zebra")
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens == first.usage.input_tokens
    cached = second.usage.input_tokens_details.cached_tokens
    # What llama-server reused from its slot (it re-evaluates a few tokens of the tail: its single layer
    # is a sliding-window one, whose cache it keeps checkpoints of).
    assert 0 < cached < second.usage.input_tokens
    evaluated = re.findall(r"prompt eval time = .*/ +(\d+) tokens", llama.output())[-1]
    assert cached == second.usage.input_tokens - int(evaluated)


def test_a_client_that_goes_away_stops_the_generation(gw: Gateway, llama: EngineProcess) -> None:
    body = {"model": MODEL, "input": "Sing long kiwi", "stream": True, "max_output_tokens": 400}
    with httpx.stream("POST", gw.base_url + "/responses", json=body, timeout=30) as response:
        deltas = 0
        for line in response.iter_lines():
            if "response.output_text.delta" in line:
                deltas += 1
                if deltas >= 5:
                    break
    # llama-server notices the closed connection and releases its slot long before 400 tokens.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        state = slot(llama)
        if not state["is_processing"]:
            break
        time.sleep(0.05)
    assert not state["is_processing"]
    # Its cache holds the prompt and what it generated: far short of prompt + 400.
    assert state["n_prompt_tokens"] < 300  # type: ignore[operator]


# ------------------------------------------------------------------------------ start-up


def test_start_up_waits_for_an_engine_that_is_still_loading(scripted_gguf: Path, tmp_path: Path) -> None:
    # Our server starts first and retries; llama-server starts 1.5 s later and loads for seconds (its
    # 201,088-token vocabulary), answering /health with 503 meanwhile.
    port = free_port()
    started: dict[str, Any] = {}

    def launch() -> None:
        argv = llama_server_argv(scripted_gguf)
        started["engine"] = start_engine(argv, port=port, health=None, log_dir=tmp_path, name="llama-server")
        seen: set[int | str] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and 200 not in seen:
            try:
                seen.add(httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code)
            except httpx.HTTPError:
                seen.add("refused")
            time.sleep(0.02)
        started["seen"] = seen

    timer = threading.Timer(1.5, launch)
    timer.start()
    try:
        args = ["--engine-start-wait", "60"]
        with gateway(f"llamacpp:http://127.0.0.1:{port}", args=args, log_dir=tmp_path, timeout=90) as gw:
            timer.join()
            assert 503 in started["seen"], started["seen"]
            assert "retrying" in gw.output()
            assert gw.client().responses.create(model=MODEL, input="hi zebra").output_text == ANSWER_TEXT
    finally:
        timer.cancel()
        timer.join()
        if "engine" in started:
            started["engine"].stop()


def test_start_up_without_waiting_refuses_a_loading_engine(scripted_gguf: Path, tmp_path: Path) -> None:
    engine = start_engine(llama_server_argv(scripted_gguf), health=None, log_dir=tmp_path, name="llama-server")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if httpx.get(engine.url + "/health", timeout=2).status_code == 503:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.01)
        # The adapter's check, in-process (milliseconds, well inside the loading window).
        with pytest.raises(EngineUnavailable, match="503"):
            asyncio.run(LlamaCppEngine(EngineOptions(url=engine.url)).start())
    finally:
        engine.stop()


# ------------------------------------------------------------------------------ router mode


@pytest.fixture(scope="module")
def router(
    scripted_gguf: Path, random_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[EngineProcess, Path]:
    models = tmp_path_factory.mktemp("models")
    (models / "tiny-scripted.gguf").symlink_to(scripted_gguf)
    (models / "tiny-random.gguf").symlink_to(random_gguf)
    logs = tmp_path_factory.mktemp("router")
    engine = start_engine(
        llama_server_argv(None, "--models-dir", str(models)), timeout=120, log_dir=logs, name="llama-router"
    )
    yield engine, models  # type: ignore[misc]
    engine.stop()


def test_router_mode_serves_the_model_named_with_engine_model(router: tuple[EngineProcess, Path]) -> None:
    engine, _ = router
    with gateway(f"llamacpp:{engine.url}", args=["--engine-model", "tiny-scripted"], timeout=120) as gw:
        response = gw.client().responses.create(model=MODEL, input="Route zebra")
        assert response.output_text == ANSWER_TEXT


def test_router_mode_refuses_a_model_it_does_not_serve(router: tuple[EngineProcess, Path]) -> None:
    engine, _ = router
    status, output = run_gateway_until_exit(f"llamacpp:{engine.url}", args=["--engine-model", "no-such-model"])
    assert status not in (None, 0), output
    assert "no-such-model" in output and "tiny-scripted" in output


def test_engine_model_is_checked_against_a_single_model_server(llama: EngineProcess) -> None:
    status, output = run_gateway_until_exit(f"llamacpp:{llama.url}", args=["--engine-model", "no-such-model"])
    assert status not in (None, 0), output
    assert "no-such-model" in output


def test_engine_model_mismatch_is_an_engine_mismatch(llama: EngineProcess) -> None:
    async def run() -> None:
        async with LlamaCppEngine(EngineOptions(url=llama.url, model="other")):
            pass

    with pytest.raises(EngineMismatch):
        asyncio.run(run())


def test_engine_model_may_name_a_single_model_by_its_file(llama: EngineProcess, scripted_gguf: Path) -> None:
    with gateway(f"llamacpp:{llama.url}", args=["--engine-model", scripted_gguf.stem]) as gw:
        assert str(scripted_gguf) in gw.output()  # the banner names the model as llama-server lists it
        assert gw.client().responses.create(model=MODEL, input="File zebra").output_text == ANSWER_TEXT
