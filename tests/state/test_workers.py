"""``serve --workers N``: real worker processes on one port, sharing one store (SQLite and PostgreSQL).

Which worker serves a connection is not the client's to choose (one with the fewest open, the first to get
there among equals), so the tests open a new connection per request and tell the workers apart by what they
produce: each response belongs to the worker process that runs it
(the store's ``processes`` row, its pid). With two responses produced by different workers, every request
about them is served by a process that does not produce at least one of them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.helpers import MODEL, sse_events, write_script
from translate.invariants import check_stream

WORDS = 400
SLOW = {"harmony": "<|channel|>final<|message|>" + "word " * WORDS + "<|return|>", "delay_ms": 25}
BIN = Path(sys.executable).parent / "harmony-responses"


class Workers:
    """``harmony-responses serve --workers N`` started as a user would, until its banner."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, wait: bool = True) -> None:
        command = [str(BIN), "serve", "--port", "0", "--model", MODEL, "--log-level", "warning", *args]
        environment = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_RESPONSES_")}
        environment.update(env or {})
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
        )
        self.banner: list[str] = []
        self.base_url = ""
        if wait:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.banner.append(line)
                if line.startswith("  workers:"):
                    break
            if not (self.banner and self.banner[0].startswith("harmony-responses: listening on ")):
                # Not started: say why (its stderr and status), and leave no process or pipe behind.
                try:
                    _, errors = self.process.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    _, errors = self.process.communicate()
                raise AssertionError(f"no banner {self.banner}, exit {self.process.returncode}: {errors}")
            self.base_url = self.banner[0].split("listening on ")[1].strip().removesuffix("/v1")

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        # A client per request: a new connection, which the kernel may hand to either worker.
        with httpx.Client(base_url=self.base_url, timeout=30) as client:
            return client.request(method, path, **kwargs)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def started() -> Iterator[list[Workers]]:
    servers: list[Workers] = []
    yield servers
    for server in servers:
        server.stop()


def worker_pids(parent: int) -> set[int]:
    """The parent's worker processes (multiprocessing's resource tracker is a child too)."""
    pids = set()
    for pid in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"spawn_main" in command:
            pids.add(int(pid))
    return pids


def producer_pid(store: str, response_id: str) -> int | None:
    """The pid of the process producing ``response_id``, from the store's rows (None once it has ended)."""
    sql = "SELECT p.pid FROM responses r JOIN processes p ON p.id = r.process_id WHERE r.id = {}"
    if store.startswith("sqlite:"):
        with sqlite3.connect(store.removeprefix("sqlite:")) as conn:
            row = conn.execute(sql.format("?"), (response_id,)).fetchone()
        return row[0] if row else None

    async def query() -> int | None:
        import asyncpg

        url, _, schema = store.partition("?search_path=")
        conn = await asyncpg.connect(url, server_settings={"search_path": schema})
        try:
            return await conn.fetchval(sql.format("$1"), response_id)
        finally:
            await conn.close()

    return asyncio.run(query())


def background(server: Workers) -> str:
    reply = server.request("POST", "/v1/responses", json={"model": MODEL, "input": "Hi", "background": True})
    assert reply.status_code == 200, reply.text
    return reply.json()["id"]


def two_producers(server: Workers, store: str) -> dict[int, str]:
    """Background responses created over new connections until two workers produce one each: pid → id."""
    produced: dict[int, str] = {}
    for _ in range(40):
        response_id = background(server)
        pid = producer_pid(store, response_id)
        assert pid is not None
        produced.setdefault(pid, response_id)
        if len(produced) == 2:
            return produced
    raise AssertionError(f"every response was produced by one worker: {produced}")


