"""A cgroup per sandbox, where the host offers one: memory, processes and CPU bounded for the sandbox as a whole.

rlimits are per process (address space) or per uid (process count), so a cell that starts a few children
multiplies them; a cgroup bounds everything in the sandbox together, tmpfs pages included (they are
charged to the cgroup of the process that wrote them). bwrap does not do cgroups, so the host makes one per
sandbox under the server's own cgroup and the sandbox's first process joins it before it execs bwrap
(``SandboxCgroup.enter``, between fork and exec, while it is still root), so nothing the sandbox starts is
ever outside it.

Which hierarchy (probed once per process, ``cgroup_support``):

- **cgroup v2** when the server's cgroup offers the ``memory`` and ``pids`` controllers to its children
  (``cgroup.subtree_control``; ``cpu`` too when offered). If they are available but not enabled, they are
  enabled; the v2 rule that a cgroup with processes cannot hand controllers down is met the way systemd's
  delegation asks for, by moving the server into a leaf of its own (``harmony-responses``), but only when
  the server is the only process there: nothing else is ever moved.
- **cgroup v1** (the legacy or hybrid layout) when the ``memory`` and ``pids`` hierarchies are mounted and
  the server may create cgroups in them (root, usually); ``cpu`` when mounted.
- otherwise none, and ``CgroupSupport.reason`` says why; the sandbox still has its per-process rlimits,
  its capped mounts and its per-cell cleanup (docs/tools/code-interpreter.md lists what holds then).

A sandbox's cgroup is removed when the sandbox is killed; one left by a crashed server is removed by the
next server's probe when it is empty.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CgroupSupport", "SandboxCgroup", "cgroup_support"]

logger = logging.getLogger("harmony_responses.tools.code_interpreter")

PREFIX = "harmony-sandbox-"
SERVER_LEAF = "harmony-responses"
CPU_PERIOD_US = 100_000
_REQUIRED = ("memory", "pids")


@dataclass(frozen=True, slots=True)
class _Hierarchy:
    version: int  # 1 or 2
    base: Path  # where sandbox cgroups are made: the server's own cgroup in this hierarchy
    controllers: frozenset[str]  # of memory, pids, cpu: what this hierarchy bounds


class SandboxCgroup:
    """One sandbox's cgroup (a directory per hierarchy)."""

    def __init__(self, dirs: list[tuple[_Hierarchy, Path]]) -> None:
        self._dirs = dirs
        self.procs = tuple(str(path / "cgroup.procs") for _, path in dirs)
        self.version = dirs[0][0].version

    @property
    def paths(self) -> tuple[Path, ...]:
        return tuple(path for _, path in self._dirs)

    def enter(self) -> None:
        """Move the calling process into the cgroup (the sandbox's first process, before exec). Raises OSError."""
        for procs in self.procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")  # 0: the writing process itself
            finally:
                os.close(fd)

    def _file(self, controller: str, name: str) -> Path | None:
        for hierarchy, path in self._dirs:
            if controller in hierarchy.controllers:
                return path / name
        return None

    def memory_peak(self) -> int | None:
        """The most memory the sandbox has used at once (bytes), when the kernel reports it."""
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            path = self._file("memory", name)
            if path is not None:
                with contextlib.suppress(OSError, ValueError):
                    return int(path.read_text())
        return None

    def pids(self) -> list[int]:
        found: list[int] = []
        for procs in self.procs:
            with contextlib.suppress(OSError):
                found += [int(line) for line in Path(procs).read_text().split()]
        return sorted(set(found))

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (what outlived the sandbox's PID namespace, if anything)."""
        if self.version == 2:
            for _, path in self._dirs:
                with contextlib.suppress(OSError):
                    (path / "cgroup.kill").write_text("1")
                    return
        for pid in self.pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> bool:
        """Remove the cgroup's directories; False while processes are still in it (try again)."""
        done = True
        for _, path in self._dirs:
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


class CgroupSupport:
    """What this host offers sandboxes (``cgroup_support``): hierarchies to use, or the reason there are none."""

    def __init__(self, hierarchies: list[_Hierarchy], reason: str | None) -> None:
        self.hierarchies = tuple(hierarchies)
        self.reason = reason
        self._count = 0

    @property
    def available(self) -> bool:
        return bool(self.hierarchies)

    def describe(self) -> str:
        if not self.hierarchies:
            return f"no cgroup ({self.reason})"
        version = self.hierarchies[0].version
        controllers = sorted({c for h in self.hierarchies for c in h.controllers})
        where = ", ".join(str(h.base) for h in self.hierarchies)
        return f"cgroup v{version} ({', '.join(controllers)}) under {where}"

    def create(self, *, memory_bytes: int, pids: int, cpus: float) -> SandboxCgroup:
        """A new cgroup with these limits. Raises OSError (the caller decides whether to go on without)."""
        self._count += 1
        name = f"{PREFIX}{os.getpid()}-{self._count}"
        made: list[tuple[_Hierarchy, Path]] = []
        try:
            for hierarchy in self.hierarchies:
                path = hierarchy.base / name
                path.mkdir()
                made.append((hierarchy, path))
                _write_limits(hierarchy, path, memory_bytes=memory_bytes, pids=pids, cpus=cpus)
        except OSError:
            if made:
                SandboxCgroup(made).remove()
            raise
        return SandboxCgroup(made)


def _write_limits(hierarchy: _Hierarchy, path: Path, *, memory_bytes: int, pids: int, cpus: float) -> None:
    quota = max(1000, int(cpus * CPU_PERIOD_US))
    if hierarchy.version == 2:
        if "memory" in hierarchy.controllers:
            (path / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(FileNotFoundError):  # no swap accounting: nothing to bound
                (path / "memory.swap.max").write_text("0")
        if "pids" in hierarchy.controllers:
            (path / "pids.max").write_text(str(pids))
        if "cpu" in hierarchy.controllers:
            (path / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        return
    if "memory" in hierarchy.controllers:
        (path / "memory.limit_in_bytes").write_text(str(memory_bytes))
        # Memory plus swap no larger than memory: swapping out does not make room (after the memory limit,
        # which it may not be below).
        with contextlib.suppress(OSError):
            (path / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
    if "pids" in hierarchy.controllers:
        (path / "pids.max").write_text(str(pids))
    if "cpu" in hierarchy.controllers:
        (path / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
        (path / "cpu.cfs_quota_us").write_text(str(quota))


# ---------------------------------------------------------------------------------------------- probing


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(fstype, mount point, mount root, super options) of the cgroup mounts."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                root, point = fields[3], fields[4].replace("\\040", " ")
                found.append((tail[0], Path(point), root, set(tail[2].split(","))))
    return found


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for the v2 hierarchy) → the server's cgroup path in it."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                own[controller] = path
    return own


def _on_disk(point: Path, root: str, path: str) -> Path | None:
    if root != "/" and not (path == root or path.startswith(root.rstrip("/") + "/")):
        return None  # our cgroup is outside what this mount shows
    relative = path[len(root) :] if root != "/" else path
    return point / relative.lstrip("/")


def _remove_stale(base: Path) -> None:
    """Empty sandbox cgroups of servers that are gone (a crash leaves them)."""
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            if not entry.name.startswith(PREFIX) or not entry.is_dir():
                continue
            pid = entry.name[len(PREFIX) :].split("-")[0]
            if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
                with contextlib.suppress(OSError):
                    entry.rmdir()


def _writable(base: Path) -> bool:
    probe = base / f"{PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
    except FileExistsError:
        pass
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def _probe_v2(point: Path, root: str, own: dict[str, str]) -> tuple[_Hierarchy | None, str]:
    if "" not in own:
        return None, "the server is in no cgroup v2"
    base = _on_disk(point, root, own[""])
    if base is None or not base.is_dir():
        return None, "the server's cgroup v2 is not visible here"
    try:
        offered = set((base / "cgroup.controllers").read_text().split())
        enabled = set((base / "cgroup.subtree_control").read_text().split())
    except OSError as exc:
        return None, f"cannot read {base}: {exc.strerror}"
    wanted = {c for c in ("memory", "pids", "cpu") if c in offered}
    if not set(_REQUIRED) <= wanted:
        missing = ", ".join(c for c in _REQUIRED if c not in offered)
        return None, f"cgroup v2 at {base} does not offer {missing}"
    if not wanted <= enabled:
        problem = _enable(base, wanted - enabled)
        if problem is not None:
            return None, problem
    if not _writable(base):
        return None, f"cannot create cgroups in {base}"
    _remove_stale(base)
    return _Hierarchy(2, base, frozenset(wanted)), ""


def _enable(base: Path, controllers: set[str]) -> str | None:
    """Enable ``controllers`` for ``base``'s children; None when done, else why not."""
    line = " ".join(f"+{c}" for c in sorted(controllers))
    try:
        (base / "cgroup.subtree_control").write_text(line)
        return None
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            return f"cannot enable {', '.join(sorted(controllers))} in {base}: {exc.strerror}"
    # EBUSY: processes live in base itself. If the server is alone there, it moves into a leaf (systemd's
    # delegation contract); other processes are not ours to move.
    try:
        others = {int(p) for p in (base / "cgroup.procs").read_text().split()} - {os.getpid()}
    except OSError as exc:
        return f"cannot read {base}/cgroup.procs: {exc.strerror}"
    if others:
        return (
            f"cgroup v2 at {base} holds other processes, so it cannot hand controllers to sandboxes (run the "
            "server in a cgroup of its own, e.g. systemd-run --property=Delegate=yes)"
        )
    leaf = base / SERVER_LEAF
    try:
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        return f"cannot move the server into {leaf}: {exc.strerror}"
    try:
        (base / "cgroup.subtree_control").write_text(line)
    except OSError as exc:
        with contextlib.suppress(OSError):
            (base / "cgroup.procs").write_text(str(os.getpid()))
            leaf.rmdir()
        return f"cannot enable {', '.join(sorted(controllers))} in {base}: {exc.strerror}"
    logger.info("code interpreter: moved the server into %s to give sandboxes cgroups of their own", leaf)
    return None


def _probe_v1(mounts: list[tuple[str, Path, str, set[str]]], own: dict[str, str]) -> tuple[list[_Hierarchy], str]:
    hierarchies: list[_Hierarchy] = []
    for controller in ("memory", "pids", "cpu"):
        mount = next((m for m in mounts if m[0] == "cgroup" and controller in m[3]), None)
        if mount is None or controller not in own:
            if controller in _REQUIRED:
                return [], f"no cgroup v1 {controller} hierarchy"
            continue
        _, point, root, _ = mount
        base = _on_disk(point, root, own[controller])
        if base is None or not base.is_dir() or not _writable(base):
            if controller in _REQUIRED:
                return [], f"cannot create cgroups in the v1 {controller} hierarchy ({base or point})"
            continue
        _remove_stale(base)
        hierarchies.append(_Hierarchy(1, base, frozenset({controller})))
    return hierarchies, ""


def _probe() -> CgroupSupport:
    mounts, own = _mounts(), _own_cgroups()
    reasons = []
    v2 = next((m for m in mounts if m[0] == "cgroup2"), None)
    if v2 is not None:
        hierarchy, reason = _probe_v2(v2[1], v2[2], own)
        if hierarchy is not None:
            return CgroupSupport([hierarchy], None)
        reasons.append(reason)
    if any(m[0] == "cgroup" for m in mounts):
        hierarchies, reason = _probe_v1(mounts, own)
        if hierarchies:
            return CgroupSupport(hierarchies, None)
        reasons.append(reason)
    if not mounts:
        reasons.append("no cgroup file system is mounted")
    return CgroupSupport([], "; ".join(reasons))


_support: CgroupSupport | None = None


def cgroup_support() -> CgroupSupport:
    """What this host offers (probed once per process; blocking file I/O: call it off the event loop once)."""
    global _support
    if _support is None:
        _support = _probe()
    return _support
