"""``serve --workers N``: a parent that binds the port once and supervises N server processes accepting on it.

Why not uvicorn's own ``workers=``: it builds the app from an import string in each process, while ``serve``
builds it from a ``Config`` (``create_app``) and runs it on its own ``_Server`` (the shutdown grace) and
protocols. Here each worker is a ``multiprocessing`` *spawn* child (a fresh interpreter: no event loop,
thread or open store inherited) handed the parent's listening socket and the ``Config`` through a pipe (not
the command line: the configuration may hold API keys); it builds its own engine, store connection and app,
and runs ``cli.run_server`` on the socket. Each new connection goes to a worker with the fewest open: the
worker that accepts it hands it to another through that one's inbox when it has more (``SharedListener``,
``Sharing``).

What the workers share is the store: each registers as a process there, so a background response produced
by one is retrieved, resumed (its event log), cancelled (a flag its producer polls) and deleted through any
other (``run/stored.py``), and the sealing key comes from the store's secrets.

The parent:

- prints the banner once, when every worker is listening (the engine's description is the first worker's:
  a started engine may say more than a built one);
- exits with the worker's status and message when one cannot start (the engine check fails: as one process
  does), after stopping the others;
- forwards SIGTERM and SIGINT to every worker (workers run in their own process group, so a terminal's
  Ctrl-C reaches the parent only and is not delivered twice) and waits for each: the shutdown grace applies
  in each; a worker still starting gets SIGTERM for a SIGINT (it has nothing to finish, and a KeyboardInterrupt
  in its imports would print a traceback);
- restarts a worker that exits unexpectedly, after a backoff that grows while it keeps failing, and hands the
  connections that waited in its inbox to the others (``Sharing.rehome``);
- with N > 1, points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh folder (unless set) so that metrics add up
  across workers.

A worker watches its pipe to the parent: when the parent dies without forwarding anything (SIGKILL), the
pipe closes and the worker shuts down as on SIGTERM.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, TextIO

from .config import Config

__all__ = ["run_workers"]

logger = logging.getLogger("harmony_responses.serve")

METRICS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
BACKLOG = 2048
ABSENT = -1
# Seconds a worker may leave connections handed to it untaken before the others hand it no more for a while.
STUCK_AFTER = 0.25
# Restart backoff: the first restart after RESTART_DELAY seconds, doubling while the worker keeps dying, up
# to MAX_RESTART_DELAY; a worker that ran for STABLE_AFTER seconds starts the count again.
RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 30.0
STABLE_AFTER = 30.0
# How long after the shutdown grace (and uvicorn's backstop) a worker may still take before it is killed.
KILL_AFTER = 10.0


@dataclass
class _Worker:
    slot: int
    process: BaseProcess | None = None
    pipe: Connection | None = None  # the parent's end; the worker writes "ready" or its error once
    ready: bool = False
    started_at: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    error: tuple[int, str] | None = None
    descriptions: tuple[str, str | None] | None = field(default=None, repr=False)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound as uvicorn binds one (``Config.bind_socket``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(BACKLOG)  # connections queue from now on, while the workers start
    return sock


def run_workers(config: Config, *, out: TextIO) -> int:
    """Run ``config.workers`` server processes on one port until a signal; their exit status when they cannot start."""
    try:
        sock = bind(config.host, config.port)
    except OSError as exc:
        print(f"harmony-responses serve: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr)
        return 1
    created_metrics_dir = None
    if not os.environ.get(METRICS_DIR_VARIABLE):
        created_metrics_dir = tempfile.mkdtemp(prefix="harmony-responses-metrics-")
        os.environ[METRICS_DIR_VARIABLE] = created_metrics_dir
    try:
        supervisor = _Supervisor(config, sock, out)
        try:
            return supervisor.run()
        finally:
            supervisor.sharing.close()
    finally:
        sock.close()
        if created_metrics_dir is not None:
            os.environ.pop(METRICS_DIR_VARIABLE, None)
            shutil.rmtree(created_metrics_dir, ignore_errors=True)


class _Supervisor:
    def __init__(self, config: Config, sock: socket.socket, out: TextIO) -> None:
        self.config = config
        self.sock = sock
        self.out = out
        self.context = multiprocessing.get_context("spawn")
        self.workers = [_Worker(slot) for slot in range(config.workers)]
        self.sharing = Sharing(self.context, config.workers)
        self.signals: list[int] = []

    def run(self) -> int:
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        previous_wakeup = signal.set_wakeup_fd(wake_write)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self._run(wake_read)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_wakeup)
            os.close(wake_read)
            os.close(wake_write)

    def _on_signal(self, sig: int, frame: Any) -> None:
        self.signals.append(sig)  # acted on in the loop, which the wakeup fd wakes

    def _run(self, wake: int) -> int:
        for worker in self.workers:
            self._start(worker)
        # Start-up: every worker listening, or the first failure ends them all.
        while not all(worker.ready for worker in self.workers):
            if self.signals:
                self._shut_down(wake)
                return 0
            self._wait(wake, None)
            for worker in self.workers:
                if worker.process is not None and not worker.process.is_alive() and not worker.ready:
                    code, how, error = self._exited(worker)
                    self._shut_down(wake, first=signal.SIGTERM)
                    print(f"harmony-responses serve: {error or how}", file=sys.stderr)
                    return code or 1
        engine_description, search = self.workers[0].descriptions or ("?", None)
        from .cli import banner

        host, port = self.sock.getsockname()[:2]
        text = banner(self.config, engine_description, host, port, search, workers=len(self.workers))
        print(text, file=self.out, flush=True)

        # Serving: restart whatever dies, until a signal.
        while not self.signals:
            now = time.monotonic()
            due = [w.restart_at for w in self.workers if w.restart_at is not None]
            self._wait(wake, max(0.0, min(due) - now) if due else None)
            now = time.monotonic()
            for worker in self.workers:
                process = worker.process
                if process is not None and not process.is_alive() and not self.signals:
                    self._schedule_restart(worker, now)
                elif process is None and worker.restart_at is not None and now >= worker.restart_at:
                    worker.restart_at = None
                    self._start(worker)
        self._shut_down(wake)
        return 0

    def _start(self, worker: _Worker) -> None:
        parent_end, child_end = self.context.Pipe()
        process = self.context.Process(
            target=worker_main,
            args=(self.config, self.sock, child_end, self.sharing, worker.slot),
            name=f"harmony-responses-worker-{worker.slot}",
        )
        process.start()
        child_end.close()
        worker.process, worker.pipe = process, parent_end
        worker.ready, worker.error, worker.started_at = False, None, time.monotonic()

    def _wait(self, wake: int, timeout: float | None) -> None:
        """Until a worker exits or reports, a signal arrives, or ``timeout``; reads what the workers reported."""
        handles: list[Any] = [wake]
        for worker in self.workers:
            if worker.process is not None:
                handles.append(worker.process.sentinel)
                if worker.pipe is not None:
                    handles.append(worker.pipe)
        for handle in wait(handles, timeout):
            if handle == wake:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake, 512)
        for worker in self.workers:
            self._read_reports(worker)

    def _read_reports(self, worker: _Worker) -> None:
        pipe = worker.pipe
        if pipe is None:
            return
        try:
            while pipe.poll():
                report = pipe.recv()
                if report[0] == "ready":
                    worker.ready = True
                    worker.descriptions = (report[1], report[2])
                    if worker.failures:
                        assert worker.process is not None
                        logger.warning("worker %d restarted (pid %d)", worker.slot, worker.process.pid)
                elif report[0] == "error":
                    worker.error = (report[1], report[2])
        except (EOFError, OSError):
            worker.pipe = None  # the worker is gone: its sentinel says so too
            pipe.close()

    def _exited(self, worker: _Worker) -> tuple[int, str, str | None]:
        """Reap a worker that exited: its status, how it ended, and why it could not start (its own words)."""
        assert worker.process is not None
        self._read_reports(worker)
        worker.process.join()
        self.sharing.loads[worker.slot] = ABSENT  # its connections went with it; the others take new ones
        handed, closed = self.sharing.rehome(worker.slot)
        if handed or closed:
            logger.warning(
                "worker %d exited with connections handed to it: %d handed on, %d closed (no worker listening)",
                worker.slot,
                handed,
                closed,
            )
        code = worker.process.exitcode or 0
        pid = worker.process.pid or 0
        worker.process.close()
        worker.process = None
        if worker.pipe is not None:
            worker.pipe.close()
            worker.pipe = None
        _worker_exited(pid)
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"
        error = worker.error
        return (
            (error[0] if error else code),
            f"worker {worker.slot} (pid {pid}) exited with {how}",
            (error[1] if error else None),
        )

    def _schedule_restart(self, worker: _Worker, now: float) -> None:
        was_ready, ran = worker.ready, now - worker.started_at
        _, how, error = self._exited(worker)
        if was_ready and ran >= STABLE_AFTER:
            worker.failures = 0
        worker.failures += 1
        delay = min(MAX_RESTART_DELAY, RESTART_DELAY * 2 ** (worker.failures - 1))
        worker.restart_at = now + delay
        why = f" ({error})" if error else ""
        logger.error("%s unexpectedly%s; restarting it in %.1f s", how, why, delay)

    def _shut_down(self, wake: int, first: int | None = None) -> None:
        """Send ``first`` (if given) and every signal received to every worker, and wait for each; a second
        signal is forwarded too (uvicorn's second Ctrl-C stops waiting for connections), and a worker still
        there well after its grace is killed."""
        self.sock.close()  # as one process does at shutdown: new connections are refused, not queued
        sent = 0
        deadline = time.monotonic() + self.config.shutdown_grace + KILL_AFTER
        while True:
            queue = ([first] if first is not None else []) + self.signals
            for sig in queue[sent:]:
                for worker in self.workers:
                    if worker.process is not None and worker.process.is_alive():
                        # A worker still starting has nothing to finish: SIGTERM ends it where it is, while
                        # Python's SIGINT would raise KeyboardInterrupt there, a traceback on the terminal.
                        forwarded = sig if worker.ready or sig != signal.SIGINT else signal.SIGTERM
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(worker.process.pid or 0, forwarded)
            sent = len(queue)
            for worker in self.workers:
                if worker.process is not None and not worker.process.is_alive():
                    self._exited(worker)
            alive = [w for w in self.workers if w.process is not None]
            if not alive:
                return
            if time.monotonic() > deadline:
                for worker in alive:
                    logger.error("worker %d did not stop within its shutdown grace: killed", worker.slot)
                    worker.process.kill()  # type: ignore[union-attr]
                deadline = float("inf")
            self._wait(wake, 0.5)


# Sharing.counts: each worker's open connections, those on their way to it, and those it has taken.
Counts = tuple[list[int], list[int], list[int]]


class Sharing:
    """What the workers share to spread connections among them (``SharedListener``), made by the parent.

    - ``loads``: each worker's open connections, ABSENT while it is not there or not listening;
    - ``handed`` and ``taken`` (N×N): at ``[i * N + j]``, the connections worker ``i`` handed to worker ``j``
      (only ``i`` writes it) and how many of those ``j`` has taken (only ``j`` writes it): the difference is on
      its way to ``j``, and counts as ``j``'s;
    - ``inboxes``: a datagram socket pair a worker: its own end, where the connections handed to it arrive
      (their file descriptors, ``SCM_RIGHTS``, one a datagram with the slot of the worker that handed it), and
      the end the others send them through.

    The parent keeps every socket: what was handed to a worker that exited is handed on by the parent
    (``rehome``), which writes the exited worker's counters in its place until it is restarted. Each counter
    has one writer, so none needs a lock; a read between two writes may be one off, which at worst hands one
    connection to a worker that has one more than it looked to have."""

    def __init__(self, context: Any, workers: int) -> None:
        self.workers = workers
        self.loads = context.RawArray("q", [ABSENT] * workers)
        self.handed = context.RawArray("q", workers * workers)
        self.taken = context.RawArray("q", workers * workers)
        self.inboxes = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(workers)]

    def counts(self) -> Counts:
        """Each worker's open connections (ABSENT: not listening), those on their way to it, and how many
        connections it has taken from its inbox so far."""
        n = self.workers
        handed, taken = self.handed[:], self.taken[:]
        into = [sum(handed[i * n + j] for i in range(n)) for j in range(n)]
        took = [sum(taken[i * n + j] for i in range(n)) for j in range(n)]
        return self.loads[:], [a - b for a, b in zip(into, took, strict=True)], took

    def fewest(
        self, slot: int | None, open_here: int = 0, *, counts: Counts | None = None, skip: Collection[int] = ()
    ) -> int | None:
        """Who is to keep a new connection: the listening worker (not in ``skip``) with the fewest connections,
        open and on their way to it; ``slot`` (the worker asking, with ``open_here`` open) among equals. None
        when no worker listens."""
        loads, waiting, _ = counts or self.counts()
        best, fewest = None, None
        if slot is not None:
            best, fewest = slot, open_here + waiting[slot]
        for j, load in enumerate(loads):
            if j != slot and load != ABSENT and j not in skip and (fewest is None or load + waiting[j] < fewest):
                best, fewest = j, load + waiting[j]
        return best

    def hand(self, sender: int, target: int, fd: int) -> bool:
        """Hand connection ``fd`` to worker ``target`` (and close it here); False when its inbox is full."""
        try:
            self.inboxes[target][1].sendmsg([sender.to_bytes(4, "little")], _rights(fd), socket.MSG_DONTWAIT)
        except OSError:
            return False
        self.handed[sender * self.workers + target] += 1
        os.close(fd)
        return True

    def take(self, slot: int) -> Iterator[tuple[int, int]]:
        """The connections waiting in worker ``slot``'s inbox, each counted as taken: (who handed it, its fd)."""
        inbox = self.inboxes[slot][0]
        while True:
            try:
                data, ancillary, _, _ = inbox.recvmsg(4, _RIGHTS_SPACE, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            sender = int.from_bytes(data, "little")
            for fd in _fds(ancillary):  # one
                self.taken[sender * self.workers + slot] += 1
                yield sender, fd

    def rehome(self, slot: int) -> tuple[int, int]:
        """Hand what waits in the inbox of worker ``slot`` (which exited) to the others, or close it when none
        listens (or all their inboxes are full); how many connections were handed on, and how many closed."""
        handed = closed = 0
        for _, fd in self.take(slot):
            target = self.fewest(None)
            if target is not None and self.hand(slot, target, fd):
                handed += 1
            else:
                os.close(fd)
                closed += 1
        return handed, closed

    def close(self) -> None:
        for inbox in self.inboxes:
            for end in inbox:
                end.close()


# Python 3.11's socket.send_fds and recv_fds drop their flags argument (MSG_DONTWAIT): a worker must not block
# on its own inbox, nor on another's that is full, so Sharing goes through sendmsg and recvmsg itself.
_RIGHTS_SPACE = socket.CMSG_SPACE(array.array("i").itemsize)


def _rights(fd: int) -> list[tuple[int, int, bytes]]:
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())]


