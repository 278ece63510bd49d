"""Containers (``cntr_…``): a sandboxed Python REPL that keeps its state across calls, and their lifetimes.

A ``code_interpreter`` tool with ``container: {"type": "auto"}`` gets a new container for the response; one
with ``container: "cntr_…"`` reuses a live container (its variables and files) — an unknown or expired id
is the client's error (400). A container belongs to the API key that created it (its owner hash, as every
stored object does): another key naming its id gets the same 400 as for an unknown id, so ids are not a
capability that leaks one key's files to another. A container's sandbox process starts at its first call
and the container expires after ``idle_seconds`` without a call (OpenAI's containers: 20 minutes), which
kills the process.
At most ``max_running`` sandboxes run at once: starting another expires the least recently used idle one.

The ``ContainerManager`` lives as long as the app (``run.Server`` closes it at shutdown). It probes bwrap
at startup, in the background (the answer is cached per process); when sandboxing is unavailable and the
operator did not opt out (``unsafe``), every call answers an error result saying why, and the startup log
says it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import anyio.to_thread

from ...ids import random_id
from .._base import ToolCall, ToolResult, ToolSession
from ._cgroup import cgroup_support
from ._sandbox import CellResult, Sandbox, SandboxLimits, SandboxUnavailable, probe_sandbox

__all__ = [
    "CodeInterpreterSession",
    "Container",
    "ContainerManager",
    "ContainerNotFound",
    "code_interpreter_session",
]

logger = logging.getLogger("harmony_responses.tools.code_interpreter")

DEFAULT_IDLE_SECONDS = 20 * 60
DEFAULT_MAX_RUNNING = 16
DEFAULT_MAX_CONTAINERS = 1000


class Container:
    """One container: an id, its owner, a lazily started sandbox, and a lock so that calls run one at a time."""

    def __init__(self, container_id: str, manager: ContainerManager, *, owner: str = "") -> None:
        self.id = container_id
        self.owner = owner  # the creating API key's owner hash ("" without authentication)
        self._manager = manager
        self._sandbox: Sandbox | None = None
        self._lock = asyncio.Lock()
        self.last_used = manager.clock()
        self.expired = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        return self._sandbox is not None and self._sandbox.started

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def run(self, code: str) -> CellResult:
        """Run one cell (waiting for a call of another response on the same container to finish first).

        Raises:
            SandboxUnavailable: the sandbox could not be started.
        """
        async with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self.last_used = self._manager.clock()
            try:
                if self._sandbox is None or self._sandbox.dead:
                    await self._manager.make_room(self)
                    self._sandbox = await self._manager.new_sandbox()
                    await self._sandbox.start()
                return await self._sandbox.run(code)
            except BaseException:
                # Cancelled (client gone) or failed mid-call: the REPL is in an unknown state; start afresh.
                sandbox, self._sandbox = self._sandbox, None
                if sandbox is not None:
                    with anyio.CancelScope(shield=True):
                        await sandbox.kill()
                raise
            finally:
                self.last_used = self._manager.clock()
                self._arm_timer()

    def _arm_timer(self) -> None:
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to arm (shutdown)
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._manager.idle_seconds, self._manager.expire_if_idle, self)

    async def stop(self) -> None:
        """Kill the sandbox (the container's state is gone)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            await sandbox.kill()


class ContainerManager:
    """Every container of the server.

    Args:
        limits: the sandbox limits (per call and per container).
        python: the interpreter to run inside the sandbox (a path under /usr, or a name found there).
        unsafe: when bwrap does not work here, run code without it (the operator's explicit opt-out; see
            ``_sandbox``) instead of refusing.
        idle_seconds: a container expires after this long without a call.
        max_running: sandboxes alive at once.
        max_containers: containers known at once (the oldest idle ones expire first).
        clock: monotonic seconds (tests inject one).
    """

    def __init__(
        self,
        *,
        limits: SandboxLimits | None = None,
        python: str = "python3",
        unsafe: bool = False,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        max_running: int = DEFAULT_MAX_RUNNING,
        max_containers: int = DEFAULT_MAX_CONTAINERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.python = python
        self.unsafe = unsafe
        self.idle_seconds = idle_seconds
        self.max_running = max_running
        self.max_containers = max_containers
        self.clock = clock
        self.unavailable: str | None = None  # why code cannot run here, once probed
        self._containers: dict[str, Container] = {}
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._probe: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Probe the sandbox in the background (app startup); the first call waits for the answer.

        Logs a warning when code cannot run, or will run without isolation (``unsafe``).
        """
        if self._probe is None:
            self._probe = asyncio.get_running_loop().create_task(self._run_probe())

    async def _run_probe(self) -> None:
        self.unavailable = await anyio.to_thread.run_sync(probe_sandbox, self.python)
        cgroups = await anyio.to_thread.run_sync(cgroup_support)
        if cgroups.available:
            logger.info("code interpreter: each sandbox gets its own %s", cgroups.describe())
        else:
            logger.warning(
                "code interpreter: %s: sandboxes are bounded per process (memory, CPU time), per uid (processes) "
                "and per mount (disk), not as a whole",
                cgroups.describe(),
            )
        if self.unavailable is None:
            return
        if self.unsafe:
            logger.warning(
                "code interpreter: %s; running code WITHOUT a sandbox (--unsafe-code-interpreter): model-written "
                "code can read what the server's user can read and reach the network",
                self.unavailable,
            )
        else:
            logger.warning(
                "code interpreter disabled: %s. Calls to it will fail with this reason; install bubblewrap, "
                "or start the server with --unsafe-code-interpreter to run code without isolation.",
                self.unavailable,
            )

    @property
    def runs_unsafe(self) -> bool:
        """Code runs without bwrap: the operator opted out and bwrap does not work here."""
        return self.unsafe and self.unavailable is not None

    async def new_sandbox(self) -> Sandbox:
        """A sandbox (not started yet): bwrap when it works here, else unsafe if the operator opted out.

        Raises:
            SandboxUnavailable: sandboxing does not work here (the probe said why) and there is no opt-out.
        """
        self.start()
        assert self._probe is not None
        await asyncio.shield(self._probe)
        if self.unavailable is not None and not self.unsafe:
            raise SandboxUnavailable(self.unavailable)
        return Sandbox(limits=self.limits, python=self.python, unsafe=self.runs_unsafe)

    def create(self, owner: str = "") -> Container:
        """A new container of ``owner`` (no process until its first call)."""
        self._forget_expired()
        if len(self._containers) >= self.max_containers:
            idle = sorted((c for c in self._containers.values() if not c.busy), key=lambda c: c.last_used)
            for container in idle[: len(self._containers) - self.max_containers + 1]:
                self._expire(container)
        container = Container(random_id("cntr"), self, owner=owner)
        self._containers[container.id] = container
        return container

    def get(self, container_id: str, owner: str = "") -> Container | None:
        """The live container with that id that ``owner`` made, or None (unknown, expired or someone else's)."""
        self._forget_expired()
        container = self._containers.get(container_id)
        if container is None or container.owner != owner:
            return None
        return container

    async def make_room(self, starting: Container) -> None:
        """Before a sandbox starts: expire least recently used idle containers beyond ``max_running``."""
        running = [c for c in self._containers.values() if c.running and c is not starting]
        excess = len(running) + 1 - self.max_running
        if excess <= 0:
            return
        for container in sorted((c for c in running if not c.busy), key=lambda c: c.last_used)[:excess]:
            logger.info("code interpreter: container %s expired early (too many sandboxes running)", container.id)
            self._containers.pop(container.id, None)
            container.expired = True
            await container.stop()

    def expire_if_idle(self, container: Container) -> None:
        if not container.busy and self.clock() - container.last_used >= self.idle_seconds * 0.999:
            self._expire(container)

    def _expire(self, container: Container) -> None:
        self._containers.pop(container.id, None)
        container.expired = True
        task = asyncio.get_running_loop().create_task(container.stop())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _forget_expired(self) -> None:
        now = self.clock()
        for container in list(self._containers.values()):
            if not container.busy and now - container.last_used >= self.idle_seconds:
                self._expire(container)

    async def aclose(self) -> None:
        """Kill every sandbox (server shutdown)."""
        self._closed = True
        containers, self._containers = list(self._containers.values()), {}
        for container in containers:
            container.expired = True
            with contextlib.suppress(Exception):
                await container.stop()
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task
        if self._probe is not None and not self._probe.done():
            self._probe.cancel()

    def description(self) -> str:
        """The ``python`` namespace description the model reads: what this sandbox really does."""
        limits = self.limits
        wall = f"{limits.wall_seconds:g}"
        if self.runs_unsafe:
            where = "The current working directory can be used to save and persist files."
            network = "Internet access is not guaranteed."
        else:
            where = "The drive at '/mnt/data' can be used to save and persist user files."
            network = "Internet access for this session is disabled: you cannot download data or install packages."
        return (
            "Use this tool to execute Python code in your chain of thought. The code will not be shown to the "
            "user. This tool should be used for internal reasoning, but not for code that is intended to be "
            "visible to the user (e.g. when creating plots, tables, or files).\n"
            "\n"
            "When you send a message containing Python code to python, it will be executed in a stateful "
            "Jupyter-notebook-like environment: variables, imports and files persist between calls. python will "
            "respond with the printed output and the value of the last expression, or time out after "
            f"{wall} seconds. {where} {network} Only the Python standard library and the packages already "
            "installed are available."
        )

    def session(self, container: Container, *, include_outputs: bool) -> CodeInterpreterSession:
        return CodeInterpreterSession(container, self, include_outputs=include_outputs)


class CodeInterpreterSession(ToolSession):
    """The ``python`` tool of one response: runs each call's code in the response's container."""

    namespace = "python"

    def __init__(self, container: Container, manager: ContainerManager, *, include_outputs: bool) -> None:
        self.container = container
        self._manager = manager
        self._include_outputs = include_outputs

    async def call(self, call: ToolCall) -> ToolResult:
        limits = self._manager.limits
        if self.container.expired:
            message = (
                f"The container {self.container.id} has expired (idle for too long, or evicted); its state is gone."
            )
            return self._result(f"[ERROR] {message}", error=message)
        try:
            cell = await self.container.run(call.arguments)
        except SandboxUnavailable as exc:
            message = f"The code interpreter is not available on this server: {exc}."
            return self._result(f"[ERROR] {message}", error=message)
        text = cell.output
        if cell.dropped_bytes:
            text += f"\n[… output truncated: {cell.dropped_bytes} more bytes were not kept]\n"
        error: str | None = None
        if cell.status == "timeout":
            error = (
                f"Execution interrupted: the code ran longer than the {limits.wall_seconds:g} s time limit. "
                "Variables defined before the interruption are kept."
            )
        elif cell.status == "cpu":
            error = (
                f"Execution interrupted: the code used more than {limits.cpu_seconds} s of CPU time. "
                "Variables defined before the interruption are kept."
            )
        elif cell.status == "killed":
            error = (
                f"The code did not stop at the {limits.wall_seconds:g} s time limit, so its sandbox was killed. Its "
                "state (variables and files) is lost: the next call starts in a fresh sandbox."
            )
        elif cell.status == "crashed" and cell.detail is not None:
            error = (
                f"The sandbox was killed: {cell.detail}. Its state (variables and files) is lost: the next call "
                "starts in a fresh sandbox."
            )
        elif cell.status == "crashed":
            how = f" (exit status {cell.exit_code})" if cell.exit_code is not None else ""
            error = (
                f"The Python process ended unexpectedly{how}. Its state (variables and files) is lost: the next "
                "call starts in a fresh sandbox."
            )
        if error is not None:
            text = f"{text.rstrip()}\n[ERROR] {error}".lstrip("\n")
        elif not text:
            text = "[no output]"
        return self._result(text, error=error)

    def _result(self, text: str, *, error: str | None) -> ToolResult:
        outputs = [{"type": "logs", "logs": text}] if self._include_outputs else None
        return ToolResult(text=text, error=error, outputs=outputs)


class ContainerNotFound(LookupError):
    """A request named a container id that is unknown or expired (the client's error: 400)."""

    def __init__(self, container_id: str, param: str) -> None:
        super().__init__(
            f"Container '{container_id}' not found: it does not exist or has expired (containers expire after "
            'some idle time). Use {"type": "auto"} to start a new one.'
        )
        self.container_id = container_id
        self.param = param


def code_interpreter_session(
    tools: Any, manager: ContainerManager, *, include_outputs: bool, owner: str = ""
) -> CodeInterpreterSession | None:
    """The ``python`` session for a request's ``tools`` (None without a ``code_interpreter`` tool).

    ``container: {"type": "auto"}`` creates a container owned by ``owner`` (the request's API key hash); a
    ``cntr_…`` string reuses a live one of the same owner.

    Raises:
        ContainerNotFound: the named container is unknown, expired, or another owner's.
    """
    for i, tool in enumerate(tools or ()):
        if isinstance(tool, dict) and tool.get("type") == "code_interpreter":
            wanted = tool.get("container")
            if isinstance(wanted, str):
                container = manager.get(wanted, owner)
                if container is None:
                    raise ContainerNotFound(wanted, f"tools[{i}].container")
            else:
                container = manager.create(owner)
            return manager.session(container, include_outputs=include_outputs)
    return None
