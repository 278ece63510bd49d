"""Our server against SGLang 0.5.23's own HTTP server, tokenizer manager and detokenizer (issue 12).

The scheduler is scripted (scripted_scheduler.py): it writes the ids a test chose, through SGLang's own
``Req`` and output classes, and logs what SGLang's tokenizer manager forwarded to it. Each test keys its
script on a word of its own input (``Script.say``).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest

from harmony_responses.engine._base import EngineRefused, GenerateRequest
from harmony_responses.engine._options import EngineOptions
from harmony_responses.engine._sglang import SGLangEngine
from harmony_responses.tokens import ADMITTED

from ..gateway import Gateway
from .conftest import CONTEXT_LENGTH, PREFERRED_SAMPLING, SERVED_MODEL, SGLang, harmony

MODEL = "gpt-oss-20b"  # the name our server serves (gateway.DEFAULT_MODEL)
TOP_K_ALL = 1 << 30  # SGLang's "whole vocabulary": what top_k -1 becomes in its SamplingParams
WEATHER_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

Stack = tuple[SGLang, Gateway]

# The first test of a session waits for both SGLang servers to start (one to two minutes on two cores,
# more while the machine builds something else): more than the suite's 300 s per test when it is busy.
pytestmark = pytest.mark.timeout(900)


def text_of(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def test_start_up_waits_for_an_engine_still_loading(stack: Stack) -> None:
    sglang, gateway = stack
    # Our server was started before SGLang listened (or while /health answered 503 in its warm-up)
    # and waited for it instead of exiting.
    assert sglang.health_at_gateway_start != "200"
    assert "retrying for" in gateway.log.read_text(errors="replace")
    assert gateway.alive()
    assert httpx.get(gateway.url + "/health", timeout=10).status_code == 200


def test_start_up_check_and_context_window(stack: Stack) -> None:
    sglang, _ = stack
    # Item 2: SGLang's /detokenize skips special tokens unless told not to.
    plain = httpx.post(sglang.url + "/detokenize", json={"tokens": [200006, 200008, 200002]}, timeout=10).json()
    assert plain == {"text": ""}
    # Item 1: the context our adapter reads at start-up.
    models = httpx.get(sglang.url + "/v1/models", timeout=10).json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in models] == [(SERVED_MODEL, CONTEXT_LENGTH)]

    async def started() -> SGLangEngine:
        engine = SGLangEngine(EngineOptions(url=sglang.url))
        await engine.start()
        await engine.aclose()
        return engine

    engine = asyncio.run(started())
    assert (engine.model, engine.context_window) == (SERVED_MODEL, CONTEXT_LENGTH)


def test_plain_answer_streamed_and_not(stack: Stack) -> None:
    sglang, gateway = stack
    ids = sglang.script.say("plainzebra", "<|channel|>final<|message|>Hello there, zebra!<|return|>", per_step=2)
    client = gateway.client()
    events = list(client.responses.create(model=MODEL, input="Say hi plainzebra", stream=True, max_output_tokens=64))
    assert events[-1].type == "response.completed"
    assert text_of(events) == "Hello there, zebra!"
    usage = events[-1].response.usage
    received = sglang.request_for("plainzebra")
    assert usage.input_tokens == received["prompt_tokens"]
    assert usage.output_tokens == len(ids)
    finish = sglang.wait_event("finish", rid=received["rid"])
    assert finish["reason"] == {"type": "stop", "matched": 200002}
    response = client.responses.create(model=MODEL, input="Say hi plainzebra", max_output_tokens=64)
    assert (response.status, response.output_text) == ("completed", "Hello there, zebra!")


def test_what_sglang_forwards_to_the_scheduler(stack: Stack) -> None:
    # Item 8: the server's --preferred-sampling-params fill every field a request leaves out; ours say the
    # API's meaning for each, and this is what SGLang's tokenizer manager handed its scheduler.
    sglang, gateway = stack
    sglang.script.say("samplingowl", "<|channel|>final<|message|>owl<|return|>")
    client = gateway.client()
    client.responses.create(model=MODEL, input="samplingowl", max_output_tokens=32)
    sampling = sglang.request_for("samplingowl")["sampling"]
    plain = (sampling["temperature"], sampling["top_p"], sampling["top_k"], sampling["min_p"])
    assert plain == (1.0, 1.0, TOP_K_ALL, 0.0)
    assert (sampling["repetition_penalty"], sampling["frequency_penalty"], sampling["presence_penalty"]) == (1.0, 0, 0)
    assert sampling["stop_token_ids"] == [200002, 200012]
    assert sampling["skip_special_tokens"] is False and sampling["no_stop_trim"] is True
    assert sampling["max_new_tokens"] == 32
    sglang.script.say("samplingyak", "<|channel|>final<|message|>yak<|return|>")
    client.responses.create(model=MODEL, input="samplingyak", temperature=0.4, top_p=0.5, max_output_tokens=32)
    chosen = sglang.request_for("samplingyak")["sampling"]
    assert (chosen["temperature"], chosen["top_p"], chosen["top_k"], chosen["min_p"]) == (0.4, 0.5, TOP_K_ALL, 0.0)
    assert PREFERRED_SAMPLING["top_k"] != TOP_K_ALL


def test_no_max_output_tokens_fits_the_engine_context(stack: Stack) -> None:
    # Item 1: without max_output_tokens the budget is what SGLang's context leaves, not 131072 - prompt
    # (which SGLang refuses inside its stream).
    sglang, gateway = stack
    sglang.script.say("budgetmoose", "<|channel|>final<|message|>moose<|return|>")
    response = gateway.client().responses.create(model=MODEL, input="budgetmoose")
    assert (response.status, response.output_text) == ("completed", "moose")
    received = sglang.request_for("budgetmoose")
    assert received["prompt_tokens"] + received["sampling"]["max_new_tokens"] <= CONTEXT_LENGTH


def test_function_round_trip(stack: Stack) -> None:
    sglang, gateway = stack
    sglang.script.say(
        "weatherlynx",
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Lynxville"}<|call|>',
    )
    sglang.script.say("rainyfjord", "<|channel|>final<|message|>It is rainy in Lynxville.<|return|>")
    client = gateway.client()
    first = client.responses.create(model=MODEL, input="Weather weatherlynx?", tools=[WEATHER_TOOL])
    call = first.output[-1]
    assert (call.type, call.name, call.arguments) == ("function_call", "get_weather", '{"city": "Lynxville"}')  # type: ignore[union-attr]
    assert sglang.wait_event("finish", rid=sglang.request_for("weatherlynx")["rid"])["reason"] == {
        "type": "stop",
        "matched": 200012,
    }
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "rainyfjord"}'}],  # type: ignore[union-attr]
        tools=[WEATHER_TOOL],
    )
    assert (second.status, second.output_text) == ("completed", "It is rainy in Lynxville.")


def test_logprobs_with_top_alternatives(stack: Stack) -> None:
    # The scheduler gives each chosen id logprob -0.25 and alternatives id+1, id+2… each 1.0 less likely,
    # through SGLang's own logprob fields (cumulative arrays, like output_ids).
    sglang, gateway = stack
    sglang.script.say("logprobheron", "<|channel|>final<|message|>Heron ok.<|return|>", per_step=2)
    events = list(
        gateway.client().responses.create(
            model=MODEL,
            input="logprobheron",
            stream=True,
            include=["message.output_text.logprobs"],
            top_logprobs=3,
            max_output_tokens=32,
        )
    )
    assert text_of(events) == "Heron ok."
    received = sglang.request_for("logprobheron")
    assert (received["return_logprob"], received["top_logprobs_num"]) == (True, 3)
    lps = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    assert len(lps) == len(harmony("Heron ok."))
    for lp in lps:
        assert lp.logprob == pytest.approx(-0.25)
        assert [alt.logprob for alt in lp.top_logprobs] == pytest.approx([-0.25, -1.25, -2.25])
        assert lp.top_logprobs[0].token == lp.token
    # Logprobs without alternatives: top_logprobs_num 0, empty alternative lists from SGLang.
    sglang.script.say("logprobegret", "<|channel|>final<|message|>Egret.<|return|>")
    response = gateway.client().responses.create(
        model=MODEL, input="logprobegret", include=["message.output_text.logprobs"], max_output_tokens=32
    )
    assert sglang.request_for("logprobegret")["top_logprobs_num"] == 0
    (content,) = response.output[-1].content  # type: ignore[union-attr]
    assert content.text == "Egret." and len(content.logprobs) == len(harmony("Egret."))  # type: ignore[union-attr]
    assert all(lp.logprob == pytest.approx(-0.25) and lp.top_logprobs == [] for lp in content.logprobs)  # type: ignore[union-attr]


def test_length_cut_is_incomplete(stack: Stack) -> None:
    sglang, gateway = stack
    sglang.script.say("lengthcrane", "<|channel|>final<|message|>" + "crane " * 60 + "<|return|>", per_step=3)
    client = gateway.client()
    events = list(client.responses.create(model=MODEL, input="lengthcrane", stream=True, max_output_tokens=16))
    final = events[-1]
    assert final.type == "response.incomplete"
    assert final.response.incomplete_details.reason == "max_output_tokens"
    assert final.response.usage.output_tokens == 16
    finish = sglang.wait_event("finish", rid=sglang.request_for("lengthcrane")["rid"])
    assert finish["reason"] == {"type": "length", "length": 16}


def test_prompt_over_the_context_is_400(stack: Stack) -> None:
    _, gateway = stack
    with pytest.raises(openai.BadRequestError) as info:
        gateway.client().responses.create(model=MODEL, input="long " * (CONTEXT_LENGTH + 100), max_output_tokens=16)
    assert info.value.status_code == 400
    assert info.value.body["code"] == "context_length_exceeded"  # type: ignore[index]


def test_sglang_in_stream_refusals_map_by_their_code(stack: Stack) -> None:
    # Item 3, at the adapter: SGLang answers 200 and sends {"error": {..., "code": 400}} then [DONE] for a
    # prompt or max_new_tokens over its context. Our server refuses both itself once it knows the context,
    # so the adapter is driven directly here, with SGLang's real answers.
    sglang, _ = stack

    async def first(request: GenerateRequest) -> EngineRefused:
        engine = SGLangEngine(EngineOptions(url=sglang.url))
        try:
            stream = engine.generate(request)
            assert await stream.__anext__() is ADMITTED  # its 200 came: the refusal follows in the stream
            with pytest.raises(EngineRefused) as info:
                await stream.__anext__()
            return info.value
        finally:
            await engine.aclose()

    too_long = asyncio.run(first(GenerateRequest(prompt_ids=[12194] * (CONTEXT_LENGTH + 10), max_tokens=8)))
    assert (too_long.status_hint, too_long.code_hint) == (400, "context_length_exceeded")
    assert "longer than the model's context length (2048 tokens)" in str(too_long)
    over_budget = asyncio.run(first(GenerateRequest(prompt_ids=[12194] * 10, max_tokens=130999)))
    assert (over_budget.status_hint, over_budget.code_hint) == (400, "invalid_request_error")
    assert "the output budget (130999 tokens) is larger than the engine's context (2048 tokens)" in str(over_budget)


def test_disconnect_reaches_sglangs_abort(stack: Stack) -> None:
    sglang, gateway = stack
    sglang.script.say("abortibis", "<|channel|>final<|message|>" + "ibis " * 200 + "<|return|>", step_delay=0.05)
    with httpx.stream(
        "POST",
        gateway.base_url + "/responses",
        json={"model": MODEL, "input": "abortibis", "stream": True, "max_output_tokens": 400},
        timeout=30,
    ) as response:
        deltas = 0
        for line in response.iter_lines():
            deltas += "output_text.delta" in line
            if deltas >= 3:
                break
    rid = sglang.request_for("abortibis")["rid"]
    abort = sglang.wait_event("abort", rid=rid)
    assert abort["abort_all"] is False
    finish = sglang.wait_event("finish", rid=rid)
    assert finish["reason"]["type"] == "abort" and len(finish["output_ids"]) < 200
    # SGLang aborts on the closed connection itself; our adapter calls /abort_request too, and takes
    # its empty 200 answer without complaint.
    assert sglang.process is not None
    deadline = time.monotonic() + 10
    while '"POST /abort_request HTTP/1.1" 200' not in sglang.process.log.read_text(errors="replace"):
        assert time.monotonic() < deadline, sglang.process.output()[-2000:]
        time.sleep(0.1)
    assert "abort request failed" not in gateway.output()


def test_background_cancel_reaches_sglangs_abort(stack: Stack) -> None:
    sglang, gateway = stack
    sglang.script.say("cancelstork", "<|channel|>final<|message|>" + "stork " * 200 + "<|return|>", step_delay=0.05)
    client = gateway.client()
    response = client.responses.create(model=MODEL, input="cancelstork", background=True, max_output_tokens=400)
    rid = sglang.request_for("cancelstork")["rid"]
    time.sleep(0.3)
    cancelled = client.responses.cancel(response.id)
    assert cancelled.status == "cancelled"
    sglang.wait_event("abort", rid=rid)
    assert sglang.wait_event("finish", rid=rid)["reason"]["type"] == "abort"


def test_cached_tokens_from_the_prefix(stack: Stack) -> None:
    sglang, gateway = stack
    sglang.script.say("cacheddove", "<|channel|>final<|message|>dove<|return|>")
    client = gateway.client()
    question = "cacheddove " + "a long shared instruction. " * 40
    first = client.responses.create(model=MODEL, input=question, max_output_tokens=16)
    second = client.responses.create(model=MODEL, input=question, max_output_tokens=16)
    requests = sglang.events("request", key="cacheddove")
    assert first.usage.input_tokens_details.cached_tokens == requests[0]["cached_tokens"]  # type: ignore[union-attr]
    cached = requests[-1]["cached_tokens"]
    assert cached > 200 and second.usage.input_tokens_details.cached_tokens == cached  # type: ignore[union-attr]


def test_emoji_and_cjk_split_across_tokens(stack: Stack) -> None:
    # 🚀 is two o200k tokens (169883, 222) and each arrives in its own chunk: the text must still be exact.
    sglang, gateway = stack
    answer = "Hi 🚀 ok, 你好世界 👩‍👩‍👧 done"
    ids = sglang.script.say("emojiotter", f"<|channel|>final<|message|>{answer}<|return|>", per_step=1)
    assert 169883 in ids and 222 in ids
    events = list(gateway.client().responses.create(model=MODEL, input="emojiotter", stream=True, max_output_tokens=64))
    assert events[-1].type == "response.completed"
    assert text_of(events) == answer
    assert events[-1].response.output_text == answer
    assert events[-1].response.usage.output_tokens == len(ids)


def test_model_eos_endoftext_ends_the_answer(stack: Stack) -> None:
    # SGLang stops on the model's eos ids (generation_config: <|endoftext|> 199999 too), reported as
    # matched 199999: the answer ends there, with no <|return|> invented.
    sglang, gateway = stack
    ids = sglang.script.say("eosbadger", "<|channel|>final<|message|>badger<|endoftext|>never this")
    response = gateway.client().responses.create(model=MODEL, input="eosbadger", max_output_tokens=32)
    finish = sglang.wait_event("finish", rid=sglang.request_for("eosbadger")["rid"])
    assert finish["reason"] == {"type": "stop", "matched": 199999}
    assert finish["output_ids"] == ids[: ids.index(199999) + 1]
    assert response.output_text == "badger"
    assert response.usage is not None and response.usage.output_tokens == ids.index(199999) + 1


def test_strict_json_schema_reaches_sglang_as_a_structural_tag(stack: Stack) -> None:
    # Item 4: what SGLang's tokenizer manager forwards, and what SGLang's own xgrammar backend (as its
    # grammar manager builds it) makes of it. No sampler runs here, so the grammar cannot steer; the
    # scripted scheduler replays the scripted ids through the compiled tag's matcher instead.
    sglang, gateway = stack
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    answer = '<|channel|>final<|message|>{"answer": "yes"}<|return|>'
    ids = sglang.script.say("schemamole", answer)
    response = gateway.client().responses.create(
        model=MODEL,
        input="schemamole",
        max_output_tokens=64,
        text={"format": {"type": "json_schema", "name": "reply", "schema": schema, "strict": True}},
    )
    assert (response.status, response.output_text) == ("completed", '{"answer": "yes"}')
    received = sglang.request_for("schemamole")
    tag = json.loads(received["sampling"]["structural_tag"])
    (structure,) = tag["structures"]
    assert (structure["begin"], structure["end"], structure["schema"]) == ("<|channel|>final<|message|>", "", schema)
    expected = {"accepted_all": True, "rejected_at": None, "rejected_token": None, "terminated": True}
    assert {k: v for k, v in received["grammar"].items() if k != "compile_ms"} == expected

    # The tag as it was (end "<|return|>"), sent to SGLang directly: xgrammar matches the end as text, so
    # the stop token is refused right after the JSON (a sampler would have to spell "<|return|>").
    sglang.script.say("schemaoldmole", answer)
    old = {**tag, "structures": [{**structure, "end": "<|return|>"}]}
    prompt = harmony("<|start|>user<|message|>schemaoldmole<|end|><|start|>assistant")
    body = {
        "input_ids": prompt,
        "sampling_params": {"max_new_tokens": 64, "structural_tag": json.dumps(old), "stop_token_ids": [200002]},
    }
    assert httpx.post(sglang.url + "/generate", json=body, timeout=60).status_code == 200
    grammar = sglang.request_for("schemaoldmole")["grammar"]
    assert grammar["accepted_all"] is False
    assert (grammar["rejected_at"], grammar["rejected_token"]) == (len(ids) - 1, 200002), grammar


def test_incremental_streaming_output(incremental_stack: Stack) -> None:
    # With --incremental-streaming-output, output_ids, text and the logprob arrays are per chunk while
    # completion_tokens stays cumulative: the reader tells the two modes apart at the second chunk.
    sglang, gateway = incremental_stack
    answer = "Hi 🚀 ok, 你好世界"
    ids = sglang.script.say("incrementalpuffin", f"<|channel|>final<|message|>{answer}<|return|>", per_step=2)
    events = list(
        gateway.client().responses.create(
            model=MODEL,
            input="incrementalpuffin",
            stream=True,
            include=["message.output_text.logprobs"],
            top_logprobs=2,
            max_output_tokens=64,
        )
    )
    assert events[-1].type == "response.completed"
    assert text_of(events) == answer
    assert events[-1].response.usage.output_tokens == len(ids)
    lps = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    assert len(lps) == len(harmony(answer))
    assert all(lp.logprob == pytest.approx(-0.25) for lp in lps)

    # The raw shape, from SGLang itself.
    prompt = harmony("<|start|>user<|message|>incrementalpuffin<|end|><|start|>assistant")
    sampling = {"max_new_tokens": 64, "skip_special_tokens": False}
    body = {"input_ids": prompt, "stream": True, "sampling_params": sampling}
    chunks = []
    with httpx.stream("POST", sglang.url + "/generate", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line[6:]))
    assert [t for c in chunks for t in c["output_ids"]] == ids
    assert len(chunks) > 1 and len(chunks[-1]["output_ids"]) < len(ids)
    assert chunks[-1]["meta_info"]["completion_tokens"] == len(ids)


def test_skip_tokenizer_init_serves_ids_only(ids_only_stack: Stack) -> None:
    # No tokenizer: /detokenize answers 400, chunks carry no text. Our server starts anyway (saying it
    # could not check the vocabulary) and serves, since it only ever uses ids.
    sglang, gateway = ids_only_stack
    refused = httpx.post(sglang.url + "/detokenize", json={"tokens": [200006], "skip_special_tokens": False})
    assert refused.status_code == 400 and refused.json()["type"] == "DecodeError"
    assert "--skip-tokenizer-init: its tokenizer cannot be checked" in gateway.log.read_text(errors="replace")
    answer = "Ids only 🚀 你好"
    ids = sglang.script.say("idsonlyshrike", f"<|channel|>final<|message|>{answer}<|return|>")
    events = list(
        gateway.client().responses.create(model=MODEL, input="idsonlyshrike", stream=True, max_output_tokens=64)
    )
    assert events[-1].type == "response.completed"
    assert text_of(events) == answer
    assert events[-1].response.usage.output_tokens == len(ids)
