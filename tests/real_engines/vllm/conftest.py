"""Fixtures of the vLLM tier: vLLM 0.33's own server (scripted executor) and our server in front of it.

Everything runs as it would for a user: ``python -m vllm.entrypoints.openai.api_server`` from the venv
``scripts/engines/vllm`` made (``VLLM_PYTHON``, ``VLLM_MODEL``; ``scripts/test-engines vllm`` exports
them), then ``harmony-responses serve --engine vllm:URL`` as a subprocess, then the ``openai`` client.
Without ``VLLM_PYTHON`` every test here skips (the unit suite does not start vLLM).

Two vLLM servers start at once, in parallel, for the whole session (each takes about a minute on two
cores): ``completions`` (the default serve mode: ``/v1/completions``, prefix caching, prompt-token
details, ``--max-logprobs 5``, ``--max-model-len 4096``) and ``scale_out`` (``--enable-scale-out``:
``/inference/v1/generate`` and its abort route). What each one's scripted model writes is set per test
with ``Script.say`` (see scripted_executor.py), keyed on a word of the test's own input.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from harmony_responses.vocab import load_encoding

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Script:
    """The scripted model's rules file: what it writes for a prompt whose latest key is ``match``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rules: dict[str, dict[str, Any]] = {}
        self._write()

    def say(self, match: str, text: str, delay: float = 0.0) -> list[int]:
        ids = harmony(text)
        self.rules[match] = {"match": match, "ids": ids, "delay": delay}
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
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    script: Script | None = None
    ready: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "executor.jsonl"

    def start(self) -> None:
        self.port = free_port()
        self.script = Script(self.dir / "script.json")
        env = {
            **os.environ,
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
        cmd = [
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
            str(self.port),
            "--distributed-executor-backend",
            "scripted_executor.ScriptedExecutor",
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--enforce-eager",
            *self.args,
        ]
        with (self.dir / "server.log").open("wb") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.dir)

    def wait_ready(self, timeout: float = VLLM_START_TIMEOUT) -> None:
        if self.ready:
            return
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM ({self.name}) exited with {self.proc.returncode}:\n{self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    self.ready = True
                    return
            time.sleep(0.5)
        raise RuntimeError(f"vLLM ({self.name}) not ready in {timeout:g} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        path = self.dir / "server.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def events(self, match: str | None = None, event: str | None = None) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        out = [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]
        return [e for e in out if (match is None or e.get("match") == match) and (event is None or e["event"] == event)]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@dataclass
class Gateway:
    """``harmony-responses serve`` in front of an engine, and the openai client for it."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def client(self, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, timeout=120, **kwargs)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_gateway(engine_url: str, log: Path, *args: str, wait: bool = True, timeout: float = 60.0) -> Gateway:
    port = free_port()
    cmd = [
        str(Path(sys.executable).with_name("harmony-responses")),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--engine",
        f"vllm:{engine_url}",
        "--current-date",
        "2026-12-01",
        "--data-dir",
        str(log.parent),
        *args,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    gateway = Gateway(f"http://127.0.0.1:{port}", proc, log)
    if wait:
        wait_gateway(gateway, timeout)
    return gateway


def wait_gateway(gateway: Gateway, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gateway.proc.poll() is not None:
            raise RuntimeError(f"harmony-responses exited with {gateway.proc.returncode}:\n{gateway.output()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(gateway.url + "/v1/models", timeout=2).status_code < 500:
                return
        time.sleep(0.2)
    raise RuntimeError(f"harmony-responses not ready in {timeout:g} s:\n{gateway.output()}")


def stop_gateway(gateway: Gateway) -> None:
    if gateway.proc.poll() is None:
        gateway.proc.terminate()
        try:
            gateway.proc.wait(10)
        except subprocess.TimeoutExpired:
            gateway.proc.kill()
            gateway.proc.wait(10)


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
    with contextlib.suppress(httpx.HTTPError):
        server.ready = httpx.get(server.url + "/health", timeout=2).status_code == 200
    g = start_gateway(server.url, tmp_path_factory.mktemp("gw") / "serve.log", "--engine-start-wait", "300", wait=False)
    early = EarlyGateway(g, server.ready)
    yield early
    stop_gateway(g)


@pytest.fixture(scope="session")
def completions(vllm_servers: dict[str, VLLM]) -> VLLM:
    vllm_servers["completions"].wait_ready()
    return vllm_servers["completions"]


@pytest.fixture(scope="session")
def scale_out(vllm_servers: dict[str, VLLM]) -> VLLM:
    vllm_servers["scale_out"].wait_ready()
    return vllm_servers["scale_out"]


@pytest.fixture(scope="session")
def gateway(completions: VLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    g = start_gateway(completions.url, tmp_path_factory.mktemp("gw") / "serve.log")
    yield g
    stop_gateway(g)


@pytest.fixture(scope="session")
def gateway_generate(early_gateway: EarlyGateway, scale_out: VLLM) -> Gateway:
    # The gateway started while the engine loaded serves the generate endpoint's tests.
    wait_gateway(early_gateway.gateway, 60)
    return early_gateway.gateway
