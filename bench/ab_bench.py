"""A/B benchmark: the working tree's server against another revision's, and the bare proxy, bursts in turn.

Run: ``python bench/ab_bench.py [REV]`` (default ``HEAD``). One change at a time is smaller than this
machine's drift between two runs of ``scale_bench.py`` (its first-token figures move by ±20 % from one
minute to the next), so here both servers run at once, in front of one vLLM fake, with the bare proxy, and
the three take turns burst by burst (the order reversed every other round): the drift falls on all alike.
REV's ``src`` is checked out in a temporary git worktree (removed at the end), its compiled modules built
there (``setup.py build_ext --inplace``: a built module is not in git, and without it REV would read its engine
lines in pure Python), and imported ahead of the installed package; both servers use this checkout's virtual
environment. Before this, REV ran without its scanner: A/B figures against a REV with one, from before, favour
the working tree.

Figures per reader: first-token p50 and p99 over all bursts, p50 as a ratio to the bare proxy's, the median
of the bursts' own p50s, CPU per text token, text tokens per second over the bursts (all tokens over the sum of
each burst's last token, as ``scale_bench.py`` counts them), and streams that got no text token. Two identical trees
(``REV`` = the working tree's commit, nothing changed) differ by 3-7 % at 30 rounds: less is noise.

``AB_STREAMS`` (64) streams per burst, ``AB_ROUNDS`` (20) bursts per reader, ``AB_PACE`` (0: flat out) ms per
token, ``AB_TOKENS`` (400) text tokens per stream.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from engine_bench import BIN, HERE, INPUT, completion, direct_body, free_port, pct, spawn, stop, wait_healthy
from scale_bench import MODEL, burst, tree_cpu

ROOT = HERE.parent
STREAMS = int(os.environ.get("AB_STREAMS", "64"))
ROUNDS = int(os.environ.get("AB_ROUNDS", "20"))
PACE = os.environ.get("AB_PACE", "0")
TOKENS = int(os.environ.get("AB_TOKENS", "400"))


def server(port: int, fake: int, src: Path) -> subprocess.Popen[bytes]:
    argv = [str(BIN / "harmony-responses"), "serve", "--port", str(port), "--model", MODEL, "--log-level", "warning"]
    argv += ["--current-date", "2025-06-01", "--engine", f"vllm:http://127.0.0.1:{fake}"]
    env = {**os.environ, "PYTHONPATH": str(src)}
    return spawn(argv, env=env, stdout=subprocess.DEVNULL)


def build_extensions(tree: Path) -> str:
    """Build REV's compiled modules in its worktree, as an install of it would (a built module is not in git):
    without them REV would read its engine lines in pure Python and lose the comparison for that alone."""
    if not (tree / "setup.py").exists():
        return "none to build"
    argv = [sys.executable, "setup.py", "-q", "build_ext", "--inplace", "--build-temp", str(tree / "build")]
    done = subprocess.run(argv, cwd=tree, capture_output=True, text=True)
    return "built" if done.returncode == 0 else f"not built: {done.stderr.strip().splitlines()[-1:]}"


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    label = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True)
    if label.returncode:
        sys.exit(f"ab_bench: not a revision: {rev}")
    with tempfile.TemporaryDirectory() as tmp:
        work, tree = Path(tmp), Path(tmp) / "rev"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
        built = build_extensions(tree)
        procs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            (work / "direct.json").write_text(json.dumps(direct_body()))
            (work / "ours.json").write_text(
                json.dumps({"model": MODEL, "input": INPUT, "stream": True, "store": False})
            )
            (work / "tokens.json").write_text(json.dumps(completion(TOKENS)))
            fake = free_port()
            fake_argv = [sys.executable, str(HERE / "_vllm_fake.py"), str(fake), str(work / "tokens.json"), PACE]
            procs["fake"] = spawn(fake_argv)
            names = ("bare proxy", f"{label.stdout.strip()} ({rev})", "working tree")
            ports = {name: free_port() for name in names}
            proxy_argv = [
                sys.executable,
                str(HERE / "_bare_proxy.py"),
                str(ports[names[0]]),
                f"http://127.0.0.1:{fake}",
            ]
            procs[names[0]] = spawn(proxy_argv)
            procs[names[1]] = server(ports[names[1]], fake, tree / "src")
            procs[names[2]] = server(ports[names[2]], fake, ROOT / "src")
            wait_healthy(f"http://127.0.0.1:{fake}", procs["fake"])
            for name in names:
                wait_healthy(f"http://127.0.0.1:{ports[name]}", procs[name])
            runs: dict[str, list[list[float]]] = {name: [] for name in names}
            medians: dict[str, list[float]] = {name: [] for name in names}
            used = dict.fromkeys(names, 0.0)
            walls = dict.fromkeys(names, 0.0)  # each burst's slowest stream's last token, summed (scale_bench's)
            for number in range(ROUNDS + 1):  # the first round warms every reader up and is not counted
                for name in names if number % 2 else names[::-1]:
                    direct = name == names[0]
                    mode, path, body = (
                        ("direct", "/v1/completions", "direct.json")
                        if direct
                        else ("ours", "/v1/responses", "ours.json")
                    )
                    cpu = tree_cpu(procs[name].pid)
                    got = burst(mode, f"http://127.0.0.1:{ports[name]}{path}", STREAMS, work / body).arrivals
                    if number:
                        used[name] += tree_cpu(procs[name].pid) - cpu
                        runs[name] += got
                        walls[name] += max((r[-1] for r in got if r), default=0.0)
                        firsts = [r[0] for r in got if r]
                        if firsts:
                            medians[name].append(pct(firsts, 0.5))
            pace = "flat out" if PACE == "0" else f"paced at {PACE} ms per token"
            print(f"\n{ROUNDS} bursts of {STREAMS} streams each, {TOKENS} text tokens per stream, {pace}")
            print(f"  {rev}'s compiled modules: {built}")
            print(
                f"  {'reading':<24} {'first p50 ms':>12} {'p99 ms':>8} {'p50 ÷ bare':>10} {'bursts p50':>10} "
                f"{'CPU µs/token':>12} {'tokens/s':>9} {'no token':>8}"
            )
            floor = None
            for name in names:
                first = [r[0] for r in runs[name] if r]
                missing = len(runs[name]) - len(first)
                if not first:
                    print(f"  {name:<24} no stream got a text token ({missing} streams)")
                    continue
                p50 = pct(first, 0.5)
                if name == names[0]:
                    floor = p50
                ratio = f"{p50 / floor:.2f}" if floor else "n/a"
                tokens = sum(map(len, runs[name]))
                print(
                    f"  {name:<24} {p50:>12.1f} {pct(first, 0.99):>8.1f} {ratio:>10} "
                    f"{statistics.median(medians[name]):>10.1f} {used[name] / tokens * 1e6:>12.1f} "
                    f"{tokens / walls[name]:>9,.0f} {missing:>8}"
                )
        finally:
            stop(procs)
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


if __name__ == "__main__":
    main()
