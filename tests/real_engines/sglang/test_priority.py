"""service_tier through SGLang 0.5.23 (issue 28 item 3): with ``--engine-priority`` our gateway sends SGLang's
own ``priority`` field, and SGLang's HTTP server and tokenizer manager hand it to the scheduler as sent.

The scheduler is the tier's scripted one (no sampler or queue of SGLang's runs here), so what SGLang's own
scheduler does with it is read from its source (docs/production/operating.md): higher first under
``--enable-priority-scheduling``, and without that flag the value is ignored, or the request aborted with
503 under ``--abort-on-priority-when-disabled``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..gateway import Gateway, start_gateway
from .conftest import SGLang

MODEL = "gpt-oss-20b"
Stack = tuple[SGLang, Gateway]

pytestmark = pytest.mark.timeout(900)  # the first test waits for SGLang to start (conftest)


@pytest.fixture(scope="module")
def prioritised(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    sglang, _ = stack
    g = start_gateway(
        f"sglang:{sglang.url}", args=["--engine-priority"], log_dir=tmp_path_factory.mktemp("gw-priority")
    )
    yield g
    g.stop()


@pytest.mark.parametrize(("tier", "sent"), [("priority", 1), ("flex", -1), ("default", None)])
def test_a_tier_reaches_sglangs_scheduler_as_its_priority(
    stack: Stack, prioritised: Gateway, tier: str, sent: int | None
) -> None:
    sglang, plain = stack
    key = f"tierprio{tier}"
    sglang.script.say(key, "<|channel|>final<|message|>ok<|return|>")
    with prioritised.client() as client:
        response = client.responses.create(model=MODEL, input=key, service_tier=tier)  # type: ignore[arg-type]
    assert response.status == "completed" and response.service_tier == tier
    assert sglang.request_for(key)["priority"] == sent
    # Without --engine-priority nothing is sent: SGLang sees no priority.
    key = f"tierplain{tier}"
    sglang.script.say(key, "<|channel|>final<|message|>ok<|return|>")
    with plain.client() as client:
        assert client.responses.create(model=MODEL, input=key, service_tier=tier).service_tier == tier  # type: ignore[arg-type]
    assert sglang.request_for(key)["priority"] is None
