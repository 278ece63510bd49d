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

from harmony_responses.engine import EngineOptions, ReplicaSet
from harmony_responses.serve.cli import add_serve_arguments, config_from_args, serve
from harmony_responses.serve.engines import build_engines

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


def _serve(*args: str, level: str = "warning") -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "harmony-responses"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_RESPONSES_")}
    command = [str(exe), "serve", "--port", "0", "--log-level", level, *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def test_serve_says_clearly_when_the_engine_cannot_serve() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _serve("--engine", f"vllm:http://127.0.0.1:{port}", "--engine-connect-timeout", "1", level="info")
    assert done.returncode == 1
    # One line says what was tried, what failed and what to do; nothing else is an error (issue 23 #6: a
    # 75-line traceback sat between two one-line messages).
    (said,) = [line for line in done.stderr.splitlines() if not line.startswith("INFO:")]
    assert said == (
        f"harmony-responses serve: the engine cannot serve: vllm at http://127.0.0.1:{port}: cannot connect "
        f"([Errno {errno.ECONNREFUSED}] Connect call failed ('127.0.0.1', {port})); start the engine or correct "
        "--engine (without --engine the server uses its echo stand-in)"
    )
    debug = _serve("--engine", f"vllm:http://127.0.0.1:{port}", "--engine-connect-timeout", "1", level="debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "ConnectionRefusedError" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == said
    with run_fake(VLLMFake(detokenize_ok=False)) as fake:
        done = _serve("--engine", "vllm", "--engine-url", fake.url)
    assert done.returncode == 1
    assert "the model's tokenizer is not Harmony's" in done.stderr.strip().splitlines()[-1]


def test_serve_says_in_one_line_when_the_store_cannot_be_used(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    done = _serve("--store", f"sqlite:{tmp_path / 'a-file' / 'store.sqlite3'}", level="info")
    assert done.returncode == 1
    (said,) = [line for line in done.stderr.splitlines() if not line.startswith("INFO:")]
    assert said.startswith("harmony-responses serve: the store cannot be used: ") and "a-file" in said, said
    assert said.endswith("check --store (and --data-dir), or see --log-level debug")


def test_serve_rejects_bad_engine_specs() -> None:
    done = _serve("--engine", "vllm:gpu:8000")
    assert done.returncode == 2 and "'gpu:8000' is not an http:// or https:// URL" in done.stderr


def test_engine_names_bind_models_and_repeated_names_are_replicas() -> None:
    config = config_from_args(
        _parse(
            [
                "--engine",
                "gpt-oss-120b=vllm:http://a:8000",
                "--engine",
                "gpt-oss-120b=vllm:http://b:8000",
                "--engine",
                "gpt-oss-20b=sglang:http://c:30000",
            ]
        )
    )
    # No plain --engine and no --model: only the bound names are served.
    assert config.engine is None and config.served_models == ("gpt-oss-120b", "gpt-oss-20b")
    assert config.engine_specs("gpt-oss-120b") == ("vllm:http://a:8000", "vllm:http://b:8000")
    engines = build_engines(config)
    big, small = engines["gpt-oss-120b"], engines["gpt-oss-20b"]
    assert isinstance(big, ReplicaSet) and [e.url for e in big.engines] == ["http://a:8000", "http://b:8000"]  # type: ignore[attr-defined]
    assert isinstance(small, ReplicaSet) and [e.url for e in small.engines] == ["http://c:30000"]  # type: ignore[attr-defined]


def test_a_plain_engine_serves_every_model_not_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # As before: one engine serving every --model.
    config = config_from_args(
        _parse(["--engine", "vllm", "--engine-url", "http://gpu:8000", "--model", "a", "--model", "b"])
    )
    assert (config.engine, config.models, config.served_models) == ("vllm", ("a", "b"), ("a", "b"))
    engines = build_engines(config)
    assert engines["a"] is engines["b"] and engines["a"].engines[0].url == "http://gpu:8000"  # type: ignore[attr-defined]
    # A "=" inside a spec is not a binding; a bound name is served besides --model.
    config = config_from_args(_parse(["--engine", "replay:/runs/a=b.jsonl", "--engine", "small=echo", "--model", "a"]))
    assert (config.engine, config.served_models, config.engine_specs("small")) == (
        "replay:/runs/a=b.jsonl",
        ("a", "small"),
        ("echo",),
    )
    # The environment twin is comma-separated.
    monkeypatch.setenv("HARMONY_RESPONSES_ENGINE", "m=vllm:http://a:1, m=vllm:http://b:1,llamacpp")
    config = config_from_args(_parse([]))
    assert config.engine == "llamacpp" and config.engine_specs("m") == ("vllm:http://a:1", "vllm:http://b:1")
    assert config.served_models == ("gpt-oss-120b", "gpt-oss-20b", "m")  # the plain engine serves the defaults


def test_engine_bindings_that_leave_a_model_without_engine_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert serve(_parse(["--engine", "big=echo", "--model", "other"])) == 2
    assert "no engine serves other" in capsys.readouterr().err
    assert serve(_parse(["--engine", "vllm:http://a:1", "--engine", "vllm:http://b:1"])) == 2
    assert "name them: --engine MODEL=SPEC" in capsys.readouterr().err
