"""Scale benchmark (issue 15): many streams through 1 and 2 worker processes and 2 engine replicas.

Run: ``python bench/scale_bench.py``. vLLM fakes (``_vllm_fake.py``) stream a final answer one token per
chunk; the client (``_latency_client.py``, its own process) sends 64 or 256 streaming requests at once and
notes when each text token arrives. Readers, all in the same run:

- the bare pass-through proxy (``_bare_proxy.py``: uvicorn and aiohttp and nothing else), the floor;
- our server, one process (``--engine vllm:URL``);
- our server, ``--workers 2``;
- our server, one process, the model bound to two replicas (``--engine NAME=vllm:A --engine NAME=vllm:B``,
  each fake serving half the streams): what routing costs.

Figures per reader: text tokens per second over the whole burst (all tokens / the last one's arrival),
the servers' CPU per token (all their processes), first token (first delta) p50/p99, and first-token p50
and p99 as ratios to the bare proxy's in the same run (target: within 1.25× at 64 and 256 streams, flat
out and paced). Also when the response began (issue 24 item 1): ``response.created`` p50/p99 for our
readers, and as the floor the bare proxy's first bytes (the engine's status line relayed: its admission,
before its first token); ``created ÷ bare`` is our p50 over that floor's p50.

Three runs: the fakes streaming as fast as they can, paced at 10 ms per token, and paced after a 300 ms
prefill (the status line at once, the first token 300 ms later: ``response.created`` must not wait for it).
Everything shares this machine's cores: the fakes and the client take their part, so absolute figures are this
machine's, the ratios the comparison. Each figure is over ``REPEATS`` bursts at least, and enough for
``FIRST_TOKENS`` first tokens (15 bursts of 64: over five, the bare proxy's own p50 moved 2.5× between runs),
the readers taking turns burst by burst. A stream that got no text token at all is counted and shown
(``no token``), not left out silently.

At the end it prints issue 30's goal ratios for one process, and whether this run met them all: first-token
p50 ≤ 1.10× and p99 ≤ 1.5× the proxy's in every cell without a prefill, and flat out at 64 streams CPU per token
≤ 1.15× and tokens/s ≥ 0.95× its. Beside each ratio, how far it would move with other bursts of the same kind:
the 5th and 95th percentiles of the ratio over ``SCALE_DRAWS`` (400) redraws of each reader's bursts, with
replacement (a bootstrap over bursts: a burst's streams move together, so they are drawn together). An interval
that straddles a goal's line says that this run's bursts cannot tell whether it is met; it does not cover what
moves from one run to the next (the machine's drift). What ``--workers 2`` makes with a core each is
``workers_bench.py``'s: here the fakes and the client take part of the cores the workers would need.

``SCALE_ONLY=NAME`` runs only that one of our readers (with the bare proxy; ``;`` between names for more),
``SCALE_STREAMS=64,256`` the burst sizes, ``SCALE_PACES=0,10,10+300`` the runs (ms per token, 0: flat out;
``+MS`` a prefill), ``SCALE_REPEATS`` and ``SCALE_FIRST_TOKENS`` the least bursts and first tokens per figure
(5 and 960): for quicker comparisons of one change.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from engine_bench import BIN, HERE, INPUT, completion, direct_body, free_port, pct, spawn, stop, wait_healthy

MODEL = "gpt-oss-20b"
STREAMS = tuple(int(s) for s in os.environ.get("SCALE_STREAMS", "64,256").split(","))
REPEATS = int(os.environ.get("SCALE_REPEATS", "5"))
FIRST_TOKENS = int(os.environ.get("SCALE_FIRST_TOKENS", "960"))
# The runs: (name in SCALE_PACES, ms per token, text tokens per stream, prefill ms).
RUNS = (("0", 0, 400, 0), ("10", 10, 100, 0), ("10+300", 10, 100, 300))
# Issue 30's goals for one process against the bare proxy: first-token p50 and p99 in every cell of the runs
# without a prefill; CPU per token and tokens/s flat out at 64 streams.
ONE_PROCESS = "ours, 1 process"
GOAL_P50, GOAL_P99, GOAL_CPU, GOAL_RATE = 1.10, 1.5, 1.15, 0.95
DRAWS = int(os.environ.get("SCALE_DRAWS", "400"))
# Our readers: their engine arguments, given the two fakes' specs.
OURS = {
    ONE_PROCESS: lambda a, b: ["--engine", a],
    "ours, 2 workers": lambda a, b: ["--engine", a, "--workers", "2"],
    "ours, 2 replicas": lambda a, b: ["--engine", f"{MODEL}={a}", "--engine", f"{MODEL}={b}"],
}


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and all its descendants so far (Linux)."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return total


def ours(port: int, engine_args: list[str]) -> list[str]:
    serve = [str(BIN / "harmony-responses"), "serve", "--port", str(port), "--model", MODEL]
    return [*serve, "--log-level", "warning", "--current-date", "2025-06-01", *engine_args]


class Burst(NamedTuple):
    """One burst as its client saw it: when each stream began, each stream's text-token arrival times (s), and the
    whole machine's busy and idle CPU seconds while its streams ran (None where the client cannot read them)."""

    starts: list[float | None]
    arrivals: list[list[float]]
    machine: tuple[float, float] | None