def test_two_workers_serve_one_port_and_one_store(store_spec: str, started: list[Workers], tmp_path: Path) -> None:
    script = write_script(tmp_path / "slow.jsonl", [SLOW])
    server = Workers("--workers", "2", "--store", store_spec, "--engine", script, "--shutdown-grace", "1")
    started.append(server)
    assert "  workers: 2 processes on this port\n" in server.banner
    workers = worker_pids(server.process.pid)
    assert len(workers) == 2

    produced = two_producers(server, store_spec)
    assert set(produced) == workers
    for response_id in produced.values():
        # Resumed from the log through any worker, from where the client left off.
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            params = {"stream": "true", "starting_after": "5"}
            with client.stream("GET", f"/v1/responses/{response_id}", params=params) as stream:
                assert stream.status_code == 200
                lines = stream.iter_lines()
                first = [next(lines) for _ in range(8)]
        data = [line for line in first if line.startswith("data: ")]
        assert '"sequence_number":6' in data[0], data[0]
        # Cancelled through a new connection: the producer (whichever it is) stops, mid-text.
        cancelled = server.request("POST", f"/v1/responses/{response_id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
        for _ in range(4):  # several connections: both workers answer the same
            retrieved = server.request("GET", f"/v1/responses/{response_id}").json()
            assert retrieved["status"] == "cancelled"
            text = retrieved["output"][-1]["content"][0]["text"]
            assert 0 < len(text) < len("word " * WORDS)
        log = sse_events(server.request("GET", f"/v1/responses/{response_id}", params={"stream": "true"}).content)
        check_stream(log)
        assert log[-1]["type"] == "response.incomplete" and log[-1]["response"]["status"] == "cancelled"
        deltas = "".join(e["delta"] for e in log if e["type"] == "response.output_text.delta")
        assert deltas == text
        assert server.request("DELETE", f"/v1/responses/{response_id}").status_code == 200
        for _ in range(4):
            assert server.request("GET", f"/v1/responses/{response_id}").status_code == 404


def test_deleting_a_response_another_worker_runs_stops_it(
    store_spec: str, started: list[Workers], tmp_path: Path
) -> None:
    """DELETE of a running response stops its producer wherever it runs: its output is not kept afterwards."""
    script = write_script(tmp_path / "slow.jsonl", [{**SLOW, "delay_ms": 10}])
    server = Workers("--workers", "2", "--store", store_spec, "--engine", script, "--shutdown-grace", "1")
    started.append(server)
    produced = two_producers(server, store_spec)
    items: dict[str, str] = {}
    for response_id in produced.values():
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            with client.stream("GET", f"/v1/responses/{response_id}", params={"stream": "true"}) as stream:
                for line in stream.iter_lines():
                    if line.startswith("data: ") and "response.output_item.added" in line:
                        items[response_id] = line.split('"id":"')[1].split('"')[0]
                        break
        assert server.request("GET", f"/v1/responses/{response_id}").json()["status"] == "in_progress"
        assert server.request("DELETE", f"/v1/responses/{response_id}").status_code == 200
    time.sleep(WORDS * 0.010 + 1)  # as long as the responses would have taken to finish
    for response_id, item_id in items.items():
        assert server.request("GET", f"/v1/responses/{response_id}").status_code == 404
        body = {"model": MODEL, "input": [{"type": "item_reference", "id": item_id}]}
        for _ in range(4):
            reply = server.request("POST", "/v1/responses", json=body)
            assert reply.status_code in (400, 404), f"{item_id} of a deleted response is still there: {reply.text}"


def test_sigterm_ends_every_worker_within_the_grace(started: list[Workers], tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'store.sqlite3'}"
    script = write_script(tmp_path / "slow.jsonl", [{**SLOW, "delay_ms": 50}])
    server = Workers("--workers", "2", "--store", store, "--engine", script, "--shutdown-grace", "2")
    started.append(server)
    workers = worker_pids(server.process.pid)
    produced = two_producers(server, store)
    streamed: list[str] = []

    def stream() -> None:
        body = {"model": MODEL, "input": "fg", "stream": True}
        with httpx.stream("POST", f"{server.base_url}/v1/responses", json=body, timeout=60) as r:
            streamed.extend(line[7:] for line in r.iter_lines() if line.startswith("event: "))

    reader = threading.Thread(target=stream)
    reader.start()
    time.sleep(1)
    began = time.monotonic()
    code = server.stop(signal.SIGTERM, timeout=30)
    took = time.monotonic() - began
    reader.join(10)
    assert code == 0 and took < 2 + 8, (code, took)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    assert streamed and streamed[-1] == "response.failed"
    # Both workers' background responses were ended, with the reason, before they exited.
    with sqlite3.connect(store.removeprefix("sqlite:")) as conn:
        statuses = dict(conn.execute("SELECT id, status FROM responses").fetchall())
    assert {statuses[response_id] for response_id in produced.values()} == {"failed"}


def test_a_killed_worker_is_restarted(started: list[Workers], tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'store.sqlite3'}"
    script = write_script(tmp_path / "slow.jsonl", [{**SLOW, "delay_ms": 50}])
    server = Workers("--workers", "2", "--store", store, "--engine", script, "--shutdown-grace", "1")
    started.append(server)
    before = worker_pids(server.process.pid)
    produced = two_producers(server, store)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    assert server.process.stderr is not None
    log = []
    for line in server.process.stderr:  # the parent says so, then says when the new worker listens
        log.append(line)
        if line.startswith("WARNING:") and "restarted (pid" in line:
            break
    assert f"(pid {victim}) exited with signal SIGKILL unexpectedly; restarting it in" in "".join(log), log
    now = worker_pids(server.process.pid)
    assert len(now) == 2 and victim not in now
    # What the killed worker was producing was ended by its sibling, saying why.
    ended = server.request("GET", f"/v1/responses/{produced[victim]}").json()
    assert ended["status"] == "failed" and "stopped before it finished" in ended["error"]["message"]
    assert server.request("GET", f"/v1/responses/{produced[max(before)]}").json()["status"] == "in_progress"
    # The new worker serves: responses come from both workers again, the new one among them.
    assert set(two_producers(server, store)) == now
    assert server.stop() == 0


def test_sigint_and_a_killed_parent_end_the_workers(started: list[Workers], tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'store.sqlite3'}"
    # Ctrl-C: the parent forwards it once; the workers end, the metrics folder it made is removed.
    server = Workers("--workers", "2", "--store", store)
    started.append(server)
    workers = worker_pids(server.process.pid)
    metrics = {Path(f"/proc/{pid}/environ").read_bytes().split(b"PROMETHEUS_MULTIPROC_DIR=")[1] for pid in workers}
    folder = Path(metrics.pop().split(b"\0")[0].decode())
    assert not metrics and folder.is_dir()  # one folder, shared
    assert server.stop(signal.SIGINT, timeout=30) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers) and not folder.exists()
    # A folder set by the user is used and kept; a parent killed outright leaves no worker serving on.
    mine = tmp_path / "metrics"
    mine.mkdir()
    server = Workers("--workers", "2", "--store", store, env={"PROMETHEUS_MULTIPROC_DIR": str(mine)})
    started.append(server)
    workers = worker_pids(server.process.pid)
    assert all(
        f"PROMETHEUS_MULTIPROC_DIR={mine}\0".encode() in Path(f"/proc/{pid}/environ").read_bytes() for pid in workers
    )
    server.process.kill()
    server.process.wait()
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{pid}").exists() for pid in workers):
        assert time.monotonic() < deadline, "the workers serve on without their parent"
        time.sleep(0.1)
    assert mine.is_dir()