def _fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


class SharedListener(socket.socket):
    """The parent's listening socket as one worker accepts on it, each connection kept by the worker with the
    fewest open.

    Every worker wakes when a connection waits, and whichever gets there first takes it: asyncio accepts as
    many as wait each time it is woken (uvicorn's backlog, 2048). Of 64 requests sent at once, one worker took
    40 to all 64 (``ss``; one accept a turn alone did no better), and a burst lasted as long as that worker took
    for its share. So the worker that accepts a connection keeps it only while no other has fewer (open, and on
    their way to it), and otherwise hands it to the one with the fewest through that worker's inbox
    (``Sharing``): every connection of a burst is accepted as soon as one worker runs, and each worker starts
    its share together, as one process starts a burst.

    Before, a worker left a waiting connection in the backlog, for up to 10 ms, to one with fewer, and spun on
    the ready socket meanwhile: with the other worker busy or descheduled, a burst came in one or two connections
    at a time, its first streams ran alone to their end while the rest waited, and the workers made 5-17 % fewer
    tokens per CPU second than one process (``bench/workers_bench.py``)."""

    def __init__(self, sharing: Sharing, slot: int, *, fileno: int) -> None:
        super().__init__(fileno=fileno)
        self.sharing, self.slot = sharing, slot
        self.open = 0  # connections kept (accepted here or taken from the inbox) and not closed
        self._shown = False
        self._serving: set[asyncio.Task[Any]] = set()
        # Each other worker's count of connections taken, and since when it has been seen so with some waiting.
        self._progress: dict[int, tuple[int, float]] = {}

    def show(self) -> None:
        """Show this worker's count to the others from now on: it listens. Before, they would hand connections
        to a worker still starting (its engine check may take seconds)."""
        self._shown = True
        self.sharing.loads[self.slot] = self.open

    def hide(self) -> None:
        """No more connections for this worker (it is shutting down): the others keep theirs."""
        self._shown = False
        self.sharing.loads[self.slot] = ABSENT

    def count(self, change: int) -> None:
        self.open += change
        if self._shown:
            self.sharing.loads[self.slot] = self.open  # only this process writes its slot while it is there

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            fd, address = self._accept()  # type: ignore[attr-defined]  # BlockingIOError: none waits
            counts = self.sharing.counts()
            target = self.sharing.fewest(self.slot, self.open, counts=counts, skip=self._stuck(counts))
            if target is None or target == self.slot or not self.sharing.hand(self.slot, target, fd):
                self.count(1)
                return _CountedConnection(self, fd), address

    def _stuck(self, counts: Counts) -> set[int]:
        """The workers that have had connections waiting in their inbox and taken none for ``STUCK_AFTER``
        seconds: a worker takes its inbox every loop turn, so one that does not is stuck (or stopped), and
        new connections go to the others until it takes again. What waits for it stays: it is served once the
        worker goes on, or handed on by the parent if it exits."""
        _, waiting, took = counts
        now, stuck = time.monotonic(), set()
        for j in range(self.sharing.workers):
            seen = self._progress.get(j)
            if j == self.slot or waiting[j] <= 0 or seen is None or seen[0] != took[j]:
                self._progress[j] = (took[j], now)
            elif now - seen[1] >= STUCK_AFTER:
                stuck.add(j)
        return stuck

    def take_handed(
        self, loop: asyncio.AbstractEventLoop, protocol_factory: Callable[[], asyncio.Protocol]
    ) -> Callable[[], None]:
        """Serve the connections other workers hand to this one, as asyncio serves those it accepts, from now on;
        returns what stops it (and hides this worker from the others)."""
        inbox = self.sharing.inboxes[self.slot][0].fileno()

        def take() -> None:
            for _, fd in self.sharing.take(self.slot):
                connection = _CountedConnection(self, fd)
                self.count(1)
                task = loop.create_task(_serve(loop, protocol_factory, connection))
                self._serving.add(task)
                task.add_done_callback(self._serving.discard)

        def stop() -> None:
            loop.remove_reader(inbox)
            self.hide()

        loop.add_reader(inbox, take)
        return stop


