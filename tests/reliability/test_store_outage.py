"""A PostgreSQL outage longer than the writer's retry budget (issue 16 #7).

Before: stored responses stayed ``in_progress`` for good with an empty log (the process was alive, so
recovery never ended them), and a JSON response the client was given as ``completed`` was a 404 later.
Now every response ends terminal once the database is back, and a client whose response could not be
stored is told it failed rather than that it succeeded.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.helpers import MODEL

from .server_process import server_process

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = ("completed", "incomplete", "failed", "cancelled")


def _postgres(directory: Path, *args: str) -> str:
    env = dict(os.environ, HARMONY_TEST_PG_DIR=str(directory))
    result = subprocess.run([str(ROOT / "scripts" / "postgres"), *args], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _stream(root: str, body: dict[str, Any]) -> tuple[str | None, str | None]:
    """(response id, last event type) of a streamed stored response."""
    response_id = last = None
    with httpx.stream("POST", f"{root}/v1/responses", json={**body, "stream": True}, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("event: "):
                last = line[7:]
            elif line.startswith("data: ") and response_id is None:
                response_id = json.loads(line[6:])["response"]["id"]
    return response_id, last


@pytest.mark.timeout(240)
def test_responses_running_through_an_outage_all_end_and_none_claims_success_falsely(tmp_path: Path) -> None:
    # Its own cluster, outside pytest's private tmp folder (the postgres user must reach it), stopped here.
    directory = Path(tempfile.mkdtemp(prefix="harmony-pg-outage-"))
    url = _postgres(directory)
    script = tmp_path / "slow.jsonl"
    # Each call: 60 tokens, 100 ms apart, so that responses are mid-stream when the database goes away.
    script.write_text(
        json.dumps({"harmony": "<|channel|>final<|message|>" + "tick " * 60 + "<|return|>", "delay_ms": 100})
    )
    try:
        with server_process(["--store", url, "--engine", f"replay:{script}", "--model", MODEL]) as server:
            root = server.root
            body = {"model": MODEL, "input": "hi"}
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                background = [
                    httpx.post(f"{root}/v1/responses", json={**body, "background": True}).json()["id"] for _ in range(3)
                ]
                streams = [pool.submit(_stream, root, body) for _ in range(3)]
                jsons = [pool.submit(httpx.post, f"{root}/v1/responses", json=body, timeout=120) for _ in range(3)]
                time.sleep(1.0)
                _postgres(directory, "stop")
                time.sleep(12)  # longer than the writer's retry budget (about 8 s)
                _postgres(directory)
                streamed = [f.result() for f in streams]
                answered = [f.result() for f in jsons]

            # Every client got an end: a stream its terminal event, a JSON request a Response or an error.
            assert all(last in ("response.completed", "response.failed") for _, last in streamed)
            assert all(r.status_code in (200, 500, 503) for r in answered)  # 503: not stored (store_unavailable)
            told_completed = [r.json()["id"] for r in answered if r.status_code == 200]
            told_completed += [rid for rid, last in streamed if rid and last == "response.completed"]

            # Once the database is back, every response ends: none stays queued or in progress.
            ids = background + [rid for rid, _ in streamed if rid] + told_completed
            # The writes of those running when the database went away were lost (the writer's first round
            # gives up before it is back): at least the background responses, whose ids were handed out.
            deadline = time.monotonic() + 30
            while True:
                statuses = {}
                for rid in ids:
                    got = httpx.get(f"{root}/v1/responses/{rid}")
                    statuses[rid] = got.json()["status"] if got.status_code == 200 else got.status_code
                if all(s in TERMINAL or s == 404 for s in statuses.values()):
                    break
                assert time.monotonic() < deadline, f"still active after the outage: {statuses}"
                time.sleep(1)
            # Nobody was told "completed" of a response that was not stored completed.
            for rid in told_completed:
                assert statuses[rid] == "completed", f"{rid} was answered completed but is {statuses[rid]}"
            for rid in background:
                assert statuses[rid] in TERMINAL  # its id was handed out: it must be there, ended
    finally:
        _postgres(directory, "stop")
        shutil.rmtree(directory, ignore_errors=True)
