"""``harmony-responses serve``: options and their environment twins, the banner, and a real start."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from openai import OpenAI

from harmony_responses.cli import build_parser
from harmony_responses.engine import engine_from_spec
from harmony_responses.serve.cli import add_serve_arguments, banner, config_from_args, serve
from harmony_responses.serve.config import DEFAULT_MODELS


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(argv)


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HARMONY_RESPONSES_"):
            monkeypatch.delenv(name)
    config = config_from_args(_parse([]))
    assert (config.host, config.port, config.engine, config.api_keys) == ("127.0.0.1", 8400, "echo", ())
    assert config.models == DEFAULT_MODELS and config.log_level == "info"
    assert config.current_date is None and config.secret_key is None


def test_default_port_is_no_engine_s_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server and its engine on one machine, each started on its default port, must not collide (vLLM's
    # and trtllm-serve's 8000 was once ours too). Besides our engines': TGI/TEI's 3000, LM Studio's 1234,
    # Ollama's 11434, Triton's 8001/8002.
    monkeypatch.delenv("HARMONY_RESPONSES_PORT", raising=False)
    engine_ports = {urlsplit(engine_from_spec(spec).url).port for spec in ("vllm", "sglang", "llamacpp", "trtllm")}
    assert engine_ports == {8000, 30000, 8080}
    assert config_from_args(_parse([])).port not in engine_ports | {3000, 1234, 11434, 8001, 8002}


def test_flags_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARMONY_RESPONSES_HOST", "0.0.0.0")
    monkeypatch.setenv("HARMONY_RESPONSES_PORT", "9000")
    monkeypatch.setenv("HARMONY_RESPONSES_MODEL", "a, b")
    monkeypatch.setenv("HARMONY_RESPONSES_API_KEY", "k1,k2")
    monkeypatch.setenv("HARMONY_RESPONSES_ENGINE", "replay:/x.jsonl")
    monkeypatch.setenv("HARMONY_RESPONSES_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("HARMONY_RESPONSES_CONTEXT_WINDOW", "4096")
    from_env = config_from_args(_parse([]))
    assert (from_env.host, from_env.port, from_env.models, from_env.api_keys) == (
        "0.0.0.0",
        9000,
        ("a", "b"),
        ("k1", "k2"),
    )
    assert (from_env.engine, from_env.log_level, from_env.context_window) == ("replay:/x.jsonl", "debug", 4096)
    from_flags = config_from_args(
        _parse(["--port", "1234", "--model", "m1", "--model", "m2", "--api-key", "z", "--engine", "echo"])
    )
    assert (from_flags.port, from_flags.models, from_flags.api_keys, from_flags.engine) == (
        1234,
        ("m1", "m2"),
        ("z",),
        "echo",
    )
    assert "z" not in repr(from_flags)  # keys stay out of logs


def test_bad_values_are_usage_errors(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse(["--port", "70000"])
    monkeypatch.setenv("HARMONY_RESPONSES_PORT", "nope")
    with pytest.raises(SystemExit):
        _parse([])
    monkeypatch.delenv("HARMONY_RESPONSES_PORT")
    assert serve(_parse(["--engine", "gpt-5"])) == 2
    assert "unknown engine 'gpt-5'" in capsys.readouterr().err


def test_banner() -> None:
    config = config_from_args(_parse(["--model", "gpt-oss-20b", "--api-key", "k"]))
    text = banner(config, "echo: a stand-in", "127.0.0.1", 8123)
    assert "http://127.0.0.1:8123/v1" in text and "echo: a stand-in" in text
    assert "gpt-oss-20b" in text and "bearer token required" in text
    # Last: how this installation makes its output (the compiled steps, or pure Python and why).
    assert text.splitlines()[-1].startswith("  output: text tokens taken ")


def test_serve_starts_and_says_where(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "harmony-responses"
    command = [str(exe), "serve", "--port", "0", "--model", "gpt-oss-20b", "--log-level", "warning"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_RESPONSES_")}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(4)]
        assert lines[0].startswith("harmony-responses: listening on http://127.0.0.1:"), lines
        assert "it is not a language model" in lines[1]  # the echo stand-in says what it is
        assert "gpt-oss-20b" in lines[2]
        base = lines[0].split("listening on ")[1].strip()
        deadline = time.monotonic() + 10
        while True:
            try:
                reply = httpx.post(f"{base}/responses", json={"model": "gpt-oss-20b", "input": "ping"}, timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert reply.json()["output"][-1]["content"][0]["text"] == "You said: ping"
        # WebSocket upgrades get through the server's own HTTP protocol class (openai's responses.connect()).
        with OpenAI(base_url=base, api_key="unused", max_retries=0) as client:
            with client.responses.connect() as connection:
                connection.response.create(model="gpt-oss-20b", input="ping", store=False)
                for event in connection:
                    if event.type == "response.completed":
                        assert event.response.output_text == "You said: ping"
                        break
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def test_top_level_parser_has_serve() -> None:
    args = build_parser().parse_args(["serve", "--port", "0"])
    assert args.handler is serve
