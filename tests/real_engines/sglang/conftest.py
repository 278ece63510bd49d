"""Fixtures of the SGLang tier: SGLang 0.5.23's own server (scripted scheduler) and our server in front of it.

Everything runs as it would for a user: SGLang's ``launch_server`` (its FastAPI server, tokenizer manager
and detokenizer process) from the venv ``scripts/engines/sglang`` made (``SGLANG_PYTHON``,
``SGLANG_MODEL``; ``scripts/test-engines sglang`` exports them), with ``scripted_scheduler.py`` as the
scheduler process; then ``harmony-responses serve --engine sglang:URL`` as a subprocess; then the
``openai`` client. Without ``SGLANG_PYTHON`` every test here skips (the unit suite does not start SGLang).

Three SGLang servers start at once and run for the whole session (two to three minutes to start on two
cores, most of it each server's processes loading the 200k-token tokenizer), all with ``--context-length 2048``
and ``--preferred-sampling-params`` that are not plain (temperature 0.7, top_p 0.8, top_k 20, min_p 0.05,
penalties), which SGLang applies to every field a ``/generate`` request leaves out: the default one
(cumulative ``output_ids``), one with ``--incremental-streaming-output`` and one with
``--skip-tokenizer-init`` (ids only, no ``/detokenize``). Our server is started right
after SGLang, while SGLang is still loading, with ``--engine-start-wait``: that is the
start-up-against-a-loading-engine case. What the
scripted scheduler writes is set per test with ``Script.say``, keyed on a word of the test's own input.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from harmony_responses.vocab import load_encoding

from ..gateway import EngineProcess, Gateway, start_engine, start_gateway, wait_http

HERE = Path(__file__).resolve().parent
SGLANG_PYTHON = os.environ.get("SGLANG_PYTHON")
SGLANG_MODEL = os.environ.get("SGLANG_MODEL")
SERVED_MODEL = "tiny-gpt-oss"
CONTEXT_LENGTH = 2048
# Not the API's meaning anywhere: what leaks into a request that leaves a field out.
PREFERRED_SAMPLING = {
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "frequency_penalty": 0.5,
    "presence_penalty": 0.5,
}
SGLANG_START_TIMEOUT = 280.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SGLANG_PYTHON and SGLANG_MODEL:
        return
    reason = "SGLang is not set up (SGLANG_PYTHON, SGLANG_MODEL): run scripts/test-engines sglang"
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(skip)


def harmony(text: str) -> list[int]:
    return load_encoding().encode(text, allowed_special="all")


class Script:
    """The scripted scheduler's rules file (see scripted_scheduler.py): what it writes for which prompt."""

    def __init__(self, path: Path, **settings: Any) -> None:
        self.path = path
        self.settings = settings
        self.rules: dict[str, dict[str, Any]] = {}
        self._write()

    def say(self, key: str, text: str | list[int], **options: Any) -> list[int]:
        """Write ``text`` (Harmony, special tokens allowed; or ids) for prompts whose latest key is ``key``.

        Options: ``per_step`` (ids per step), ``step_delay`` (seconds), ``logprob`` (the chosen id's).
        """
        ids = harmony(text) if isinstance(text, str) else list(text)
        self.rules[key] = {"key": key, "output": ids, **options}
        self._write()
        return ids

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**self.settings, "rules": list(self.rules.values())}))
        tmp.replace(self.path)  # re-read per request: never half written


@dataclass
class SGLang:
    """The SGLang server subprocess, its script and what its scheduler logged."""

    dir: Path
    script: Script
    process: EngineProcess | None = None
    health_at_gateway_start: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        assert self.process is not None
        return self.process.url

    @property
    def log_path(self) -> Path:
        return self.dir / "scheduler.jsonl"

    def events(self, kind: str | None = None, **match: Any) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        out = []
        for line in self.log_path.read_text().splitlines():
            event = json.loads(line)
            if (kind is None or event["event"] == kind) and all(event.get(k) == v for k, v in match.items()):
                out.append(event)
        return out

    def wait_event(self, kind: str, timeout: float = 10.0, **match: Any) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.events(kind, **match)
            if found:
                return found[-1]
            if time.monotonic() > deadline:
                raise AssertionError(f"no {kind} event matching {match} in {self.events()[-5:]}")
            time.sleep(0.05)

    def request_for(self, key: str) -> dict[str, Any]:
        return self.wait_event("request", key=key)


