"""scripts/test, the test command CI runs: every stage runs even when one fails, and a table says how each went.

The real script runs in a copy of the checkout's layout whose stages are stubs (an install, a PostgreSQL, a
pytest, ruff and the real-engine tier that only say what they were asked and answer as told), so the runner's
logic is checked in a second instead of a whole suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _stub(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/usr/bin/env bash\necho "$(basename "$0") $*" >> "$CALLS"\n{body}\n')
    path.chmod(0o755)


def _checkout(tmp_path: Path, *, install: int = 0, pytest: int = 1) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test", repo / "scripts" / "test")
    _stub(repo / "scripts" / "install", f"exit {install}")
    _stub(repo / "scripts" / "postgres", "echo postgresql://stub/db")
    _stub(
        repo / ".venv" / "bin" / "python",
        'echo "url=$HARMONY_TEST_POSTGRES_URL" >> "$CALLS"\n'
        'echo "F.s."\necho "1 failed, 2 passed, 1 skipped in 0.05s"\n'
        f"exit {pytest}",
    )
    _stub(repo / ".venv" / "bin" / "ruff", "exit 0")
    _stub(repo / "scripts" / "test-engines", 'echo "============ 3 passed, 1 error in 1.00s ============"\nexit 0')
    return repo


def _run(repo: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    calls = repo / "calls"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_")}
    environ.update(CALLS=str(calls), **env)
    run = subprocess.run(
        [str(repo / "scripts" / "test"), *args], env=environ, capture_output=True, text=True, timeout=60
    )
    return run, calls.read_text().splitlines() if calls.exists() else []


def _row(stdout: str, stage: str) -> list[str]:
    (line,) = [line for line in stdout.splitlines() if line.startswith(stage + "  ")]
    return line[len(stage) :].split()


def test_a_failing_unit_suite_still_runs_ruff_and_the_engines_then_fails_the_run(tmp_path: Path) -> None:
    repo = _checkout(tmp_path, pytest=1)
    run, calls = _run(repo)
    assert run.returncode == 1, run.stdout + run.stderr
    assert [call.split()[0] for call in calls] == [
        "install", "postgres", "python", "url=postgresql://stub/db", "ruff", "ruff", "test-engines"
    ]  # fmt: skip
    assert "ruff check src tests bench scripts" in calls
    assert "ruff format --check src tests bench scripts" in calls
    # pytest's own closing line stays in the output (CI reads it), and the table sums it up.
    assert "1 failed, 2 passed, 1 skipped in 0.05s" in run.stdout
    assert _row(run.stdout, "unit suite")[:3] == ["2", "1", "1"]
    assert _row(run.stdout, "unit suite")[-1] == "FAILED"
    assert _row(run.stdout, "ruff check")[-1] == "ok"
    assert _row(run.stdout, "ruff format")[-1] == "ok"
    assert _row(run.stdout, "real engines")[:3] == ["3", "1", "0"]
    assert run.stdout.rstrip().endswith("scripts/test: FAILED: unit suite")


def test_every_stage_passing_exits_zero(tmp_path: Path) -> None:
    run, _ = _run(_checkout(tmp_path, pytest=0))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "scripts/test: every stage passed" in run.stdout


def test_pytest_arguments_or_no_engines_leave_the_engine_tier_out(tmp_path: Path) -> None:
    repo = _checkout(tmp_path, pytest=0)
    run, calls = _run(repo, "-k", "something")
    assert "python -m pytest -q -n auto --maxprocesses 4 --dist loadfile -k something" in calls
    assert not any(call.startswith("test-engines") for call in calls)
    assert " ".join(_row(run.stdout, "real engines")[-4:]) == "skipped (pytest arguments given)"
    run, calls = _run(_checkout(tmp_path / "2", pytest=0), HARMONY_ENGINES="none")
    assert not any(call.startswith("test-engines") for call in calls)
    assert run.returncode == 0


def test_a_failed_install_stops_the_run_and_says_why(tmp_path: Path) -> None:
    run, calls = _run(_checkout(tmp_path, install=1))
    assert run.returncode == 1
    assert calls == ["install "]
    assert "the install failed, so nothing else can run" in run.stderr
    assert _row(run.stdout, "install")[-1] == "FAILED"


def test_scripts_serve_resolves_relative_paths_against_the_callers_directory(tmp_path: Path) -> None:
    """``scripts/serve --engine replay:./x.jsonl --config ./serve.toml`` from another folder serves that script
    with that config (issue 23 #9: it changed to the repo folder first, and the paths could not be read)."""
    import json
    import socket
    import time

    import httpx

    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "serve", repo / "scripts" / "serve")
    _stub(repo / "scripts" / "install", "exit 0")  # the checkout's venv is set up already
    real = ROOT / ".venv" / "bin" / "harmony-responses"
    _stub(repo / ".venv" / "bin" / "harmony-responses", f'exec "{real}" "$@"')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.jsonl").write_text(json.dumps({"harmony": "<|channel|>final<|message|>from x.jsonl<|return|>"}))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (elsewhere / "serve.toml").write_text(f"port = {port}\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_")}
    environ.update(CALLS=str(tmp_path / "calls"), HARMONY_RESPONSES_DATA_DIR=str(tmp_path / "data"))
    args = ["--engine", "replay:./x.jsonl", "--config", "./serve.toml", "--store", "sqlite:./store.sqlite3"]
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            ["../repo/scripts/serve", *args], cwd=elsewhere, env=environ, stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        while True:  # until it answers on the config file's port, or has exited
            assert process.poll() is None, log.read_text()
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/responses", json={"model": "gpt-oss-20b", "input": "hi"}, timeout=60
        )
        assert response.status_code == 200, response.text
        assert response.json()["output"][-1]["content"][0]["text"] == "from x.jsonl"
        assert (elsewhere / "store.sqlite3").exists()  # sqlite:./PATH is the caller's too
    finally:
        process.terminate()
        process.wait(60)
