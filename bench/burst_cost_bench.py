"""Burst cost (issue 30 goal 3): a request's CPU and a token's, taken apart, ours against the bare proxy.

Run: ``python bench/burst_cost_bench.py``. One vLLM fake (``_vllm_fake.py``) streams flat out; bursts of 64
streaming requests at once (``COST_STREAMS``) go to the bare pass-through proxy, to the format floor
(``_format_proxy.py``: that proxy writing our server's frames for the tokens it relays, so that its client reads
what ours reads) and to our server (one process) in turns, the order reversed every other round, at each stream
length of ``COST_TOKENS`` (100, 400, 4000 text tokens) for as many bursts as ``COST_BURSTS`` says (40, 60, 8),
after one burst each that is not counted. Around each burst the CPU of the server that served it and of the fake
is read from ``/proc`` (all their threads and children); it includes the client's one warm-up stream a burst
(``_latency_client.py``), alike for all.

Per length it prints tokens/s (all tokens over the sum of each burst's last token, as ``scale_bench.py`` counts),
each server's CPU per token, the fake's CPU per token while serving each, the first ÷ the second (flat out at 400
tokens, each server's was 0.87-1.04× the fake's while the fake's own moved from 11.3 to 14.2 µs between runs:
docs/reference/benchmarks.md), the whole machine's CPU per token while the reader's streams ran (every process's
and the kernel's: ``/proc/stat``, read by the client around its burst) and the share of the cores busy then; and
ours ÷ the proxy's, with the machine's extra per token split into our server's, the fake's and the rest's (the
client's, the kernel's own threads); then the same for the format floor ÷ the proxy (what the Responses stream
costs the machine whoever sends it) and ours ÷ the format floor (what our server's own work costs). Flat out the
cores are busy alike whichever server the streams go through (95.7-96.1 % in the first three runs), so tokens/s ÷
the proxy's is about the inverse of the machine's CPU per token ÷ its (0.952 against 1/1.056, 0.939 against
1/1.067, 0.943 against 1/1.069), and a server's own CPU counts in it as its share of the machine's, about two
fifths at 400 tokens. Then a straight line through the shortest and longest lengths, CPU a request = a + b ×
tokens, for each server: ``a`` is what a request costs in a burst whose streams flow, ``b`` what a token costs.
Scale benches show the ratio at 400 tokens; this shows which of the two makes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import httpx

from engine_bench import HERE, INPUT, completion, direct_body, free_port, spawn, stop, wait_healthy
from scale_bench import MODEL, Bursts, burst, ours, tree_cpu

STREAMS = int(os.environ.get("COST_STREAMS", "64"))
LENGTHS = [int(n) for n in os.environ.get("COST_TOKENS", "100,400,4000").split(",")]
BURSTS = [int(n) for n in os.environ.get("COST_BURSTS", "40,60,8").split(",")]
FLOOR = "floor"  # the format floor (_format_proxy.py)
READERS = ("bare proxy", FLOOR, "ours")


class Cell(NamedTuple):
    """One reader's bursts at one length (``scale_bench.Bursts``), with the fake's CPU seconds in each and the whole
    machine's busy and idle seconds while its streams ran (``scale_bench.Burst.machine``)."""

    bursts: Bursts
    fake: list[float]
    machine: list[tuple[float, float]]

    def fake_per_token(self) -> float:
        """The fake's CPU a text token while it served this reader."""
        return sum(self.fake) / sum(self.bursts.tokens)

    def _machine(self) -> tuple[float, float] | None:
        """The machine's busy and idle seconds over all the bursts, None without a ``/proc/stat`` reading of each."""
        if len(self.machine) < len(self.bursts.walls):
            return None
        return sum(busy for busy, _ in self.machine), sum(idle for _, idle in self.machine)

    def machine_per_token(self) -> float | None:
        """All the machine's CPU a text token."""
        machine = self._machine()
        return machine[0] / sum(self.bursts.tokens) if machine else None

    def busy(self) -> float | None:
        """The share of the machine's cores busy while its streams ran."""
        machine = self._machine()
        if machine is None or not sum(machine):
            return None  # no reading, or bursts shorter than the kernel's tick, all of them
        return machine[0] / sum(machine)


