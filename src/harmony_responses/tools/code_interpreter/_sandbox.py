"""The sandbox: one persistent Python REPL (``_driver.py``) in its own bubblewrap jail, driven over pipes.

Isolation (``bwrap``, Debian package ``bubblewrap``):

- every namespace unshared (``--unshare-all``): no network (a fresh network namespace with only a down
  loopback), its own PID tree (killing the sandbox kills every process in it), IPC, UTS and user namespace,
  no further user namespaces inside (``--disable-userns``);
- a minimal filesystem: ``/usr`` and the ``/lib*``, ``/bin`` links read-only (the Python runtime and its
  libraries), a few ``/etc`` files the runtime reads, a fresh ``/proc`` and ``/dev``. The root and ``/dev``
  are remounted read-only once set up, so the only writable places are the capped tmpfs mounts:
  ``/tmp`` and ``/mnt/data`` (the private working directory, ``disk_bytes`` each) and ``/dev/shm``
  (``shm_bytes``), each holding at most ``inodes`` files and directories (``nr_inodes``: bwrap cannot set
  it, so the driver mounts them again itself, ``_driver.py`` says how). Nothing else of the host: not the
  server's code or data (``/work``, ``/root``, ``/home``), not its environment (``--clearenv``);
- ``--die-with-parent`` and ``--new-session`` (no terminal to inject keystrokes into).

Resource limits (``setrlimit`` in the child before ``bwrap`` starts, inherited by everything inside):
address space, CPU time (the driver moves the soft limit per call; the hard limit caps the container),
file size, open files, no core dumps, and the number of processes. ``RLIMIT_NPROC`` counts per real uid,
and root is exempt from it, so a server running as root starts each sandbox as a fresh unprivileged uid
(from ``UID_BASE``): the limit then counts exactly that sandbox's processes. A server running as an
ordinary user runs sandboxes as itself, and the limit is set to that user's current process count plus the
sandbox's allowance.

rlimits are per process: where the host offers a cgroup (``_cgroup``), each sandbox also gets its own, so
memory (tmpfs pages included), processes and CPU are bounded for the sandbox as a whole. And whatever a
cell starts ends with the cell: before the driver replies it kills every other process in the sandbox,
and stops the threads the cell started (``_driver.py``).

Replies: each command carries a random nonce that the driver's reply repeats; any other frame on the reply
pipe (code in the REPL's process can write there) is skipped, so that a forged reply cannot leave the
host one reply ahead of the driver (every later call answered with the previous one's result).

Time: the driver interrupts a cell at its wall-clock limit (state kept); if the cell does not come back
within a grace period the host kills the whole sandbox (state lost) and says so. Output (stdout and
stderr, one pipe) is read continuously and kept up to ``output_bytes`` per call; the rest is counted and
dropped, and the result says how much was cut.

``unsafe=True`` (the operator's explicit opt-out, ``--unsafe-code-interpreter``) runs the same driver
without bwrap: same rlimits, clean environment, a private temporary directory, its own session, but the
code can read whatever the server's user can read and reach the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import resource
import secrets
import shutil
import signal
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from ._cgroup import SandboxCgroup, cgroup_support

__all__ = ["CellResult", "Sandbox", "SandboxLimits", "SandboxUnavailable", "probe_sandbox"]

logger = logging.getLogger("harmony_responses.tools.code_interpreter")

WORKDIR = "/mnt/data"
# Unprivileged uids for sandboxes started by a root server: a fresh one per sandbox (RLIMIT_NPROC counts per
# uid), rotating through a range no real account uses, so that a uid is reused only long after its sandbox died.
UID_BASE = 1_500_000
UID_COUNT = 1_000_000
_uids = itertools.count()
# What the runtime reads from /etc, when present (the dynamic linker cache, time zone, alternatives links).
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives", "/etc/python3", "/etc/mime.types")
_FRAME = struct.Struct(">I")
# The largest reply frame the host reads. Replies are a status object of a few dozen bytes, but the REPL's
# process runs the model's code, which can write to the reply pipe itself: a frame length is the sandbox's
# claim, not a fact. Without a cap the host would buffer whatever it claims (up to 4 GiB); anything larger
# than this means the REPL is no longer the driver we started, so the sandbox is treated as crashed.
MAX_REPLY_BYTES = 4 * 1024 * 1024
_DRIVER: str | None = None

CellStatus = Literal["ok", "error", "timeout", "cpu", "killed", "crashed"]
_CELL_STATUSES = frozenset(("ok", "error", "timeout", "cpu"))  # what the driver itself may report


class _ProtocolBroken(Exception):
    """The sandbox's reply pipe carried something the driver never sends (the message says what)."""


