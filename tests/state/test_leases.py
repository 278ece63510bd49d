"""Leases between real server processes sharing a store: a wall-clock step must not make ``--workers``
processes end each other's live responses, and a response another process ended takes no more writes.

For the step, the server's processes read ``time.time()`` through ``wall_clock/sitecustomize.py``, which the
test steps per process by writing a file: the system clock is never touched, and ``time.monotonic()`` goes on
as it does when a real clock is stepped. The step reaches the two workers at different moments (first one,
two heartbeats later the other), as it does when each notices the step at its own time: the first then sees
the other's last heartbeat an hour old.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from pathlib import Path

from api.helpers import MODEL, sse_events, write_script
from state.test_processes import Server
from state.test_workers import Workers, two_producers
from state.test_workers import started as started  # the servers' fixture: stopped at the end
from translate.invariants import check_stream

WALL_CLOCK = Path(__file__).parent / "wall_clock"
STEP = 3600.0
# Long enough to outlast the steps and the heartbeats waited for (HEARTBEAT_INTERVAL = 2 s) on a loaded machine;
# the test cancels the responses when it is done with them.
LONG = {"harmony": "<|channel|>final<|message|>" + "word " * 3000 + "<|return|>", "delay_ms": 20}


def step(path: Path, steps: dict[str, float]) -> None:
    """Set each process's clock shift (pid or ``*`` → seconds); atomic, so no process reads half a file."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(steps))
    partial.replace(path)


def heartbeats_after_step(database: Path, pid: int, count: int, timeout: float = 60) -> None:
    """Wait until the process ``pid`` has written ``count`` heartbeats with its stepped clock: its maintenance
    ran that many rounds (heartbeat, then recovery) after the step, the first of them complete."""
    seen: set[float] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < count:
        assert time.monotonic() < deadline, f"worker {pid} wrote {len(seen)} heartbeats after its clock's step"
        with sqlite3.connect(database) as conn:
            row = conn.execute("SELECT heartbeat_at FROM processes WHERE pid = ?", (pid,)).fetchone()
        if row is not None and row[0] > time.time() + STEP / 2:
            seen.add(row[0])
        time.sleep(0.05)


def test_a_wall_clock_step_ends_no_live_response(started: list[Workers], tmp_path: Path) -> None:
    database = tmp_path / "store.sqlite3"
    store = f"sqlite:{database}"
    steps = tmp_path / "clock.json"
    python_path = os.pathsep.join(filter(None, [str(WALL_CLOCK), os.environ.get("PYTHONPATH")]))
    env = {"PYTHONPATH": python_path, "HARMONY_TEST_WALL_CLOCK": str(steps)}
    script = write_script(tmp_path / "long.jsonl", [LONG])
    server = Workers("--workers", "2", "--store", store, "--engine", script, "--shutdown-grace", "1", env=env)
    started.append(server)
    produced = two_producers(server, store)
    first, second = sorted(produced)

    step(steps, {str(first): STEP})
    heartbeats_after_step(database, first, 2)
    step(steps, {"*": STEP})
    heartbeats_after_step(database, second, 2)
    for pid, response_id in produced.items():
        reply = server.request("GET", f"/v1/responses/{response_id}").json()
        assert reply["status"] == "in_progress", (pid, reply.get("error"))

    # Both are still produced by their own workers, and end as their producer ends them, logs whole.
    for response_id in produced.values():
        cancelled = server.request("POST", f"/v1/responses/{response_id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
        log = sse_events(server.request("GET", f"/v1/responses/{response_id}", params={"stream": "true"}).content)
        check_stream(log)
        assert log[-1]["type"] == "response.incomplete", log[-1]["type"]


def execute(store: str, sql: str, *args: object) -> None:
    """One statement on the test's store, as an operator (or another process) would run it."""
    if store.startswith("sqlite:"):
        with sqlite3.connect(store.removeprefix("sqlite:")) as conn:
            conn.execute(sql.replace("$1", "?"), args)
        return

    async def run() -> None:
        import asyncpg

        url, _, schema = store.partition("?search_path=")
        conn = await asyncpg.connect(url, server_settings={"search_path": schema})
        try:
            await conn.execute(sql, *args)
        finally:
            await conn.close()

    asyncio.run(run())


def test_a_response_another_process_ended_takes_no_more_writes_from_its_producer(
    store_spec: str, tmp_path: Path
) -> None:
    """B takes A for dead (its process row is gone) while A still produces: B ends the response, and what A
    writes afterwards must not land after B's terminal event, nor turn the failed response completed."""
    # A token a millisecond: A commits a round of its log all the time, in the midst of B's recovery.
    fast = {"harmony": "<|channel|>final<|message|>" + "word " * 20_000 + "<|return|>", "delay_ms": 1}
    script = write_script(tmp_path / "fast.jsonl", [fast])
    a = Server(store_spec, script)
    try:
        b = Server(store_spec, script)
        try:
            created = a.client.responses.create(model=MODEL, input="Hi", background=True)
            for event in a.client.responses.retrieve(created.id, stream=True):
                if event.type == "response.output_text.delta":
                    break
            execute(store_spec, "DELETE FROM processes WHERE pid = $1", a.process.pid)
            deadline = time.monotonic() + 30
            while b.client.responses.retrieve(created.id).status != "failed":
                assert time.monotonic() < deadline, "B never ended the response of a process it takes for dead"
                time.sleep(0.05)
            # A, unaware, goes on; a cancel through A ends its run there (its cancel is one more refused write),
            # and A's own stream of it then ends: everything A wrote has been written.
            a.client.responses.cancel(created.id)
            a.events(created.id)
            log = b.events(created.id)
            check_stream(log)
            assert log[-1]["type"] == "response.failed", [e["type"] for e in log[-3:]]
            # A client resuming it from anywhere near the end reads the same log's tail, and nothing after it.
            for after in range(len(log) - 4, len(log) - 1):
                assert b.events(created.id, f"&starting_after={after}") == log[after + 1 :], after
            assert b.client.responses.retrieve(created.id).status == "failed"
        finally:
            b.stop()
    finally:
        a.stop()