def test_workers_that_cannot_start_exit_as_one_process_does(tmp_path: Path) -> None:
    args = ["--store", f"sqlite:{tmp_path / 's.sqlite3'}", "--engine", "vllm:http://127.0.0.1:9"]
    one = Workers(*args, wait=False)
    one_out, one_err = one.process.communicate(timeout=60)
    two = Workers("--workers", "2", *args, wait=False)
    two_out, two_err = two.process.communicate(timeout=60)
    assert one.process.returncode == two.process.returncode == 1
    message = [line for line in one_err.splitlines() if line.startswith("harmony-responses serve:")]
    assert message and message[0].startswith("harmony-responses serve: the engine cannot serve: ")
    assert [line for line in two_err.splitlines() if line.startswith("harmony-responses serve:")] == message
    assert "listening on" not in one_out + two_out


def pinned_clients(server: Workers, store: str) -> tuple[httpx.Client, httpx.Client]:
    """Two kept-alive connections served by different workers (each told apart by the response it produced)."""

    def producer(client: httpx.Client) -> int | None:
        reply = client.post("/v1/responses", json={"model": MODEL, "input": "Hi", "background": True})
        return producer_pid(store, reply.json()["id"])

    first = httpx.Client(base_url=server.base_url, timeout=30)
    pid = producer(first)
    for _ in range(40):
        other = httpx.Client(base_url=server.base_url, timeout=30)
        if producer(other) != pid:
            return first, other
        other.close()
    first.close()
    raise AssertionError("every connection went to one worker")


