"""``serve --config FILE``: every option from a TOML file; flags and environment variables win over it."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from harmony_responses.cli import build_parser
from harmony_responses.serve.cli import add_serve_arguments, config_from_args, serve
from harmony_responses.serve.options import OPTIONS

BIN = Path(sys.executable).parent / "harmony-responses"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HARMONY_RESPONSES_"):
            monkeypatch.delenv(name)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(argv)


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "serve.toml"
    path.write_text(text)
    return str(path)


FILE = """
host = "0.0.0.0"
port = 9001
workers = 3
model = ["a", "b"]
api-key = "from-file"
engine = "replay:/x.jsonl"
engine-url = "http://127.0.0.1:8001"
shutdown-grace = 2.5
retention = "7d"
log-level = "DEBUG"
unsafe-code-interpreter = true
reasoning-summaries = "none"
"""


def test_the_file_sets_what_nothing_else_does(tmp_path: Path) -> None:
    config = config_from_args(_parse(["--config", _file(tmp_path, FILE)]))
    assert (config.host, config.port, config.workers, config.models) == ("0.0.0.0", 9001, 3, ("a", "b"))
    assert config.api_keys == ("from-file",) and config.engine == "replay:/x.jsonl"
    assert config.engine_url == "http://127.0.0.1:8001" and config.shutdown_grace == 2.5
    assert config.retention == 7 * 86400 and config.log_level == "debug"  # the flags' own type functions
    assert config.unsafe_code_interpreter is True and config.reasoning_summaries == "none"


def test_flags_win_over_the_environment_which_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(tmp_path, FILE)
    monkeypatch.setenv("HARMONY_RESPONSES_HOST", "127.0.0.2")
    monkeypatch.setenv("HARMONY_RESPONSES_MODEL", "env-model")
    monkeypatch.setenv("HARMONY_RESPONSES_UNSAFE_CODE_INTERPRETER", "0")
    config = config_from_args(_parse(["--config", path, "--port", "1234", "--api-key", "flag-key"]))
    assert (config.host, config.models) == ("127.0.0.2", ("env-model",))  # environment over file
    assert config.unsafe_code_interpreter is False  # a switch turned off in the environment
    assert (config.port, config.api_keys) == (1234, ("flag-key",))  # flags over file
    assert config.workers == 3 and config.shutdown_grace == 2.5  # the rest still from the file
    # A flag given with the default's value still wins over the file.
    assert config_from_args(_parse(["--config", path, "--port", "8400"])).port == 8400
    # The file's own variable.
    monkeypatch.setenv("HARMONY_RESPONSES_CONFIG", path)
    assert config_from_args(_parse([])).workers == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('engine_url = "http://x"', "unknown key 'engine_url' (did you mean 'engine-url'?)"),
        ("shutdown-grase = 3", "unknown key 'shutdown-grase' (did you mean 'shutdown-grace'?)"),
        ("port = 70000", "port: expected a port number 0..65535, got 70000"),
        ("workers = 0", "workers: expected a positive whole number, got 0"),
        ('retention = "soon"', "retention:"),
        ('log-level = "loud"', "log-level: invalid choice 'loud'"),
        ('unsafe-code-interpreter = "yes"', "unsafe-code-interpreter: expected true or false, got 'yes'"),
        ('port = "80"\nhost = ["a"]', "host: expected a string or a number, got ['a']"),
        ("model = [1]", "model: expected an array of strings, got [1]"),
        ("port = 80\nport = 81", "not valid TOML"),
        ('config = "other.toml"', "unknown key 'config'"),
    ],
)
def test_bad_files_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = _file(tmp_path, text)
    assert serve(_parse(["--config", path])) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"harmony-responses serve: config file {path}: ") and message in err, err


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(BIN), "serve", "--config", str(tmp_path / "none.toml")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert f"config file {tmp_path / 'none.toml'}: No such file or directory" in result.stderr


def test_every_option_has_a_key() -> None:
    from harmony_responses.serve.config_file import BY_KEY

    assert sorted(BY_KEY) == sorted(option.flag[2:] for option in OPTIONS if option.flag != "--config")


def test_help_mentions_config_and_workers() -> None:
    parser = build_parser()
    serve_parser = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    text = " ".join(serve_parser.format_help().split())
    assert "--config PATH" in text and "HARMONY_RESPONSES_CONFIG" in text
    assert "--workers N" in text and "HARMONY_RESPONSES_WORKERS" in text


def test_a_server_from_a_file_keeps_its_keys_out_of_ps(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        f'port = 0\nworkers = 2\nmodel = ["m"]\napi-key = ["s3cret-key"]\nstore = "sqlite:{tmp_path / "s.sqlite3"}"\n'
        'log-level = "warning"\n',
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_RESPONSES_")}
    process = subprocess.Popen([str(BIN), "serve", "--config", path], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(6)]
        assert "bearer token required" in lines[3] and lines[5].startswith("  workers: 2"), lines
        base = lines[0].split("listening on ")[1].strip()
        body = {"model": "m", "input": "ping"}
        assert httpx.post(f"{base}/responses", json=body, timeout=10).status_code == 401
        reply = httpx.post(f"{base}/responses", json=body, headers={"Authorization": "Bearer s3cret-key"}, timeout=10)
        assert reply.status_code == 200, reply.text
        # Neither the parent's nor a worker's command line shows the key.
        pids = [process.pid, *map(int, Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split())]
        assert len(pids) >= 3
        for pid in pids:
            assert b"s3cret" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    finally:
        process.terminate()
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()


def test_the_file_binds_models_to_engines_and_replicas(tmp_path: Path) -> None:
    text = 'engine = ["gpt-oss-120b=vllm:http://a:8000", "gpt-oss-120b=vllm:http://b:8000", "gpt-oss-20b=llamacpp"]\n'
    config = config_from_args(_parse(["--config", _file(tmp_path, text)]))
    assert config.engine is None and config.served_models == ("gpt-oss-120b", "gpt-oss-20b")
    assert config.engine_specs("gpt-oss-120b") == ("vllm:http://a:8000", "vllm:http://b:8000")
    assert config.engine_specs("gpt-oss-20b") == ("llamacpp",)