class SandboxUnavailable(Exception):
    """The sandbox cannot be started here (no bwrap, or no namespaces): the message says why."""


@dataclass(frozen=True, kw_only=True)
class SandboxLimits:
    """Limits of one sandbox. Per call: ``wall_seconds``, ``cpu_seconds``, ``output_bytes``; the rest per sandbox."""

    wall_seconds: float = 60.0
    cpu_seconds: int = 60
    total_cpu_seconds: int = 600  # hard RLIMIT_CPU of each process: what a container may spend in all
    # RLIMIT_AS per process, and (where a cgroup is available) the memory of the whole sandbox, tmpfs included
    memory_bytes: int = 1024 * 1024 * 1024
    processes: int = 32  # RLIMIT_NPROC (and the cgroup's pids.max): processes and threads inside the sandbox
    file_bytes: int = 64 * 1024 * 1024  # RLIMIT_FSIZE: the largest file code may write
    open_files: int = 256  # RLIMIT_NOFILE
    disk_bytes: int = 256 * 1024 * 1024  # size of the /mnt/data tmpfs (and of /tmp)
    shm_bytes: int = 64 * 1024 * 1024  # size of the /dev/shm tmpfs
    # Files and directories each tmpfs mount may hold (nr_inodes): an inode's kernel memory (~700 bytes) is
    # not in the size cap, so without it a million empty files took ~700 MB of the host's memory.
    inodes: int = 32_768
    cpus: float = 1.0  # CPU bandwidth of the whole sandbox, in cores (cgroup only)
    output_bytes: int = 32 * 1024  # output kept per call; the rest is dropped with a marker
    grace_seconds: float = 5.0  # after wall_seconds, before the host kills a sandbox that did not stop
    start_seconds: float = 20.0  # the most a sandbox may take to start


@dataclass(frozen=True, slots=True)
class CellResult:
    """What one call produced. ``status``: ``ok``/``error`` (a traceback is in ``output``), ``timeout``/``cpu``
    (interrupted by the driver; state kept), ``killed`` (did not stop: the sandbox was killed, state lost),
    ``crashed`` (the REPL process died, or broke the reply protocol and was killed: state lost; ``detail``
    says which, when known)."""

    status: CellStatus
    output: str
    dropped_bytes: int = 0
    exit_code: int | None = None
    detail: str | None = None


def _driver_source() -> str:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = resources.files(__package__).joinpath("_driver.py").read_text(encoding="utf-8")
    return _DRIVER


def _bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _root_links() -> list[str]:
    """bwrap arguments for /bin, /sbin and /lib*: a symlink where the host has one (merged /usr), else a bind."""
    args: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def capped_mounts(limits: SandboxLimits) -> list[tuple[str, int, int, str]]:
    """The tmpfs mounts the driver makes over bwrap's: (path, size, inodes, mode)."""
    return [
        ("/tmp", limits.disk_bytes, limits.inodes, "1777"),
        (WORKDIR, limits.disk_bytes, limits.inodes, "755"),
        ("/dev/shm", limits.shm_bytes, limits.inodes, "1777"),
    ]