async def _serve(
    loop: asyncio.AbstractEventLoop, protocol_factory: Callable[[], asyncio.Protocol], connection: socket.socket
) -> None:
    try:
        await loop.connect_accepted_socket(protocol_factory, connection)
    except OSError:  # the client went away before it was served
        connection.close()


class _CountedConnection(socket.socket):
    """An accepted connection that gives its place in its worker's count back when it is closed."""

    def __init__(self, listener: SharedListener, fd: int) -> None:
        super().__init__(listener.family, listener.type, listener.proto, fileno=fd)
        self._listener: SharedListener | None = listener

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.count(-1)
        super().close()


def worker_main(config: Config, sock: socket.socket, parent: Connection, sharing: Sharing, slot: int) -> None:
    """A worker process: serve ``config`` on ``sock``; report ``ready`` (or why it cannot start) to the parent."""
    os.setpgrp()  # its own process group: a terminal's Ctrl-C goes to the parent, which forwards it once
    from .app import web_search_from_config
    from .cli import configure_logging, run_server
    from .engines import build_engines, describe_engines

    configure_logging(config)
    engines = build_engines(config)  # the parent checked the configuration
    web_search = web_search_from_config(config)

    listener = SharedListener(sharing, slot, fileno=sock.detach())

    def on_listening(host: str, port: int) -> None:
        listener.show()
        description = describe_engines(engines)
        parent.send(("ready", description, web_search.describe() if web_search is not None else None))

    code, error = run_server(
        config,
        engines,
        web_search,
        on_listening=on_listening,
        sockets=[listener],
        take_handed=listener.take_handed,
        supervisor=parent,
    )
    if error is not None:
        with contextlib.suppress(OSError):
            parent.send(("error", code, error))
    sys.exit(code)


def _worker_exited(pid: int) -> None:
    """A worker is gone: its live gauges stop counting in the metrics the workers share."""
    from ..metrics import mark_process_dead  # here, not at the top: the parent needs prometheus-client only now

    try:
        mark_process_dead(pid)
    except Exception:  # metrics must never take the supervisor down
        logger.exception("metrics: could not mark worker pid %d dead", pid)
