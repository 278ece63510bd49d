"""The SGLang adapter against SGLangFake, on what SGLang 0.5.23's real server showed (issue 12).

The same behaviour is checked against the real server in tests/real_engines/sglang; these run in the unit
suite: the start-up check's ``/detokenize`` (item 2), the context read from ``/v1/models`` (item 1), an
in-stream refusal mapped by its code (item 3) and the sampling sent in full (item 8).
"""

from __future__ import annotations

import asyncio

import pytest
from starlette.responses import JSONResponse

from harmony_responses.engine._base import EngineRefused, GenerateRequest
from harmony_responses.engine._options import EngineOptions
from harmony_responses.engine._sglang import PLAIN_SAMPLING, SGLangEngine

from .fakes import Scenario, SGLangFake, harmony, run_fake
from .helpers import ANSWER, stack

HELLO = harmony(ANSWER)


def _started(fake: SGLangFake) -> SGLangEngine:
    async def start() -> SGLangEngine:
        engine = SGLangEngine(EngineOptions(url=fake.url))
        await engine.start()
        await engine.aclose()
        return engine

    return asyncio.run(start())


def test_start_up_detokenizes_harmony_with_special_tokens_kept() -> None:
    # SGLang's /detokenize skips special tokens by default and answers "" for Harmony's: the check must
    # ask for them, or the server refuses to start against every SGLang.
    with run_fake(SGLangFake(context=4096)) as fake:
        engine = _started(fake)
        assert fake.detokenized == [{"tokens": [200006, 200008, 200002], "skip_special_tokens": False}]
    assert engine.context_window == 4096  # /v1/models' max_model_len
    assert engine.model == SGLangFake.model


def test_refusals_inside_the_stream_are_400s() -> None:
    # SGLang answers 200 and puts {"error": {..., "code": 400}} in the stream; before the first token
    # that is the client's 400, not a 503. (A server that knows the context refuses such requests itself:
    # here the fake does not report it.)
    fake = SGLangFake(Scenario(tokens=HELLO), context=200, reports_context=False)
    with stack("sglang", fake) as s:
        too_long = s.post({"input": "Hi " * 300, "max_output_tokens": 16})
        over_budget = s.post({"input": "Hi", "max_output_tokens": 1000})
    assert too_long.status_code == 400, too_long.text
    error = too_long.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "longer than the model's context length (200 tokens)" in error["message"]
    # Not a prompt too long but a budget to lower: the same code as vLLM's refusal of max_tokens.
    assert over_budget.status_code == 400, over_budget.text
    error = over_budget.json()["error"]
    assert error["code"] == "invalid_request_error"
    assert "the output budget (1000 tokens) is larger than the engine's context (200 tokens)" in error["message"]


def test_sampling_is_sent_in_full() -> None:
    with stack("sglang", SGLangFake(Scenario(tokens=HELLO))) as s:
        assert s.post({"input": "Hi"}).json()["status"] == "completed"
        assert s.post({"input": "Hi", "temperature": 0.5, "top_p": 0.25}).json()["status"] == "completed"
    plain, chosen = (body["sampling_params"] for body in s.fake.requests)
    assert {k: plain[k] for k in PLAIN_SAMPLING} == PLAIN_SAMPLING
    assert PLAIN_SAMPLING["top_k"] == -1 and PLAIN_SAMPLING["min_p"] == 0.0
    assert (chosen["temperature"], chosen["top_p"], chosen["top_k"]) == (0.5, 0.25, -1)
    assert plain["skip_special_tokens"] is False and plain["no_stop_trim"] is True


def test_abort_takes_sglangs_empty_answer() -> None:
    # /abort_request answers 200 with an empty body: reading it as JSON made every abort log a failure.
    async def abort(fake: SGLangFake) -> None:
        engine = SGLangEngine(EngineOptions(url=fake.url))
        try:
            await engine.abort(engine.reader(GenerateRequest(prompt_ids=[1], request_id="resp_x")))
        finally:
            await engine.aclose()

    with run_fake(SGLangFake()) as fake:
        asyncio.run(abort(fake))
        assert fake.aborts == ["resp_x"]


def test_a_server_without_tokenizer_serves_ids() -> None:
    # --skip-tokenizer-init: /detokenize answers 400 and the chunks have no text; /server_info says why.
    # Refusing to start would lock out a server that serves exactly what we use (ids).
    with stack("sglang", SGLangFake(Scenario(tokens=HELLO), skip_tokenizer_init=True)) as s:
        response = s.post({"input": "Hi"})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "completed"


def test_a_failing_detokenize_still_refuses_the_start_up() -> None:
    # Only --skip-tokenizer-init excuses the check: any other /detokenize failure still stops start-up.
    fake = SGLangFake(skip_tokenizer_init=True)
    fake.server_info = lambda request: JSONResponse({"skip_tokenizer_init": False})  # type: ignore[assignment,method-assign]
    with run_fake(fake), pytest.raises(EngineRefused, match="DecodeError|Error decoding tokens"):
        _started(fake)