def bwrap_command(python: str, driver: str, cmd_fd: int, reply_fd: int, limits: SandboxLimits) -> list[str]:
    bwrap = _bwrap_path()
    if bwrap is None:
        raise SandboxUnavailable(
            "bubblewrap ('bwrap') is not installed: install the Debian package 'bubblewrap' (scripts/install does)"
        )
    args = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/local/bin:/usr/bin:/bin",
        "--setenv",
        "HOME",
        WORKDIR,
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "MPLBACKEND",
        "Agg",
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
        "--ro-bind",
        "/usr",
        "/usr",
        *_root_links(),
    ]
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    args += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        # bwrap's /dev is an uncapped tmpfs, /dev/shm a directory in it: a capped tmpfs of its own instead.
        "--size",
        str(limits.shm_bytes),
        "--tmpfs",
        "/dev/shm",
        "--size",
        str(limits.disk_bytes),
        "--tmpfs",
        "/tmp",
        "--size",
        str(limits.disk_bytes),
        "--tmpfs",
        WORKDIR,
        # The root (and /dev) are tmpfs without a size: read-only once every mount point is made, so that
        # the capped mounts above are the only places code can write to.
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        WORKDIR,
        # For the driver's own mounts only, in the sandbox's user namespace: it drops every capability before
        # it runs a cell (_driver.py), and the init bwrap leaves as pid 1 has none.
        "--cap-add",
        "CAP_SYS_ADMIN",
        "--",
        python,
        "-I",
        "-c",
        driver,
        WORKDIR,
        str(cmd_fd),
        str(reply_fd),
        "namespace",  # the driver is in a PID namespace of its own: every other process there is the cell's
        json.dumps(capped_mounts(limits)),
    ]
    return args


def _count_processes(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += 1
    return count


def _preexec(limits: SandboxLimits, nproc: int, uid: int | None, cgroup: SandboxCgroup | None) -> None:
    """Runs in the child between fork and exec: the cgroup, the uid, and the rlimits everything inside inherits.

    The cgroup is joined first, while the child is still the server's user (root can move itself anywhere;
    the sandbox's uid could not), so that bwrap and everything it starts are inside it from the start.
    """
    if cgroup is not None:
        cgroup.enter()
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    cpu = limits.total_cpu_seconds
    for what, value in (
        (resource.RLIMIT_AS, limits.memory_bytes),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_FSIZE, limits.file_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, nproc),
    ):
        resource.setrlimit(what, (value, value))
    # The parent (uvicorn) may ignore or block signals; the REPL needs SIGALRM/SIGXCPU/SIGINT defaults.
    for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGXCPU, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


class _Output(asyncio.Protocol):
    """The sandbox's stdout+stderr: always drained (a full pipe would stall the code), kept up to a cap per call."""

    def __init__(self, cap: int) -> None:
        self.buffer = bytearray()
        self.cap = cap
        self.dropped = 0
        self.closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        room = self.cap - len(self.buffer)
        if room > 0:
            self.buffer += data[:room]
        self.dropped += max(0, len(data) - max(room, 0))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def take(self) -> tuple[bytes, int]:
        data, dropped = bytes(self.buffer), self.dropped
        self.buffer.clear()
        self.dropped = 0
        return data, dropped