def measure(work: Path, tokens: int, bursts: int) -> dict[str, Cell]:
    """Per reader, its cell of ``bursts`` bursts of ``tokens``-token streams."""
    (work / "tokens.json").write_text(json.dumps(completion(tokens)))
    fake, proxy, floor, server = free_port(), free_port(), free_port(), free_port()
    engine = f"http://127.0.0.1:{fake}"
    fake_argv = [sys.executable, str(HERE / "_vllm_fake.py"), str(fake), str(work / "tokens.json"), "0", "0"]
    procs = {"fake": spawn(fake_argv)}
    procs["bare proxy"] = spawn([sys.executable, str(HERE / "_bare_proxy.py"), str(proxy), engine])
    procs["ours"] = spawn(ours(server, ["--engine", f"vllm:{engine}"]), stdout=subprocess.DEVNULL)
    targets = {
        "bare proxy": ("direct", f"http://127.0.0.1:{proxy}/v1/completions", work / "direct.json"),
        FLOOR: ("ours", f"http://127.0.0.1:{floor}/v1/responses", work / "ours.json"),
        "ours": ("ours", f"http://127.0.0.1:{server}/v1/responses", work / "ours.json"),
    }
    cells = {name: Cell(Bursts(), [], []) for name in READERS}
    try:
        for name, port in (("fake", fake), ("bare proxy", proxy), ("ours", server)):
            wait_healthy(f"http://127.0.0.1:{port}", procs[name])
        # The floor writes the frames our server wrote for these tokens, taken from one response of its.
        frames = httpx.post(
            f"http://127.0.0.1:{server}/v1/responses",
            content=(work / "ours.json").read_bytes(),
            headers={"content-type": "application/json"},
        )
        frames.raise_for_status()
        (work / "frames.sse").write_bytes(frames.content)
        floor_argv = [str(HERE / "_format_proxy.py"), str(floor), engine, str(work / "direct.json")]
        procs[FLOOR] = spawn([sys.executable, *floor_argv, str(work / "frames.sse")])
        wait_healthy(f"http://127.0.0.1:{floor}", procs[FLOOR])
        # A burst each first, not counted: a fresh server's first burst pays for what it does once (caches).
        for number in range(-1, bursts):
            for name in READERS[:: 1 if number % 2 else -1]:
                mode, url, body = targets[name]
                cpu, fake_cpu = tree_cpu(procs[name].pid), tree_cpu(procs["fake"].pid)
                got = burst(mode, url, STREAMS, body)
                if number < 0:
                    continue
                cell = cells[name]
                cell.bursts.add(got.arrivals, tree_cpu(procs[name].pid) - cpu)
                cell.fake.append(tree_cpu(procs["fake"].pid) - fake_cpu)
                if got.machine is not None:
                    cell.machine.append(got.machine)
    finally:
        stop(procs)
    return cells


def compare(cells: dict[str, Cell], per_token: dict[str, dict[int, float]], tokens: int, over: str, under: str) -> str:
    """``over`` ÷ ``under`` at ``tokens``: tokens/s, server CPU per token and the machine's, with the machine's
    extra per token split into the server's, the fake's and the rest's; empty if either read no token."""
    a, b = cells[over], cells[under]
    if not sum(a.bursts.tokens) or not sum(b.bursts.tokens):
        return ""
    a_cpu, b_cpu = per_token[over][tokens], per_token[under][tokens]
    rate = a.bursts.rate() / b.bursts.rate()
    line = f"{over} ÷ {under}: tokens/s {rate:.3f}, server CPU per token {a_cpu / b_cpu:.3f}"
    machine_a, machine_b = a.machine_per_token(), b.machine_per_token()
    if machine_a and machine_b:
        # µs a token more than through ``under``: the machine's, the server's, the fake's, the rest's
        extra = (machine_a - machine_b) * 1e6
        server = (a_cpu - b_cpu) * 1e6
        fake = (a.fake_per_token() - b.fake_per_token()) * 1e6
        line += (
            f", the machine's CPU per token {machine_a / machine_b:.3f} ({extra:+.2f} µs: the server "
            f"{server:+.2f}, the fake {fake:+.2f}, the rest {extra - server - fake:+.2f})"
        )
    return line


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    per_token: dict[str, dict[int, float]] = {name: {} for name in READERS}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "direct.json").write_text(json.dumps(direct_body()))
        (work / "ours.json").write_text(json.dumps({"model": MODEL, "input": INPUT, "stream": True, "store": False}))
        print(f"bursts of {STREAMS} streams, flat out; CPU in µs per text token")
        print(
            f"  {'tokens':>6} {'bursts':>6}  {'reading':<10} {'tokens/s':>9} {'server CPU':>10} {'fake CPU':>8} "
            f"{'÷ fake':>6} {'machine CPU':>11} {'busy':>6}"
        )
        for tokens, bursts in zip(LENGTHS, BURSTS, strict=True):
            cells = measure(work, tokens, bursts)
            for name in READERS:
                cell = cells[name]
                if not sum(cell.bursts.tokens):
                    print(f"  {tokens:>6} {bursts:>6}  {name:<10} no text token")
                    continue
                cpu = per_token[name][tokens] = cell.bursts.cpu_per_token()
                fake = cell.fake_per_token()
                share = f"{cpu / fake:>6.2f}" if fake else f"{'-':>6}"
                machine, busy = cell.machine_per_token(), cell.busy()
                print(
                    f"  {tokens:>6} {bursts:>6}  {name:<10} {cell.bursts.rate():>9,.0f} {cpu * 1e6:>10.2f} "
                    f"{fake * 1e6:>8.2f} {share} "
                    + (f"{machine * 1e6:>11.2f} {busy:>6.1%}" if machine and busy else f"{'-':>11} {'-':>6}")
                )
            for over, under in (("ours", "bare proxy"), (FLOOR, "bare proxy"), ("ours", FLOOR)):
                line = compare(cells, per_token, tokens, over, under)
                if line:
                    print(f"  {'':>6} {'':>6}  {line}")
    short, long = min(LENGTHS), max(LENGTHS)
    if short == long:
        return
    print(f"\nCPU a request = a + b × tokens, through {short} and {long} tokens a stream:")
    for name in READERS:
        if short not in per_token[name] or long not in per_token[name]:
            continue
        at_short, at_long = per_token[name][short] * short, per_token[name][long] * long
        b = (at_long - at_short) / (long - short)
        a = at_short - b * short
        print(f"  {name:<10} a = {a * 1e6:,.0f} µs a request, b = {b * 1e6:.2f} µs a token")


if __name__ == "__main__":
    main()