def test_a_foreground_stream_deleted_through_another_worker_ends_cancelled(
    store_spec: str, started: list[Workers], tmp_path: Path
) -> None:
    script = write_script(tmp_path / "slow.jsonl", [SLOW])
    server = Workers("--workers", "2", "--store", store_spec, "--engine", script, "--shutdown-grace", "1")
    started.append(server)
    here, there = pinned_clients(server, store_spec)
    try:
        body = {"model": MODEL, "input": "fg", "stream": True}
        with here.stream("POST", "/v1/responses", json=body) as stream:
            lines = stream.iter_lines()
            created = next(line for line in lines if line.startswith("data: "))
            response_id = created.split('"id":"')[1].split('"')[0]
            assert there.delete(f"/v1/responses/{response_id}").status_code == 200
            rest = [line for line in lines if line.startswith("event: ")]
        # The producing worker stopped it when the other deleted it: the stream ended there, cancelled.
        assert rest[-1] == "event: response.incomplete" and len(rest) < WORDS, rest[-3:]
        assert here.get(f"/v1/responses/{response_id}").status_code == 404
        assert there.get(f"/v1/responses/{response_id}").status_code == 404
    finally:
        here.close()
        there.close()


def test_a_worker_hands_a_connection_to_one_with_fewer() -> None:
    """How ``--workers`` share connections (``SharedListener``, ``Sharing``), on one real listening socket: the
    worker that accepts a connection keeps it while no other has fewer open (or on their way to it), and hands it
    to the one with fewer otherwise, which serves it; a closed connection gives its place back; a worker not
    listening gets none; what waits for a worker that exited is handed on (or closed when none listens); a full
    inbox keeps the connection where it was accepted."""
    import multiprocessing
    import select
    import socket

    from harmony_responses.serve.workers import ABSENT, SharedListener, Sharing

    sharing = Sharing(multiprocessing.get_context("spawn"), 3)
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    first, second = (SharedListener(sharing, slot, fileno=os.dup(listening.fileno())) for slot in (0, 1))
    for listener in (first, second):
        listener.setblocking(False)
    clients: list[socket.socket] = []

    def waiting() -> socket.socket:
        client = socket.create_connection(("127.0.0.1", port))
        clients.append(client)
        # In the accept queue (on a loaded machine the kernel may queue it after connect returns).
        assert select.select([listening], [], [], 30)[0]
        return client

    def greeted(client: socket.socket, by: bytes) -> None:
        """``client`` was served by the worker that greets with ``by``."""
        client.settimeout(30)
        assert client.recv(16) == by

    transports: list[Any] = []

    class Greet(asyncio.Protocol):
        def __init__(self, by: bytes) -> None:
            self.by = by

        def connection_made(self, transport: Any) -> None:
            transport.write(self.by)
            transports.append(transport)

    async def serve_handed(listener: SharedListener, by: bytes, client: socket.socket) -> None:
        stop = listener.take_handed(asyncio.get_running_loop(), lambda: Greet(by))
        await asyncio.get_running_loop().run_in_executor(None, greeted, client, by)
        stop()  # and the listener is hidden from the others
        transports.pop().close()

    try:
        assert list(sharing.loads) == [ABSENT] * 3  # none listens yet
        first.show()
        second.show()
        assert list(sharing.loads) == [0, 0, ABSENT]  # the third worker is not there
        waiting()
        kept, _ = first.accept()  # neither has any: the one accepting keeps it
        clients.append(kept)
        assert list(sharing.loads) == [1, 0, ABSENT]
        handed = waiting()
        with pytest.raises(BlockingIOError):  # the second worker has fewer: handed to it; none waits now
            first.accept()
        assert list(sharing.loads) == [1, 0, ABSENT] and sharing.counts()[1] == [0, 1, 0]
        # On its way to the second, it counts as the second's: the first keeps the next one.
        clients.append(waiting())
        clients.append(first.accept()[0])
        assert list(sharing.loads) == [2, 0, ABSENT]
        asyncio.run(serve_handed(second, b"second", handed))  # the second serves it
        assert list(sharing.loads) == [2, ABSENT, ABSENT] and sharing.counts()[1] == [0, 0, 0]
        # Hidden (shutting down), the second gets none: the first keeps what it accepts.
        clients.append(waiting())
        third, _ = first.accept()
        third.close()
        third.close()  # closed twice (asyncio may): counted once
        assert list(sharing.loads) == [2, ABSENT, ABSENT]
        # A worker that exited with a connection waiting for it: the parent hands it on to one that listens.
        second.show()
        orphan = waiting()
        with pytest.raises(BlockingIOError):
            first.accept()
        sharing.loads[1] = ABSENT  # as the parent marks a worker that exited
        assert sharing.rehome(1) == (1, 0)
        assert sharing.counts()[1] == [1, 0, 0]
        asyncio.run(serve_handed(first, b"first", orphan))
        # With none listening, what waited is closed: the client is not left waiting.
        sharing.loads[1] = 0
        doomed = waiting()
        with pytest.raises(BlockingIOError):
            first.accept()
        sharing.loads[1] = ABSENT
        assert sharing.rehome(1) == (0, 1)
        doomed.settimeout(30)
        assert doomed.recv(16) == b""
        # A full inbox: the worker that accepted keeps the connection.
        first.show()  # (hidden when it stopped serving its inbox above)
        sharing.loads[2] = 0  # a third worker, with fewer than the first, whose inbox is full
        with pytest.raises(BlockingIOError):
            while True:
                sharing.inboxes[2][1].send(b"x" * 1024, socket.MSG_DONTWAIT)
        before = sharing.loads[0]
        clients.append(waiting())
        clients.append(first.accept()[0])
        assert sharing.loads[0] == before + 1 and sharing.counts()[1] == [0, 0, 0]
    finally:
        for sock in (*clients, first, second, listening):
            sock.close()
        sharing.close()


