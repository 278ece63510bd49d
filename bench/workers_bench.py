"""Workers benchmark (issue 30): ``--workers 2`` against one process, each process with a core of its own.

Run: ``python bench/workers_bench.py`` (as root, where the cgroup CPU controller can be written). Two workers
make twice the tokens only where two cores are theirs; on a 2-core machine the engine fake and the client need
cores too, and side by side (scale_bench) two workers made fewer tokens than one process, at twice its CPU per
token. So here each server process is held to the same small "core": a CPU quota of ``WORKERS_SHARE`` of a
core (0.15 by default), in a cgroup of its own for the one process and for each worker. The server is then
what limits the tokens, and the machine has the rest of its cores for the fake and the client. That is a core
each, made smaller: any cost of being two (how the connections fall to the workers, the store, the metrics'
files, the kernel's accept) shows in the ratio.

A vLLM fake (``_vllm_fake.py``) streams 400 text tokens per stream as fast as it can; both servers read it.
Each burst is ``WORKERS_STREAMS`` (64) streaming requests at once (``_latency_client.py``), the two servers
taking turns, ``WORKERS_BURSTS`` bursts each (6) after one not counted. Prints each server's tokens/s (all
its tokens over its bursts' wall time) and per second of its CPU, how much of its quota each process used
(near 100 %: the server was the limit, as it must be for the ratio to mean anything; a worker well under it
had fewer streams), and the ratio (goal: ≥ 1.8).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from engine_bench import HERE, completion, free_port, spawn, stop, wait_healthy
from scale_bench import MODEL, burst, ours, tree_cpu

SHARE = float(os.environ.get("WORKERS_SHARE", "0.15"))
BURSTS = int(os.environ.get("WORKERS_BURSTS", "6"))
STREAMS = int(os.environ.get("WORKERS_STREAMS", "64"))
GOAL = 1.8


class Quotas:
    """CPU quotas, one cgroup each (v1's ``cpu`` controller or v2's ``cpu.max``), removed at the end."""

    def __init__(self) -> None:
        v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
        if (v1 / "cpu.cfs_quota_us").exists():
            self.root, self.v2 = v1, False
        elif "cpu" in _read(v2 / "cgroup.controllers").split():
            self.root, self.v2 = v2, True
            with contextlib.suppress(OSError):  # already on, or the parent's to give
                (v2 / "cgroup.subtree_control").write_text("+cpu")
        else:
            raise OSError("no cgroup CPU controller here")
        self.groups: list[Path] = []

    def hold(self, pid: int, share: float) -> Path:
        """Put process ``pid`` (all its threads) in a new group of ``share`` of a core."""
        # The shortest period the kernel takes with a quota in it (1 ms at least): a process under its quota
        # stalls as briefly as can be at a time.
        period = max(1_000, math.ceil(1_000 / share))
        group = self.root / f"harmony-bench-{os.getpid()}-{len(self.groups)}"
        group.mkdir()
        self.groups.append(group)
        if self.v2:
            (group / "cpu.max").write_text(f"{int(share * period)} {period}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(period))
            (group / "cpu.cfs_quota_us").write_text(str(int(share * period)))
        (group / "cgroup.procs").write_text(str(pid))
        return group

    def remove(self) -> None:
        for group in self.groups:
            with contextlib.suppress(OSError):  # its processes are gone by now, or moved back here
                for pid in (group / "cgroup.procs").read_text().split():
                    (self.root / "cgroup.procs").write_text(pid)
                group.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def workers_of(pid: int) -> list[int]:
    """The worker processes of a ``--workers`` parent (not multiprocessing's resource tracker)."""
    found, children = [], []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in _read(task / "children").split()]
    for child in children:
        with contextlib.suppress(OSError):
            if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
    return found


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        held = Quotas()
    except OSError as error:
        sys.exit(f"workers_bench needs a cgroup CPU controller it can write (as root): {error}")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "tokens.json").write_text(json.dumps(completion(400)))
        (work / "ours.json").write_text(
            json.dumps({"model": MODEL, "input": "Write a long answer.", "stream": True, "store": False})
        )
        fake = free_port()
        argv = [sys.executable, str(HERE / "_vllm_fake.py"), str(fake), str(work / "tokens.json"), "0", "0"]
        procs["fake"] = spawn(argv)
        engines = ["--engine", f"vllm:http://127.0.0.1:{fake}"]
        readers = {"1 process": [], "2 workers": ["--workers", "2"]}
        ports = {name: free_port() for name in readers}
        for name, extra in readers.items():
            procs[name] = spawn(ours(ports[name], [*engines, *extra]), stdout=subprocess.PIPE)
        try:
            for name, proc in procs.items():
                port = fake if name == "fake" else ports[name]
                wait_healthy(f"http://127.0.0.1:{port}", proc)
            # One worker answers /health while the other may still be starting (its code interpreter check runs
            # sandboxes: seconds of a small quota), which took the first bursts' CPU: wait for the banner, printed
            # once every worker listens.
            assert procs["2 workers"].stdout is not None
            for line in procs["2 workers"].stdout:
                if line.startswith(b"  workers:"):
                    break
            held_pids = {"1 process": [procs["1 process"].pid], "2 workers": workers_of(procs["2 workers"].pid)}
            if len(held_pids["2 workers"]) != 2:
                sys.exit(f"expected two workers, found {held_pids['2 workers']}")
            for pids in held_pids.values():
                for pid in pids:
                    held.hold(pid, SHARE)
            for name in readers:  # not counted: a worker's first requests load what it loads lazily
                burst("ours", f"http://127.0.0.1:{ports[name]}/v1/responses", STREAMS, work / "ours.json")
            tokens = dict.fromkeys(readers, 0)
            wall = dict.fromkeys(readers, 0.0)
            used: dict[int, float] = {}
            for number in range(BURSTS):
                for name in list(readers)[:: 1 if number % 2 else -1]:
                    before = {pid: tree_cpu(pid) for pid in held_pids[name]}
                    arrivals = burst(
                        "ours", f"http://127.0.0.1:{ports[name]}/v1/responses", STREAMS, work / "ours.json"
                    ).arrivals
                    for pid in held_pids[name]:
                        used[pid] = used.get(pid, 0.0) + tree_cpu(pid) - before[pid]
                    tokens[name] += sum(map(len, arrivals))
                    wall[name] += max(r[-1] for r in arrivals if r)
            held_to = f"each server process held to {SHARE} of a core"
            print(f"{STREAMS} streams at once, flat out, {held_to} ({BURSTS} bursts each):")
            print(f"  {'server':<10} {'tokens/s':>9} {'per CPU-s':>9}  quota used, each process")
            for name in readers:
                busy = " / ".join(f"{used[pid] / (wall[name] * SHARE):.0%}" for pid in held_pids[name])
                cpu = sum(used[pid] for pid in held_pids[name])
                print(f"  {name:<10} {tokens[name] / wall[name]:>9,.0f} {tokens[name] / cpu:>9,.0f}  {busy}")
            ratio = (tokens["2 workers"] / wall["2 workers"]) / (tokens["1 process"] / wall["1 process"])
            print(f"--workers 2 ÷ one process, a (small) core each: {ratio:.2f}× tokens/s (goal ≥ {GOAL})")
        finally:
            stop(procs)
            held.remove()  # once its processes are gone


if __name__ == "__main__":
    main()
