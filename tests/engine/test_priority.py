"""``service_tier`` reaches vLLM and SGLang as their own ``priority`` field with ``--engine-priority``: vLLM's
lower-first scale (priority -1, flex 1), SGLang's higher-first one (priority 1, flex -1); a default-tier call,
or a server without the option, sends none (an engine without priority scheduling refuses a non-zero one)."""

from __future__ import annotations

import threading

import httpx

from .fakes import Scenario, SGLangFake, VLLMFake, harmony
from .helpers import stack


def _priorities(kind: str, fake: VLLMFake | SGLangFake, **config: object) -> list[object]:
    with stack(kind, fake, **config) as s:
        for tier in ("priority", "flex", "default", "auto", "fast"):
            response = s.post({"input": "Hi", "service_tier": tier})
            assert response.status_code == 200, response.text
        return [sent.get("priority", "none") for sent in s.fake.requests]


def test_vllm_gets_the_tier_as_its_lower_first_priority() -> None:
    assert _priorities("vllm", VLLMFake(), engine_priority=True) == [-1, 1, "none", "none", -1]
    assert _priorities("vllm", VLLMFake()) == ["none"] * 5


def test_sglang_gets_the_tier_as_its_higher_first_priority() -> None:
    assert _priorities("sglang", SGLangFake(), engine_priority=True) == [1, -1, "none", "none", 1]
    assert _priorities("sglang", SGLangFake()) == ["none"] * 5


def _engine_queue(root: str) -> float:
    for line in httpx.get(f"{root}/metrics").text.splitlines():
        if line.startswith('harmony_responses_queue_depth{queue="engine"}'):
            return float(line.split()[-1])
    return 0.0


def test_calls_waiting_for_an_engine_connection_go_by_tier() -> None:
    gate = threading.Event()
    answer = harmony("<|channel|>final<|message|>Hi<|return|>")
    fake = VLLMFake(Scenario(tokens=answer, first_token_gate=gate), Scenario(tokens=answer), Scenario(tokens=answer))
    budgets = {"default": 101, "flex": 102, "priority": 103}  # tells the engine calls apart
    with stack("vllm", fake, engine_max_connections=1) as s:
        statuses: list[int] = []

        def send(tier: str) -> None:
            body = {"input": "Hi", "service_tier": tier, "max_output_tokens": budgets[tier]}
            statuses.append(s.post(body).status_code)

        threads = [threading.Thread(target=send, args=("default",))]
        threads[0].start()
        while not s.fake.requests:  # the one connection is taken: the engine holds its first token
            pass
        base = _engine_queue(s.root)
        for waiting, tier in enumerate(("flex", "priority"), start=1):
            threads.append(threading.Thread(target=send, args=(tier,)))
            threads[-1].start()
            while _engine_queue(s.root) < base + waiting:  # it waits for the connection
                pass
        gate.set()
        for thread in threads:
            thread.join(30)
        assert statuses == [200, 200, 200]
        assert [sent["max_tokens"] for sent in s.fake.requests] == [101, 103, 102]  # priority overtook flex
