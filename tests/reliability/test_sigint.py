"""A second Ctrl-C ends a server at once, mid-stream, whatever SIGINT's disposition at start, with ``--workers``
too (issue 23 #3); what it was running is ended at the next start, as after a crash.

A shell starts a background job with SIGINT ignored; uvicorn handles SIGINT anyway, then restores the
disposition it found. The server once stayed up after its second Ctrl-C (``serve/stopping.py``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from api.helpers import MODEL

from .server_process import BIN, free_port, server_process


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stopped_taking_requests(root: str) -> bool:
    try:
        return httpx.get(f"{root}/ready", timeout=10).status_code != 200
    except httpx.TransportError:
        return True


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("disposition", ["default", "ignored"])
def test_a_second_sigint_mid_stream_ends_the_server_at_once(tmp_path: Path, disposition: str, workers: int) -> None:
    script = tmp_path / "slow.jsonl"
    # 150 s of ticks, and a grace far longer: only the second SIGINT can end the server within the test.
    script.write_text(
        json.dumps({"harmony": "<|channel|>final<|message|>" + "tick " * 3000 + "<|return|>", "delay_ms": 50})
    )
    args = ["--store", f"sqlite:{tmp_path / 'store.sqlite3'}", "--engine", f"replay:{script}", "--model", MODEL]
    events: list[dict[str, Any]] = []
    cut: list[Exception] = []
    flowing = threading.Event()
    preexec = _ignore_sigint if disposition == "ignored" else None
    with server_process([*args, "--shutdown-grace", "600", "--workers", str(workers)], preexec_fn=preexec) as server:
        client = openai.OpenAI(base_url=f"{server.root}/v1", api_key="unused", max_retries=0, timeout=120)

        def read() -> None:
            try:
                with client.responses.stream(model=MODEL, input="hi") as stream:
                    for event in stream:
                        events.append(event.model_dump(mode="json"))
                        if event.type == "response.output_text.delta":
                            flowing.set()
            except openai.APIError as exc:
                cut.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        assert flowing.wait(60)
        server.process.send_signal(signal.SIGINT)
        # Two SIGINTs that arrive together are one call of Python's handler: the second goes once the
        # first has been acted on (the server stops taking requests).
        while not _stopped_taking_requests(server.root):
            pass
        server.process.send_signal(signal.SIGINT)
        code = server.process.wait(120)  # within the test only if the second SIGINT ended it (grace: 600 s)
        reader.join(60)
        stderr = server.stderr()
    # Ended by the signal, as an interrupted process is (the supervisor of --workers exits 0 once they have).
    assert code == (-signal.SIGINT if workers == 1 else 0), stderr
    assert "Traceback" not in stderr, stderr
    assert "SIGINT again: exiting now" in stderr
    assert cut and not any(e["type"] == "response.completed" for e in events)  # the stream was cut
    response_id = events[0]["response"]["id"]

    with server_process(args) as again:  # the next start ends what the cut process left running
        stored = httpx.get(f"{again.root}/v1/responses/{response_id}", timeout=30).json()
    assert stored["status"] == "failed", stored
    assert "stopped before it finished" in stored["error"]["message"]


def _starting_workers(pid: int) -> int:
    """How many of ``pid``'s children are running Python's start-up code: openai_harmony's library is loaded
    (the interpreter and its SIGINT handler are up; the vocabulary and the server come after it)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0
    loaded = 0
    for child in children:
        try:
            loaded += "openai_harmony" in Path(f"/proc/{child}/maps").read_text()
        except OSError:
            pass
    return loaded


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds the worker processes in /proc (Linux)")
def test_a_ctrl_c_while_workers_start_ends_them_without_a_traceback(tmp_path: Path) -> None:
    """Ctrl-C while ``--workers`` are still starting (importing, loading the vocabulary: seconds on a busy
    machine) ends them quietly: they have nothing to finish, and Python's SIGINT would raise KeyboardInterrupt
    wherever their start-up is, a traceback on the terminal. (Found by the test above on a busy machine, where
    one worker was still starting when the first one answered.)"""
    script = tmp_path / "answer.jsonl"
    script.write_text(json.dumps({"harmony": "<|channel|>final<|message|>hi<|return|>"}))
    args = ["serve", "--port", str(free_port()), "--workers", "2", "--store", f"sqlite:{tmp_path / 's.sqlite3'}"]
    process = subprocess.Popen(
        [str(BIN), *args, "--engine", f"replay:{script}", "--model", MODEL],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while _starting_workers(process.pid) < 2:  # both workers in their start-up, neither listening yet
            assert process.poll() is None, process.communicate()[1]
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