class Sandbox:
    """One running REPL. Not safe for concurrent ``run`` calls: the container serialises them."""

    def __init__(self, *, limits: SandboxLimits, python: str = "python3", unsafe: bool = False) -> None:
        self.limits = limits
        self.python = python
        self.unsafe = unsafe
        self._process: asyncio.subprocess.Process | None = None
        self._cmd: asyncio.WriteTransport | None = None
        self._reply: asyncio.StreamReader | None = None
        self._output: _Output | None = None
        self._output_transport: asyncio.ReadTransport | None = None
        self._reply_transport: asyncio.ReadTransport | None = None
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self.dead = False
        self.uid: int | None = None  # the unprivileged uid it runs as (root servers only)
        self.cgroup: SandboxCgroup | None = None  # its own cgroup, where the host offers one

    @property
    def started(self) -> bool:
        return self._process is not None

    async def start(self) -> None:
        """Start the REPL.

        Raises:
            SandboxUnavailable: bwrap is missing or cannot set up the sandbox here.
        """
        loop = asyncio.get_running_loop()
        cmd_r, cmd_w = os.pipe()
        reply_r, reply_w = os.pipe()
        out_r, out_w = os.pipe()
        child_fds = (cmd_r, reply_w, out_w)
        uid = gid = None
        if os.geteuid() == 0:
            uid = gid = self.uid = UID_BASE + next(_uids) % UID_COUNT
            nproc = self.limits.processes + 3  # + bwrap's own two processes and the driver
        else:
            nproc = _count_processes(os.geteuid()) + self.limits.processes + 3
        try:
            driver = _driver_source()
            if self.unsafe:
                self._tempdir = tempfile.TemporaryDirectory(prefix="harmony-code-")
                workdir = self._tempdir.name
                if uid is not None:
                    os.chown(workdir, uid, gid or uid)
                command = [self.python, "-I", "-c", driver, workdir, str(cmd_r), str(reply_w), "session"]
                env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "MPLBACKEND": "Agg"}
                cwd: str | None = workdir
            else:
                command = bwrap_command(self.python, driver, cmd_r, reply_w, self.limits)
                env, cwd = {}, "/"
            self.cgroup = self._make_cgroup()
            cgroup = self.cgroup
            try:
                self._process = await asyncio.create_subprocess_exec(
                    *command,
                    stdin=subprocess.DEVNULL,
                    stdout=out_w,
                    stderr=out_w,
                    pass_fds=(cmd_r, reply_w),
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                    # The uid change happens in _preexec, after the child joined its cgroup.
                    preexec_fn=lambda: _preexec(self.limits, nproc, uid, cgroup),
                )
            except (OSError, subprocess.SubprocessError) as exc:
                self._drop_cgroup()
                raise SandboxUnavailable(f"cannot start the sandbox: {exc}") from exc
        finally:
            for fd in child_fds:
                os.close(fd)
        self._cmd, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(cmd_w, "wb", buffering=0))
        self._reply = asyncio.StreamReader(limit=1 << 20)
        self._reply_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(self._reply), os.fdopen(reply_r, "rb", buffering=0)
        )
        self._output = _Output(self.limits.output_bytes)
        self._output_transport, _ = await loop.connect_read_pipe(
            lambda: self._output, os.fdopen(out_r, "rb", buffering=0)
        )

    async def run(self, code: str) -> CellResult:
        """Run one cell; never raises for anything the code does (see ``CellResult.status``)."""
        if self._process is None:
            await self.start()
        assert self._cmd is not None and self._reply is not None and self._output is not None
        process = self._process
        limits = self.limits
        output = self._output
        # Output printed between calls (by a background thread, say) is shown with the next call's, as a
        # notebook would; what the sandbox wrote while starting (bwrap's complaints) goes with the first.
        nonce = secrets.token_hex(16)
        command = json.dumps(
            {"code": code, "cpu": limits.cpu_seconds, "wall": limits.wall_seconds, "nonce": nonce}
        ).encode()
        status: CellStatus
        detail: str | None = None
        try:
            self._cmd.write(_FRAME.pack(len(command)) + command)
            async with asyncio.timeout(limits.wall_seconds + limits.grace_seconds):
                reply = await self._read_reply(nonce)
            status = reply.get("status", "crashed")
            if status not in _CELL_STATUSES:
                raise _ProtocolBroken(f"the sandbox sent a reply the server cannot read ({str(reply)[:80]!r})")
        except TimeoutError:
            status = "killed"
            await self.kill()
        except _ProtocolBroken as exc:
            # Not a driver any more: nothing it says can be trusted, so it goes, and the call says why.
            status, detail = "crashed", str(exc)
            logger.warning("code interpreter: killing a sandbox: %s", detail)
            await self.kill()
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError):
            status = "crashed"
            # Let the pipes drain what the dying process wrote (its last words are the traceback), and bwrap
            # pass on its exit status, before killing what is left.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    await output.closed
                    if process is not None:
                        await process.wait()
            await self.kill()
        else:
            # The reply follows the cell's flushed output, but the two pipes are read independently: give
            # the output pipe a moment to catch up with what is already written.
            await asyncio.sleep(0)
            await asyncio.sleep(0.01)
        data, dropped = output.take()
        exit_code = process.returncode if process is not None and status == "crashed" else None
        return CellResult(
            status=status,
            output=data.decode("utf-8", errors="replace"),
            dropped_bytes=dropped,
            exit_code=exit_code,
            detail=detail,
        )

    async def _read_reply(self, nonce: str) -> dict[str, Any]:
        """The driver's reply to the command carrying ``nonce``; frames without it are skipped (written by
        the cell, or the driver's reply to an earlier call that a frame with its nonce pre-empted)."""
        assert self._reply is not None
        while True:
            (length,) = _FRAME.unpack(await self._reply.readexactly(_FRAME.size))
            if length > MAX_REPLY_BYTES:
                raise _ProtocolBroken(
                    f"the sandbox announced a {length}-byte reply (the most a reply may be is "
                    f"{MAX_REPLY_BYTES} bytes): code wrote to the REPL's reply pipe"
                )
            reply = json.loads(await self._reply.readexactly(length))
            if isinstance(reply, dict) and reply.get("nonce") == nonce:
                return reply

    def _make_cgroup(self) -> SandboxCgroup | None:
        support = cgroup_support()
        if not support.available:
            return None
        limits = self.limits
        try:
            # + bwrap's own two processes and the driver, as for RLIMIT_NPROC
            return support.create(memory_bytes=limits.memory_bytes, pids=limits.processes + 3, cpus=limits.cpus)
        except OSError as exc:
            # The probe said cgroups work here: this is unexpected, but the per-process bounds still hold.
            logger.warning("code interpreter: no cgroup for a sandbox (%s); it runs with per-process limits", exc)
            return None

    def _drop_cgroup(self) -> bool:
        """Kill what is left in the sandbox's cgroup and remove it; False if it could not be removed yet."""
        cgroup = self.cgroup
        if cgroup is None:
            return True
        cgroup.kill()
        if cgroup.remove():
            self.cgroup = None
            return True
        return False

    async def kill(self) -> None:
        """Kill the sandbox and everything in it (idempotent)."""
        self.dead = True
        process, self._process = self._process, None
        for transport in (self._cmd, self._output_transport, self._reply_transport):
            if transport is not None:
                transport.close()
        self._cmd = self._output_transport = self._reply_transport = None
        if process is not None:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    # The session is bwrap's (or, unsafe, the driver's): outside bwrap's PID namespace this reaches
                    # the processes the code started too. With bwrap, its death takes the whole namespace down.
                    os.killpg(process.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await process.wait()
        # The PID namespace dies with bwrap; the cgroup empties a moment later (and catches anything that
        # left the namespace's reach, such as the unsafe mode's processes).
        for _ in range(200):
            if self._drop_cgroup():
                break
            await asyncio.sleep(0.01)
        else:
            logger.warning("code interpreter: the cgroup %s did not empty; left in place", self.cgroup)
        if self._tempdir is not None:
            with contextlib.suppress(OSError):
                self._tempdir.cleanup()
            self._tempdir = None

    aclose = kill


_probed: dict[str, str | None] = {}


def probe_sandbox(python: str = "python3", *, timeout: float = 20.0) -> str | None:
    """Check that a bwrap sandbox can run Python here; None when it can, else why not (for logs and results).

    The answer is cached per interpreter for the life of the process (the host does not change under us).
    """
    if python not in _probed:
        _probed[python] = _probe(python, timeout)
    return _probed[python]


def _probe(python: str, timeout: float) -> str | None:
    try:
        # The driver itself, set up as for a sandbox (its capped mounts included); stdin, its command pipe
        # here, is empty: it ends at once, exit status 0.
        command = bwrap_command(python, _driver_source(), 0, 1, SandboxLimits())
    except SandboxUnavailable as exc:
        return str(exc)
    uid = UID_BASE + next(_uids) % UID_COUNT if os.geteuid() == 0 else None
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env={},
            cwd="/",
            user=uid,
            group=uid,
            extra_groups=[] if uid is not None else None,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not be run: {exc}"
    if done.returncode != 0 or done.stdout:
        detail = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        return (
            f"bwrap cannot create a sandbox here ({detail}); it needs unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0)"
        )
    return None