def _start_sglang(directory: Path, *extra: str) -> SGLang:
    script = Script(directory / "script.json", default=harmony("<|channel|>final<|message|>ok<|return|>"))
    sglang = SGLang(dir=directory, script=script)
    argv = [
        str(SGLANG_PYTHON),
        "-W",
        "ignore",
        str(HERE / "scripted_scheduler.py"),
        str(script.path),
        "--model-path",
        str(SGLANG_MODEL),
        "--served-model-name",
        SERVED_MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--device",
        "cpu",
        "--context-length",
        str(CONTEXT_LENGTH),
        "--preferred-sampling-params",
        json.dumps(PREFERRED_SAMPLING),
        *extra,
    ]
    env = {
        "HARMONY_SGLANG_LOG": str(sglang.log_path),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONWARNINGS": "ignore",
    }
    # health=None: return at once (our server starts while SGLang is still loading).
    sglang.process = start_engine(argv, health=None, env=env, log_dir=directory, name="sglang")
    return sglang


@pytest.fixture(scope="session")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SGLang]]:
    """The SGLang servers, started at once: the default one, ``--incremental-streaming-output`` and
    ``--skip-tokenizer-init``."""
    started: dict[str, SGLang] = {}
    try:
        started["cumulative"] = _start_sglang(tmp_path_factory.mktemp("sglang"))
        incremental = tmp_path_factory.mktemp("sglang-incremental")
        started["incremental"] = _start_sglang(incremental, "--incremental-streaming-output")
        started["ids_only"] = _start_sglang(tmp_path_factory.mktemp("sglang-ids-only"), "--skip-tokenizer-init")
        yield started
    finally:
        for sglang in started.values():
            assert sglang.process is not None
            sglang.process.stop(timeout=5.0)  # SGLang drains, then sleeps 5 s for crash diagnostics: no need


def _gateway(sglang: SGLang) -> Gateway:
    assert sglang.process is not None
    try:
        sglang.health_at_gateway_start = str(httpx.get(sglang.url + "/health", timeout=2.0).status_code)
    except httpx.HTTPError as exc:
        sglang.health_at_gateway_start = type(exc).__name__
    return start_gateway(
        f"sglang:{sglang.url}",
        args=["--engine-start-wait", str(SGLANG_START_TIMEOUT)],
        timeout=SGLANG_START_TIMEOUT + 20,
        log_dir=sglang.dir,
    )


@pytest.fixture(scope="session")
def stack(engines: dict[str, SGLang]) -> Iterator[tuple[SGLang, Gateway]]:
    """The default SGLang (cumulative ``output_ids``) and our server in front of it."""
    sglang = engines["cumulative"]
    gateway = _gateway(sglang)
    try:
        assert sglang.process is not None
        wait_http(sglang.url + "/health", timeout=60, process=sglang.process.process, log=sglang.process.log)
        yield sglang, gateway
    finally:
        gateway.stop()


@pytest.fixture(scope="session")
def incremental_stack(engines: dict[str, SGLang]) -> Iterator[tuple[SGLang, Gateway]]:
    """SGLang with ``--incremental-streaming-output`` (delta ``output_ids``) and our server in front of it."""
    sglang = engines["incremental"]
    gateway = _gateway(sglang)
    try:
        yield sglang, gateway
    finally:
        gateway.stop()


@pytest.fixture(scope="session")
def ids_only_stack(engines: dict[str, SGLang]) -> Iterator[tuple[SGLang, Gateway]]:
    """SGLang with ``--skip-tokenizer-init`` (no tokenizer: ids only) and our server in front of it."""
    sglang = engines["ids_only"]
    gateway = _gateway(sglang)
    try:
        yield sglang, gateway
    finally:
        gateway.stop()
