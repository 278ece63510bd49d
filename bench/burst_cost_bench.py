"""Burst cost (issue 30 goal 3): a request's CPU and a token's, taken apart, ours against the bare proxy.

Run: ``python bench/burst_cost_bench.py``. One vLLM fake (``_vllm_fake.py``) streams flat out; bursts of 64
streaming requests at once (``COST_STREAMS``) go to the bare pass-through proxy and to our server (one process)
in turns, the order reversed every other round, at each stream length of ``COST_TOKENS`` (100, 400, 4000 text
tokens) for as many bursts as ``COST_BURSTS`` says (40, 60, 8), after one burst each that is not counted.
Around each burst the CPU of the server that served it and of the fake is read from ``/proc`` (all their threads
and children); it includes the client's one warm-up stream a burst (``_latency_client.py``), alike for both.

Per length it prints tokens/s (all tokens over the sum of each burst's last token, as ``scale_bench.py`` counts),
each server's CPU per token, the fake's CPU per token while serving each (what the rest of the machine spends), the
first ÷ the second (flat out at 400 tokens, each server's was 0.87-1.04× the fake's while the fake's own moved from
11.3 to 14.2 µs between runs: docs/reference/benchmarks.md), and ours ÷ the proxy's. Then a straight line through
the shortest and longest lengths, CPU a request = a + b × tokens, for each server: ``a`` is what a request costs in
a burst whose streams flow, ``b`` what a token costs. Scale benches show the ratio at 400 tokens; this shows which
of the two makes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from engine_bench import HERE, INPUT, completion, direct_body, free_port, spawn, stop, wait_healthy
from scale_bench import MODEL, Bursts, burst, ours, tree_cpu

STREAMS = int(os.environ.get("COST_STREAMS", "64"))
LENGTHS = [int(n) for n in os.environ.get("COST_TOKENS", "100,400,4000").split(",")]
BURSTS = [int(n) for n in os.environ.get("COST_BURSTS", "40,60,8").split(",")]
READERS = ("bare proxy", "ours")


def measure(work: Path, tokens: int, bursts: int) -> dict[str, tuple[Bursts, list[float]]]:
    """Per reader: its bursts (``scale_bench.Bursts``) and the fake's CPU seconds in each of them."""
    (work / "tokens.json").write_text(json.dumps(completion(tokens)))
    fake, proxy, server = free_port(), free_port(), free_port()
    engine = f"http://127.0.0.1:{fake}"
    fake_argv = [sys.executable, str(HERE / "_vllm_fake.py"), str(fake), str(work / "tokens.json"), "0", "0"]
    procs = {"fake": spawn(fake_argv)}
    procs["bare proxy"] = spawn([sys.executable, str(HERE / "_bare_proxy.py"), str(proxy), engine])
    procs["ours"] = spawn(ours(server, ["--engine", f"vllm:{engine}"]), stdout=subprocess.DEVNULL)
    targets = {
        "bare proxy": ("direct", f"http://127.0.0.1:{proxy}/v1/completions", work / "direct.json"),
        "ours": ("ours", f"http://127.0.0.1:{server}/v1/responses", work / "ours.json"),
    }
    cells: dict[str, tuple[Bursts, list[float]]] = {name: (Bursts(), []) for name in READERS}
    try:
        for name, port in (("fake", fake), ("bare proxy", proxy), ("ours", server)):
            wait_healthy(f"http://127.0.0.1:{port}", procs[name])
        # A burst each first, not counted: a fresh server's first burst pays for what it does once (caches).
        for number in range(-1, bursts):
            for name in READERS[:: 1 if number % 2 else -1]:
                mode, url, body = targets[name]
                cpu, fake_cpu = tree_cpu(procs[name].pid), tree_cpu(procs["fake"].pid)
                _, arrivals = burst(mode, url, STREAMS, body)
                if number < 0:
                    continue
                cell, fake_spent = cells[name]
                cell.add(arrivals, tree_cpu(procs[name].pid) - cpu)
                fake_spent.append(tree_cpu(procs["fake"].pid) - fake_cpu)
    finally:
        stop(procs)
    return cells


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
            f"{'÷ fake':>6}"
        )
        for tokens, bursts in zip(LENGTHS, BURSTS, strict=True):
            cells = measure(work, tokens, bursts)
            for name in READERS:
                cell, fake_spent = cells[name]
                if not sum(cell.tokens):
                    print(f"  {tokens:>6} {bursts:>6}  {name:<10} no text token")
                    continue
                cpu = per_token[name][tokens] = cell.cpu_per_token()
                fake = sum(fake_spent) / sum(cell.tokens)
                share = f"{cpu / fake:>6.2f}" if fake else f"{'-':>6}"
                print(
                    f"  {tokens:>6} {bursts:>6}  {name:<10} {cell.rate():>9,.0f} {cpu * 1e6:>10.2f} "
                    f"{fake * 1e6:>8.2f} {share}"
                )
            (ours_, _), (bare, _) = cells["ours"], cells["bare proxy"]
            if sum(ours_.tokens) and sum(bare.tokens):
                rate, cpu_ratio = ours_.rate() / bare.rate(), ours_.cpu_per_token() / bare.cpu_per_token()
                print(f"  {'':>6} {'':>6}  ours ÷ proxy: tokens/s {rate:.3f}, server CPU per token {cpu_ratio:.3f}")
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