def test_a_stopped_worker_gets_its_share_of_a_burst_later_and_no_more(started: list[Workers], tmp_path: Path) -> None:
    """A worker that stops turning its loop (SIGSTOP here; a long synchronous step would do the same) still
    gets its share of a burst, which waits for it, but no new connection once it has left those waiting
    ``STUCK_AFTER``: they go to the other worker. When it goes on, it serves what waited; nothing is lost."""
    from harmony_responses.serve.workers import STUCK_AFTER

    words = 100
    paced = {"harmony": "<|channel|>final<|message|>" + "word " * words + "<|return|>", "delay_ms": 25}
    server = Workers("--workers", "2", "--engine", write_script(tmp_path / "paced.jsonl", [paced]))
    started.append(server)
    stopped = min(worker_pids(server.process.pid))
    # A stream is `paced`: once one has this many deltas, STUCK_AFTER has passed since the burst began.
    later = int(STUCK_AFTER * 1000 / paced["delay_ms"]) + 4
    some_began = threading.Event()  # any stream's first bytes

    class Stream(threading.Thread):
        def __init__(self) -> None:
            super().__init__(daemon=True)
            self.began, self.later = threading.Event(), threading.Event()
            self.body = b""

        def run(self) -> None:
            body = {"model": MODEL, "input": "Hi", "stream": True, "store": False}
            with (
                httpx.Client(base_url=server.base_url, timeout=120) as client,
                client.stream("POST", "/v1/responses", json=body) as reply,
            ):
                for chunk in reply.iter_bytes():
                    self.body += chunk
                    self.began.set()
                    some_began.set()
                    if self.body.count(b"event: response.output_text.delta") >= later:
                        self.later.set()

    def wait_for(events: list[threading.Event]) -> None:
        for event in events:
            assert event.wait(60)

    os.kill(stopped, signal.SIGSTOP)
    try:
        burst = [Stream() for _ in range(8)]
        for stream in burst:
            stream.start()
        # The other worker's share streams; the stopped worker's share waits for it (a connection each). Which
        # streams are which is the workers' choice: wait for whichever begins first, not for each in turn (a
        # minute for each waiting one before the first flowing one: two, and their clients gave up at 120 s).
        assert some_began.wait(60)
        first = next(s for s in burst if s.began.is_set())
        wait_for([first.later])
        waiting = [s for s in burst if not s.began.is_set()]
        flowing = [s for s in burst if s.began.is_set()]
        assert 1 <= len(waiting) <= 4, (len(waiting), len(flowing))
        # New connections now all go to the worker that turns its loop.
        after = [Stream() for _ in range(4)]
        for stream in after:
            stream.start()
        wait_for([s.began for s in after])
        assert not any(s.began.is_set() for s in waiting)
    finally:
        os.kill(stopped, signal.SIGCONT)
    for stream in burst + after:
        stream.join(120)
        events = sse_events(stream.body)
        assert events[-1]["type"] == "response.completed"
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "word " * words
