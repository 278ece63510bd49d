"""A stream starts at llama-server's admission, not its first token, and a refusal there is still no stream.

Issue 24 item 1, on the real engine: ``llama-server`` sends its status line and headers as soon as it takes
a ``POST /completion`` (before the prompt's prefill), and our server answers ``response.created`` and
``response.in_progress`` from there. A recording proxy (``tests/real_engines/proxy.py``) sits between our
server and llama-server and keeps back llama-server's first token until the test's ``openai`` client has
read both events: so the test shows they did not wait for the token (causality, not a wall-clock bound,
which a loaded 2-core machine would break). Before, they went out with the first delta and the test
would wait out the hold. A refusal at the status line (llama-server still loading: 503; a prompt over its
context: 400) is still an HTTP error with no stream.

Its own llama-server with a 4096-token context (the scripted model's whole window), so that a long prompt
(about 3,000 tokens) takes a prefill many times a token's time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from ..gateway import EngineProcess, Gateway, start_engine, start_gateway
from ..proxy import RecordingProxy
from .conftest import ANSWER_TEXT, llama_server_argv

MODEL = "gpt-oss-20b"
CTX = 4096
# About 3,000 prompt tokens (" word" is one token), with the marker that makes the model write ANSWER.
LONG_INPUT = "Say hi zebra." + " word" * 3000


@pytest.fixture(scope="module")
def long_llama(scripted_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    argv = llama_server_argv(scripted_gguf, ctx=CTX)
    engine = start_engine(argv, timeout=120, log_dir=tmp_path_factory.mktemp("llama"), name="llama-server")
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def proxy(long_llama: EngineProcess) -> Iterator[RecordingProxy]:
    relay = RecordingProxy(f"127.0.0.1:{long_llama.port}")
    yield relay
    relay.close()


@pytest.fixture(scope="module")
def pgw(proxy: RecordingProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start_gateway(f"llamacpp:{proxy.url}", log_dir=tmp_path_factory.mktemp("serve"))
    yield gateway
    gateway.stop()


@pytest.fixture
def restore(proxy: RecordingProxy, long_llama: EngineProcess) -> Iterator[None]:
    yield
    proxy.switch(f"127.0.0.1:{long_llama.port}")


def test_response_created_reaches_the_client_at_admission_before_the_first_token(
    pgw: Gateway, proxy: RecordingProxy
) -> None:
    gate = proxy.hold("/completion", timeout=60)
    seen: list[tuple[str, float, bool]] = []  # event type, when the client read it, whether the token was held
    with pgw.client().responses.create(model=MODEL, input=LONG_INPUT, stream=True) as stream:
        for event in stream:
            seen.append((event.type, time.monotonic(), gate.held))
            if event.type == "response.in_progress":
                break
        # Both lifecycle events came while llama-server's first token was still kept from our server.
        assert [(kind, held) for kind, _, held in seen] == [
            ("response.created", True),
            ("response.in_progress", True),
        ], "response.created waited for the engine's first token"
        gate.release()
        rest = list(stream)
    assert not gate.timed_out
    exchange = gate.exchange
    assert exchange is not None and exchange.status == 200
    # Our server waited for llama-server's admission (its status line) before it began the stream.
    assert exchange.status_at < seen[0][1]
    done = rest[-1]
    assert done.type == "response.completed"
    assert done.response.output_text == ANSWER_TEXT
    assert done.response.usage is not None and done.response.usage.input_tokens > 3000
    assert sum(e.type == "response.output_text.delta" for e in rest) > 1
    # For the record (not asserted: wall time): the prefill as the proxy saw it, and response.created after
    # the status line.
    assert exchange.first_body_at is not None
    prefill, created = exchange.first_body_at - exchange.status_at, seen[0][1] - exchange.status_at
    print(f"status line → first token at the proxy {1000 * prefill:.1f} ms; → response.created {1000 * created:.1f} ms")


def test_a_loading_llama_server_is_still_a_503_without_a_stream(
    pgw: Gateway, proxy: RecordingProxy, scripted_gguf: Path, tmp_path: Path, restore: None
) -> None:
    # A replica restarting: llama-server answers every request 503 "Loading model" while it loads (seconds:
    # its 201,088-token vocabulary), at its status line.
    loading = start_engine(llama_server_argv(scripted_gguf, ctx=CTX), health=None, log_dir=tmp_path, name="loading")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(loading.url + "/health", timeout=2).status_code == 503:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.01)
        proxy.switch(f"127.0.0.1:{loading.port}")
        with pytest.raises(openai.InternalServerError) as caught:
            pgw.client().responses.create(model=MODEL, input="Say hi zebra", stream=True)
        answers = proxy.answers("/completion")
    finally:
        loading.stop()
    assert answers and answers[-1].status == 503, [(a.request_line, a.status) for a in answers]
    assert b"Loading model" in answers[-1].body
    assert caught.value.status_code == 503
    assert caught.value.code == "engine_unavailable"  # type: ignore[attr-defined]
    assert caught.value.response.headers["content-type"].startswith("application/json")


def test_a_prompt_over_llama_servers_context_is_still_a_400_without_a_stream(
    pgw: Gateway, proxy: RecordingProxy, llama: EngineProcess, restore: None
) -> None:
    # A replica with a smaller context (512) than the one our server was started against (4096): our
    # budget check lets the prompt through and llama-server refuses it at its status line.
    proxy.switch(f"127.0.0.1:{llama.port}")
    with pytest.raises(openai.BadRequestError) as caught:
        pgw.client().responses.create(model=MODEL, input="Say hi zebra." + " word" * 1000, stream=True)
    answers = proxy.answers("/completion")
    assert answers and answers[-1].status == 400, [(a.request_line, a.status) for a in answers]
    assert caught.value.status_code == 400
    assert caught.value.code == "context_length_exceeded"  # type: ignore[attr-defined]
    assert caught.value.response.headers["content-type"].startswith("application/json")