def burst(mode: str, url: str, streams: int, body: Path) -> Burst:
    """One burst of ``streams`` requests at once (``_latency_client.py``)."""
    argv = [sys.executable, str(HERE / "_latency_client.py"), mode, url, str(streams), "1", str(body)]
    env = {**os.environ, "LATENCY_STARTS": "1"}
    out = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=900, env=env).stdout)
    machine = out.get("machine")
    return Burst(out["starts"], out["arrivals"], (machine[0], machine[1]) if machine else None)


@dataclass
class Bursts:
    """One reader's bursts in one cell, burst by burst: its streams' first tokens (s), its text tokens, its wall
    time (its slowest stream's last token) and the reader's CPU seconds."""

    firsts: list[list[float]] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, arrivals: list[list[float]], cpu: float) -> None:
        """One more burst: each stream's text tokens' arrivals (s, as ``burst`` returns them) and the reader's CPU
        seconds over it. Its wall is its slowest stream's last token: all of a burst's streams are sent at once."""
        self.firsts.append([a[0] for a in arrivals if a])
        self.tokens.append(sum(map(len, arrivals)))
        self.walls.append(max((a[-1] for a in arrivals if a), default=0.0))
        self.cpu.append(cpu)

    def first(self, q: float) -> float:
        """Quantile ``q`` of the first tokens of all its bursts, ms (nan: none got a text token)."""
        firsts = [t for burst in self.firsts for t in burst]
        return pct(firsts, q) if firsts else math.nan

    def cpu_per_token(self) -> float:
        return sum(self.cpu) / sum(self.tokens)

    def rate(self) -> float:
        return sum(self.tokens) / sum(self.walls)

    def redrawn(self, rng: random.Random) -> Bursts:
        """As many of its bursts, drawn with replacement."""
        picks = rng.choices(range(len(self.walls)), k=len(self.walls))
        return Bursts(
            [self.firsts[i] for i in picks],
            [self.tokens[i] for i in picks],
            [self.walls[i] for i in picks],
            [self.cpu[i] for i in picks],
        )


def spread(ours: Bursts, bare: Bursts, ratio: Callable[[Bursts, Bursts], float]) -> str:
    """``ratio``'s 5th-95th percentile over ``DRAWS`` redraws of both readers' bursts (the module docstring)."""
    rng = random.Random(30)  # the same draws for the same bursts: a run printed twice reads the same
    ratios = sorted(ratio(ours.redrawn(rng), bare.redrawn(rng)) for _ in range(DRAWS))
    return f"({ratios[DRAWS // 20]:.2f}-{ratios[DRAWS - 1 - DRAWS // 20]:.2f})"


