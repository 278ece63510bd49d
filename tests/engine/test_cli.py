"""The engine options of ``harmony-responses serve``: flags, environment twins, and a start that fails clearly."""

from __future__ import annotations

import argparse
import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harmony_responses.engine import EngineOptions
from harmony_responses.serve.cli import add_serve_arguments, config_from_args

from .fakes import VLLMFake, run_fake


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HARMONY_RESPONSES_"):
            monkeypatch.delenv(name)


def test_engine_flags() -> None:
    config = config_from_args(
        _parse(
            [
                "--engine",
                "vllm",
                "--engine-url",
                "http://gpu:8000",
                "--engine-model",
                "openai/gpt-oss-120b",
                "--engine-api-key",
                "sk-engine",
                "--engine-connect-timeout",
                "2",
                "--engine-first-token-timeout",
                "30.5",
                "--engine-stall-timeout",
                "7",
                "--engine-max-connections",
                "32",
                "--engine-start-wait",
                "60",
                "--record",
                "/tmp/calls.jsonl",
            ]
        )
    )
    assert config.engine == "vllm"
    assert config.engine_options == EngineOptions(
        url="http://gpu:8000",
        model="openai/gpt-oss-120b",
        api_key="sk-engine",
        connect_timeout=2.0,
        first_token_timeout=30.5,
        stall_timeout=7.0,
        max_connections=32,
        start_wait=60.0,
        record="/tmp/calls.jsonl",
    )
    assert "sk-engine" not in repr(config) and "sk-engine" not in repr(config.engine_options)


def test_engine_defaults_and_environment_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config_from_args(_parse([])).engine_options == EngineOptions()
    monkeypatch.setenv("HARMONY_RESPONSES_ENGINE", "sglang")
    monkeypatch.setenv("HARMONY_RESPONSES_ENGINE_URL", "http://box:30000")
    monkeypatch.setenv("HARMONY_RESPONSES_ENGINE_STALL_TIMEOUT", "9")
    monkeypatch.setenv("HARMONY_RESPONSES_RECORD", "r.jsonl")
    config = config_from_args(_parse(["--engine-stall-timeout", "3"]))  # the flag wins
    assert (config.engine, config.engine_url, config.engine_stall_timeout, config.record) == (
        "sglang",
        "http://box:30000",
        3.0,
        "r.jsonl",
    )


@pytest.mark.parametrize("flag", ["--engine-stall-timeout", "--engine-first-token-timeout", "--engine-connect-timeout"])
@pytest.mark.parametrize("value", ["0", "-1", "inf", "soon"])
def test_engine_timeouts_must_be_positive(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse([flag, value])
    assert flag in capsys.readouterr().err


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "harmony-responses"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_RESPONSES_")}
    command = [str(exe), "serve", "--port", "0", "--log-level", "warning", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def test_serve_says_clearly_when_the_engine_cannot_serve() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _serve("--engine", f"vllm:http://127.0.0.1:{port}", "--engine-connect-timeout", "1")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"harmony-responses serve: the engine cannot serve: vllm at http://127.0.0.1:{port}: cannot connect "
        f"([Errno {errno.ECONNREFUSED}] Connect call failed ('127.0.0.1', {port}))"
    )
    with run_fake(VLLMFake(detokenize_ok=False)) as fake:
        done = _serve("--engine", "vllm", "--engine-url", fake.url)
    assert done.returncode == 1
    assert "the model's tokenizer is not Harmony's" in done.stderr.strip().splitlines()[-1]


def test_serve_rejects_bad_engine_specs() -> None:
    done = _serve("--engine", "vllm:gpu:8000")
    assert done.returncode == 2 and "'gpu:8000' is not an http:// or https:// URL" in done.stderr
