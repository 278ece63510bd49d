"""Real ``harmony-responses serve`` processes: two sharing one PostgreSQL behave as one service, processes
sharing a store open each other's ``encrypted_content``, and a server killed with SIGKILL mid-response leaves
a log that the next start ends with a reason."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from api.helpers import ANSWER, CALL_WEATHER, MODEL, WEATHER_TOOL, sse_events, stop_process, write_script
from translate.invariants import check_stream

WORDS = 300
SLOW = {"harmony": "<|channel|>final<|message|>" + "word " * WORDS + "<|return|>", "delay_ms": 10}


class Server:
    def __init__(self, store: str, script: str, *extra: str) -> None:
        exe = Path(sys.executable).parent / "harmony-responses"
        command = [str(exe), "serve", "--port", "0", "--model", MODEL, "--engine", script, "--store", store, *extra]
        command += ["--log-level", "warning", "--current-date", "2025-06-01"]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        output = []
        for _ in range(50):  # log lines (recovery warnings) may come before the banner
            line = self.process.stdout.readline()
            output.append(line)
            if line.startswith("harmony-responses: listening on ") or not line:
                break
        assert line.startswith("harmony-responses: listening on "), "".join(output)
        self.output = output
        self.base_url = line.split("listening on ")[1].strip()
        self.client = openai.OpenAI(base_url=self.base_url, api_key="unused", max_retries=0, timeout=30)

    def events(self, response_id: str, query: str = "") -> list[dict[str, Any]]:
        reply = httpx.get(f"{self.base_url}/responses/{response_id}?stream=true{query}", timeout=30)
        assert reply.status_code == 200, reply.text
        return sse_events(reply.content)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.client.close()
        stop_process(self.process, sig)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def _wait_status(client: openai.OpenAI, response_id: str, status: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = client.responses.retrieve(response_id)
        if response.status == status:
            return response
        time.sleep(0.02)
    raise AssertionError(f"{response_id} never reached {status} (last: {response.status})")


def test_two_processes_on_one_postgresql(store_spec: str, servers: list[Server], tmp_path: Path) -> None:
    if not store_spec.startswith("postgresql"):
        pytest.skip("several processes share a PostgreSQL store")
    script = write_script(tmp_path / "slow.jsonl", [SLOW])
    a, b = Server(store_spec, script), Server(store_spec, script)
    servers += [a, b]

    created = a.client.responses.create(model=MODEL, input="Hi", background=True)
    assert b.client.responses.retrieve(created.id).status in ("queued", "in_progress")
    # B follows A's live response through the shared log, then cancels it; A's engine stops.
    stream = b.client.responses.retrieve(created.id, stream=True)
    seen = []
    for event in stream:
        seen.append(event)
        if len(seen) == 20:
            break
    assert [e.type for e in seen[:3]] == ["response.created", "response.queued", "response.in_progress"]
    cancelled = b.client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    rest = list(stream)
    assert rest[-1].type == "response.incomplete" and rest[-1].response.status == "cancelled"
    assert [e.sequence_number for e in seen + rest] == list(range(len(seen) + len(rest)))
    on_a = a.client.responses.retrieve(created.id)
    assert on_a.status == "cancelled"
    assert 0 < len(on_a.output[-1].content[0].text) < len("word " * WORDS)  # type: ignore[union-attr]
    check_stream(a.events(created.id))
    # Created on A, deleted through B.
    b.client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        a.client.responses.retrieve(created.id)
    # And the other way round: a foreground response created on B is there on A.
    other = b.client.responses.create(model=MODEL, input="Hi", max_output_tokens=20)
    assert a.client.responses.retrieve(other.id).status == "incomplete"


def test_processes_sharing_a_store_open_each_others_sealed_reasoning(
    store_spec: str, servers: list[Server], tmp_path: Path
) -> None:
    """No --secret-key: the key comes from the store, so a stateless client's turns may land on any process."""
    script = write_script(tmp_path / "calls.jsonl", [CALL_WEATHER, ANSWER])
    a, b = Server(store_spec, script), Server(store_spec, script)
    servers += [a, b]
    question = {"role": "user", "content": "Weather in Paris?"}
    first = a.client.responses.create(
        model=MODEL, input=[question], tools=[WEATHER_TOOL], store=False, include=["reasoning.encrypted_content"]
    )
    reasoning, call = first.output[0], first.output[-1]
    assert reasoning.type == "reasoning" and call.type == "function_call" and reasoning.encrypted_content
    text = reasoning.content[0].text  # type: ignore[index]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"sunny": true}'}

    def prompt_tokens(server: Server, *reasoning_items: dict[str, Any]) -> int:
        # The replay engine reports the prompt's length: what the model would read, in tokens.
        items = [question, *reasoning_items, call.model_dump(exclude_none=True), result]
        response = server.client.responses.create(model=MODEL, input=items, tools=[WEATHER_TOOL], store=False)
        assert response.usage is not None
        return response.usage.input_tokens

    sealed = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": reasoning.encrypted_content}
    clear = {
        "type": "reasoning",
        "id": reasoning.id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }
    with_reasoning = prompt_tokens(a, clear)
    assert with_reasoning > prompt_tokens(a)  # the reasoning is in the prompt when it is there at all
    assert prompt_tokens(b, sealed) == with_reasoning, "B did not open A's blob: the reasoning was dropped"
    # A process started later (a restart) uses the same key.
    a.stop()
    c = Server(store_spec, script)
    servers.append(c)
    assert prompt_tokens(c, sealed) == with_reasoning


def test_sigkill_mid_response_then_restart(store_spec: str, servers: list[Server], tmp_path: Path) -> None:
    script = write_script(tmp_path / "slow.jsonl", [SLOW])
    first = Server(store_spec, script, "--trace")
    servers.append(first)
    created = first.client.responses.create(model=MODEL, input="Hi", background=True)
    seen = []
    with first.client.responses.retrieve(created.id, stream=True) as stream:
        for event in stream:
            seen.append(event.model_dump(mode="json", exclude_unset=True))
            if len(seen) == 40:
                break
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait()

    second = Server(store_spec, script, "--trace")  # recovery runs at start: the killed process's pid is gone
    servers.append(second)
    ended = _wait_status(second.client, created.id, "failed")
    assert any("stopped while it was in_progress" in line for line in second.output)  # ended at start
    assert ended.error is not None and "stopped before it finished" in ended.error.message
    # Its trace was being recorded in the killed process: the trace endpoint says it was lost, and why.
    trace = httpx.get(f"{second.client.base_url}responses/{created.id}/trace?format=json", timeout=20)
    assert trace.status_code == 404 and trace.json()["error"]["code"] == "trace_not_found"
    assert "ended by another process after the one generating it stopped" in trace.json()["error"]["message"]
    log = second.events(created.id)
    check_stream(log)
    # Every event a client saw before the kill is in the log, unchanged; the end comes after.
    assert [(e["type"], e["sequence_number"]) for e in log[: len(seen)]] == [
        (e["type"], e["sequence_number"]) for e in seen
    ]
    deltas = [e["delta"] for e in log if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == ended.output[-1].content[0].text  # type: ignore[union-attr]
    assert log[-2]["type"] == "error" and log[-1]["type"] == "response.failed"