def print_goals(cells: dict[tuple[str, int], dict[str, Bursts]]) -> None:
    """Issue 30's goal ratios from ``cells`` ((run, streams) → reader → its bursts), each with its spread."""
    rows = []
    for (run_name, streams), readers in cells.items():
        ours, bare = readers.get(ONE_PROCESS), readers.get("bare proxy")
        if ours is None or bare is None or "+" in run_name:
            continue
        rows.append((f"{streams} {'flat out' if run_name == '0' else run_name + ' ms/token'}", ours, bare))
    if not rows:
        return
    print(
        f"\nissue 30's goals, one process ÷ the bare proxy (p50 ≤ {GOAL_P50}, p99 ≤ {GOAL_P99}), and in brackets "
        "the 5th-95th percentile of each over the bursts redrawn:"
    )
    met = True

    def p50(a: Bursts, b: Bursts) -> float:
        return a.first(0.5) / b.first(0.5)

    def p99(a: Bursts, b: Bursts) -> float:
        return a.first(0.99) / b.first(0.99)

    def cpu(a: Bursts, b: Bursts) -> float:
        return a.cpu_per_token() / b.cpu_per_token()

    def rate(a: Bursts, b: Bursts) -> float:
        return a.rate() / b.rate()

    for label, ours, bare in rows:
        met &= p50(ours, bare) <= GOAL_P50 and p99(ours, bare) <= GOAL_P99
        print(  # three places: 1.10 may be just over
            f"  {label:<18} p50 {p50(ours, bare):.3f} {spread(ours, bare, p50):<11}  "
            f"p99 {p99(ours, bare):.3f} {spread(ours, bare, p99)}"
        )
    flat = cells.get(("0", 64), {})
    if ONE_PROCESS in flat and "bare proxy" in flat:
        ours, bare = flat[ONE_PROCESS], flat["bare proxy"]
        met &= cpu(ours, bare) <= GOAL_CPU and rate(ours, bare) >= GOAL_RATE
        print(
            f"  64 flat out: CPU per token {cpu(ours, bare):.3f}× {spread(ours, bare, cpu)} (≤ {GOAL_CPU}), "
            f"tokens/s {rate(ours, bare):.3f}× {spread(ours, bare, rate)} (≥ {GOAL_RATE})"
        )
    print(f"  {'all met' if met else 'not all met'} in this run")


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    cells: dict[tuple[str, int], dict[str, Bursts]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "direct.json").write_text(json.dumps(direct_body()))
        (work / "ours.json").write_text(json.dumps({"model": MODEL, "input": INPUT, "stream": True, "store": False}))
        for run_name, pace_ms, n_text, prefill_ms in RUNS:
            if run_name not in os.environ.get("SCALE_PACES", "0,10,10+300").split(","):
                continue
            (work / "tokens.json").write_text(json.dumps(completion(n_text)))
            fake_a, fake_b = free_port(), free_port()
            procs: dict[str, subprocess.Popen[bytes]] = {}
            for name, port in (("fake a", fake_a), ("fake b", fake_b)):
                procs[name] = spawn(
                    [
                        *(sys.executable, str(HERE / "_vllm_fake.py"), str(port), str(work / "tokens.json")),
                        *(str(pace_ms), str(prefill_ms)),
                    ]
                )
            engine_a, engine_b = f"vllm:http://127.0.0.1:{fake_a}", f"vllm:http://127.0.0.1:{fake_b}"
            ports = {name: free_port() for name in ("bare proxy", *OURS)}
            only = os.environ.get("SCALE_ONLY")
            readers = {
                "bare proxy": (
                    "direct",
                    "/v1/completions",
                    [sys.executable, str(HERE / "_bare_proxy.py"), str(ports["bare proxy"]), engine_a[5:]],
                ),
                **{
                    name: ("ours", "/v1/responses", ours(ports[name], args(engine_a, engine_b)))
                    for name, args in OURS.items()
                    if not only or name in only.split(";")
                },
            }
            for name, (_, _, cmd) in readers.items():
                procs[name] = spawn(cmd, stdout=subprocess.DEVNULL)
            try:
                for name, proc in procs.items():
                    port = {"fake a": fake_a, "fake b": fake_b}.get(name) or ports[name]
                    wait_healthy(f"http://127.0.0.1:{port}", proc)
                label = "as fast as they can" if not pace_ms else f"paced at {pace_ms} ms per token"
                if prefill_ms:
                    label += f" after a {prefill_ms} ms prefill"
                print(f"\nvLLM fakes streaming {n_text} text tokens per stream, {label}")
                print(
                    f"  {'streams':>7}  {'reading':<18} {'tokens/s':>9} {'CPU µs/token':>12} "
                    f"{'first p50 ms':>12} {'p99 ms':>8} {'p50 ÷ bare':>10} {'p99 ÷ bare':>10} "
                    f"{'created p50':>11} {'p99 ms':>8} {'created ÷ bare':>14} {'no token':>8}"
                )
                for streams in STREAMS:
                    floor = floor99 = began_floor = None
                    taken = {name: Bursts() for name in readers}
                    starts: dict[str, list[float | None]] = {name: [] for name in readers}
                    # The readers take turns, one burst each, so that the machine's drift over the run (this
                    # 2-core machine's first-token figures move by ±20 % from one minute to the next) falls on
                    # all of them alike rather than on whichever ran its bursts in a slow spell; in the reverse
                    # order every other round, as ab_bench.py does, so that each follows each alike. In one fixed
                    # order the proxy's bursts always came right after ours, and its paced first-token p50 at 64
                    # was 46-51 ms against 57-60 when alternating (ours 55 either way): a bias of about 0.15 in
                    # that cell's ratio.
                    for number in range(max(REPEATS, -(-FIRST_TOKENS // streams))):
                        for name, (mode, path, _cmd) in list(readers.items())[:: 1 if number % 2 else -1]:
                            body = work / ("direct.json" if mode == "direct" else "ours.json")
                            url = f"http://127.0.0.1:{ports[name]}{path}"
                            cpu = tree_cpu(procs[name].pid)
                            got = burst(mode, url, streams, body)
                            starts[name] += got.starts
                            taken[name].add(got.arrivals, tree_cpu(procs[name].pid) - cpu)
                    for name in readers:
                        cell = taken[name]
                        sent = len(cell.walls) * streams
                        missing = sent - sum(map(len, cell.firsts))
                        if missing == sent:
                            print(f"  {streams:>7}  {name:<18} no stream got a text token ({missing} streams)")
                            continue
                        p50, p99 = cell.first(0.5), cell.first(0.99)
                        began = [b for b in starts[name] if b is not None]
                        b50, b99 = (pct(began, 0.5), pct(began, 0.99)) if began else (math.nan, math.nan)
                        if name == "bare proxy":
                            floor, floor99, began_floor = p50, p99, b50
                        cells.setdefault((run_name, streams), {})[name] = cell
                        # n/a: the floor itself failed
                        ratio = f"{p50 / floor:.2f}" if floor else "n/a"
                        ratio99 = f"{p99 / floor99:.2f}" if floor99 else "n/a"
                        began_ratio = f"{b50 / began_floor:.2f}" if began_floor else "n/a"
                        print(
                            f"  {streams:>7}  {name:<18} {cell.rate():>9,.0f} {cell.cpu_per_token() * 1e6:>12.1f} "
                            f"{p50:>12.1f} {p99:>8.1f} {ratio:>10} {ratio99:>10} "
                            f"{b50:>11.1f} {b99:>8.1f} {began_ratio:>14} {missing:>8}"
                        )
            finally:
                stop(procs)
        print_goals(cells)


if __name__ == "__main__":
    main()
