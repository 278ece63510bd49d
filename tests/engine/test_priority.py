"""``service_tier`` reaches vLLM and SGLang as their own ``priority`` field with ``--engine-priority``: vLLM's
lower-first scale (priority -1, flex 1), SGLang's higher-first one (priority 1, flex -1); a default-tier call,
or a server without the option, sends none (an engine without priority scheduling refuses a non-zero one)."""

from __future__ import annotations

from .fakes import SGLangFake, VLLMFake
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
