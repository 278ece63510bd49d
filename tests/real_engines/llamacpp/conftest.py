"""Fixtures of the llama.cpp tier: a real ``llama-server`` with a scripted tiny gpt-oss GGUF, our server in front.

``scripts/engines/llamacpp`` builds and caches ``llama-server`` and llama.cpp's GGUF converter
(``scripts/test-engines llamacpp`` runs it and exports ``LLAMACPP_SERVER`` / ``LLAMACPP_CONVERT``). Without
``LLAMACPP_SERVER`` every test here skips, so the unit suite never builds or starts llama-server.

The model (``tiny_model.scripted_checkpoint``) writes, after ``<|start|>assistant``:

- with no marker in the prompt: the call ``get_weather({"city":"Paris"})`` (``CALL``);
- `` zebra`` in the prompt: ``ANSWER``, an emoji and CJK whose UTF-8 bytes are cut across tokens (llama.cpp
  leaves those ids out of its stream: issue 12 item 6), with a known runner-up for `` ok``;
- `` sunny`` (the tool's output): ``AFTER_TOOL``;
- `` kiwi``: `` la`` forever (budget cuts, a full context, disconnects);
- `` lemon``: a final answer ending with ``<|endoftext|>`` instead of ``<|return|>``.

One llama-server (``-c 512``; one slot, so that prefix caching is deterministic; one thread: llama.cpp's
threads spin, and two of them on two busy cores crawl) and one ``harmony-responses serve`` serve the whole
module; tests that need their own start them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..gateway import EngineProcess, Gateway, start_engine, start_gateway
from ..tiny_model import Chain, harmony_ids, random_checkpoint, scripted_checkpoint, to_gguf

HERE = Path(__file__).resolve().parent
N_CTX = 512
CALL = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>'
ANSWER_TEXT = "Hi 🚀 ok，世界 鱻"
ANSWER = f"<|channel|>final<|message|>{ANSWER_TEXT}<|return|>"
AFTER_TOOL_TEXT = "Sunny in Paris."
AFTER_TOOL = f"<|channel|>final<|message|>{AFTER_TOOL_TEXT}<|return|>"
LOOP = "<|channel|>final<|message|>La la"
EOT_TEXT = "Bye"
EOT = f"<|channel|>final<|message|>{EOT_TEXT}<|endoftext|>"
# The runner-up after " 🚀" (id 222): " OK", 10 logits below " ok" (position 6 of [assistant, *ANSWER]).
RUNNER_UP = harmony_ids(" OK")[0]
RUNNER_UP_GAP = 10.0
CHAINS = (
    Chain(CALL),
    Chain(ANSWER, marker=" zebra", alternatives=((6, RUNNER_UP, RUNNER_UP_GAP),)),
    Chain(AFTER_TOOL, marker=" sunny"),
    Chain(LOOP, marker=" kiwi", loop=True),
    Chain(EOT, marker=" lemon"),
)
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


# Set by scripts/test-engines (from scripts/engines/llamacpp): the unit suite leaves this tier alone.
SERVER = Path(os.environ["LLAMACPP_SERVER"]) if os.environ.get("LLAMACPP_SERVER") else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SERVER is not None and SERVER.exists():
        return
    skip = pytest.mark.skip(reason="llama.cpp is not set up (LLAMACPP_SERVER): run scripts/test-engines llamacpp")
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(skip)


def llama_server_argv(model: Path | None, *extra: str, ctx: int = N_CTX) -> list[str]:
    argv = [str(SERVER), "--host", "127.0.0.1", "--port", "{port}", "-c", str(ctx), "-np", "1", "-t", "1"]
    argv += ["--no-webui", "--log-colors", "off"]
    if model is not None:
        argv += ["-m", str(model)]
    return argv + list(extra)


@pytest.fixture(scope="session")
def scripted_gguf() -> Path:
    return to_gguf(scripted_checkpoint(CHAINS))


@pytest.fixture(scope="session")
def random_gguf() -> Path:
    return to_gguf(random_checkpoint())


@pytest.fixture(scope="module")
def llama(scripted_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    engine = start_engine(
        llama_server_argv(scripted_gguf), timeout=120, log_dir=tmp_path_factory.mktemp("llama"), name="llama-server"
    )
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def gw(llama: EngineProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start_gateway(f"llamacpp:{llama.url}", record=True, log_dir=tmp_path_factory.mktemp("serve"))
    yield gateway
    gateway.stop()


def slot(engine: EngineProcess) -> dict[str, object]:
    """llama-server's one slot, as ``GET /slots`` shows it (the last task's parameters and counts)."""
    slots = httpx.get(engine.url + "/slots", timeout=10).json()
    return slots[0]  # type: ignore[no-any-return]
