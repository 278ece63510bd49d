"""Fixtures of the vLLM tier: vLLM 0.33's own server (scripted executor) and our server in front of it.

Everything runs as it would for a user: ``python -m vllm.entrypoints.openai.api_server`` from the venv
``scripts/engines/vllm`` made (``VLLM_PYTHON``, ``VLLM_MODEL``; ``scripts/test-engines vllm`` exports
them), then ``harmony-responses serve --engine vllm:URL`` as a subprocess, then the ``openai`` client.
Without ``VLLM_PYTHON`` every test here skips (the unit suite does not start vLLM).

Three vLLM servers start at once, in parallel, for the whole session (each takes about a minute on two
cores): ``completions`` (the default serve mode: ``/v1/completions``, prefix caching, prompt-token
details, ``--max-logprobs 5``, ``--max-model-len 4096``), ``scale_out`` (``--enable-scale-out``:
``/inference/v1/generate`` and its abort route) and ``tokens_only`` (``--tokens-only``: generate without
a tokenizer in the server). What each one's scripted model writes is set per test
with ``Script.say`` (see scripted_executor.py), keyed on a word of the test's own input.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from harmony_responses.vocab import load_encoding

from ..gateway import EngineProcess, Gateway, start_engine, start_gateway, wait_http

HERE = Path(__file__).resolve().parent
VLLM_PYTHON = os.environ.get("VLLM_PYTHON")
VLLM_MODEL = os.environ.get("VLLM_MODEL")
SERVED_MODEL = "tiny-gpt-oss"
MAX_MODEL_LEN = 4096
MAX_LOGPROBS = 5
VLLM_START_TIMEOUT = 300.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if VLLM_PYTHON and VLLM_MODEL:
        return
    skip = pytest.mark.skip(reason="vLLM is not set up (VLLM_PYTHON, VLLM_MODEL): run scripts/test-engines vllm")
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(skip)


def harmony(text: str) -> list[int]:
    return load_encoding().encode(text, allowed_special="all")


class Script:
    """The scripted model's rules file: what it writes for a prompt whose latest key is ``match``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rules: dict[str, dict[str, Any]] = {}
        self._write()

    def say(self, match: str, text: str, delay: float = 0.0, hold: Path | None = None) -> list[int]:
        """``hold``: while this file exists the request stays running before its last id (scripted_executor.py)."""
        ids = harmony(text)
        self.rules[match] = {"match": match, "ids": ids, "delay": delay, "hold": str(hold) if hold else None}
        self._write()
        return ids

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rules": list(self.rules.values())}))
        tmp.replace(self.path)  # the executor re-reads it per request: never half written


@dataclass
class VLLM:
    """One vLLM server subprocess and what its scripted executor logs."""

    name: str
    args: list[str]
    dir: Path
    env: dict[str, str] = field(default_factory=dict)
    process: EngineProcess | None = None
    script: Script | None = None
    ready: bool = False

    @property
    def url(self) -> str:
        assert self.process is not None
        return self.process.url

    @property
    def log_path(self) -> Path:
        return self.dir / "executor.jsonl"

    def start(self) -> None:
        self.script = Script(self.dir / "script.json")
        env = {
            "VLLM_TARGET_DEVICE": "cpu",  # vLLM's CPU platform: the CUDA wheel without a GPU
            "PYTHONPATH": str(HERE),  # scripted_executor, for --distributed-executor-backend
            "HARMONY_VLLM_SCRIPT": str(self.script.path),
            "HARMONY_VLLM_LOG": str(self.log_path),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            **self.env,
        }
        argv = [
            str(VLLM_PYTHON),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(VLLM_MODEL),
            "--served-model-name",
            SERVED_MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--distributed-executor-backend",
            "scripted_executor.ScriptedExecutor",
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--enforce-eager",
            *self.args,
        ]
        # health=None: both servers load at once, and a gateway is started against one while it loads.
        self.process = start_engine(argv, health=None, env=env, cwd=self.dir, log_dir=self.dir, name="vllm")

    def is_ready(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            self.ready = self.ready or httpx.get(self.url + "/health", timeout=2).status_code == 200
        return self.ready

    def wait_ready(self, timeout: float = VLLM_START_TIMEOUT) -> None:
        if not self.ready:
            assert self.process is not None
            wait_http(self.url + "/health", timeout=timeout, process=self.process.process, log=self.process.log)
            self.ready = True

    def events(self, match: str | None = None, event: str | None = None) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        out = [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]
        return [e for e in out if (match is None or e.get("match") == match) and (event is None or e["event"] == event)]

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(30.0)


@pytest.fixture(scope="session")
def vllm_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, VLLM]]:
    base = tmp_path_factory.mktemp("vllm")
    servers = {
        "completions": VLLM(
            "completions",
            ["--enable-prefix-caching", "--enable-prompt-tokens-details", "--max-logprobs", str(MAX_LOGPROBS)],
            base / "completions",
        ),
        "scale_out": VLLM(
            "scale_out",
            ["--enable-scale-out", "--enable-prompt-tokens-details", "--max-logprobs", str(MAX_LOGPROBS)],
            base / "scale_out",
        ),
        # No tokenizer in the server (/detokenize answers 400), generate and the legacy /abort_requests.
        "tokens_only": VLLM("tokens_only", ["--tokens-only"], base / "tokens_only"),
    }
    for server in servers.values():
        server.dir.mkdir()
        server.start()
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@dataclass
class EarlyGateway:
    """Our server started while vLLM was still loading (``--engine-start-wait``)."""

    gateway: Gateway
    engine_was_ready: bool


# autouse: set up with the vLLM servers, before the first test, so that it starts while vLLM loads.
@pytest.fixture(scope="session", autouse=True)
def early_gateway(vllm_servers: dict[str, VLLM], tmp_path_factory: pytest.TempPathFactory) -> Iterator[EarlyGateway]:
    server = vllm_servers["scale_out"]
    was_ready = server.is_ready()
    g = start_gateway(
        f"vllm:{server.url}",
        args=["--engine-start-wait", str(int(VLLM_START_TIMEOUT)), "--current-date", "2026-12-01"],
        timeout=VLLM_START_TIMEOUT + 30,
        log_dir=tmp_path_factory.mktemp("gw"),
    )
    yield EarlyGateway(g, was_ready)
    g.stop()


@pytest.fixture(scope="session")
def completions(vllm_servers: dict[str, VLLM]) -> VLLM:
    vllm_servers["completions"].wait_ready()
    return vllm_servers["completions"]


@pytest.fixture(scope="session")
def scale_out(vllm_servers: dict[str, VLLM]) -> VLLM:
    vllm_servers["scale_out"].wait_ready()
    return vllm_servers["scale_out"]


@pytest.fixture(scope="session")
def tokens_only(vllm_servers: dict[str, VLLM]) -> VLLM:
    vllm_servers["tokens_only"].wait_ready()
    return vllm_servers["tokens_only"]


def gateway_with(engine: VLLM, tmp: pytest.TempPathFactory, *args: str) -> Gateway:
    """Our server in front of ``engine``, with the tier's date and ``args``."""
    return start_gateway(f"vllm:{engine.url}", args=["--current-date", "2026-12-01", *args], log_dir=tmp.mktemp("gw"))


@pytest.fixture(scope="session")
def gateway(completions: VLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    g = gateway_with(completions, tmp_path_factory)
    yield g
    g.stop()


@pytest.fixture(scope="session")
def gateway_generate(early_gateway: EarlyGateway, scale_out: VLLM) -> Gateway:
    # The gateway started while its engine loaded serves the generate endpoint's tests.
    return early_gateway.gateway
