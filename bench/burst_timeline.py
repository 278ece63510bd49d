"""Burst timeline (issue 30): where the last first tokens of a burst wait, step by step, in our server.

Run: ``python bench/burst_timeline.py``. A vLLM fake (``_vllm_fake.py``) streams 100 text tokens per stream
paced at 10 ms (``TIMELINE_PACE``, ``TIMELINE_TOKENS``); bursts of 256 streaming requests at once
(``TIMELINE_STREAMS``) go to the bare pass-through proxy and to our server in turns (``TIMELINE_ROUNDS``
each). Our server runs in a wrapper process (this file with ``--serve``) that notes, per request, with the
loop's clock:

- when it arrived (``run/turns.Start`` made), was let into the start lane and left it (its engine call sent);
- when the engine admitted the call (the answer's status line) and the last engine read before its first
  delta (the one that held its first text token);
- when its first delta was written.

Per burst it prints the client's first-token p50/p99 (ours and the proxy's, the goal's ratio), the
start lane's drain (from the burst's first arrival to the last request leaving the lane) beside the start
work done inside the lane, and over the burst's requests the p50/p99/max of each step: waiting for the
lane, the engine (call sent to the read holding the first text token: its admission, its prefill and its
pace), and ours after that read (the read to the first delta on the socket). The hooks subclass two
internal classes (``Start``, ``engine._stream_client.Answer``): if either is renamed this bench says so.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STREAMS = int(os.environ.get("TIMELINE_STREAMS", "256"))
ROUNDS = int(os.environ.get("TIMELINE_ROUNDS", "4"))
PACE = os.environ.get("TIMELINE_PACE", "10")
TOKENS = int(os.environ.get("TIMELINE_TOKENS", "100"))


def serve(argv: list[str], records: Path) -> None:
    """Our server's CLI with the timing hooks: SIGUSR1 forgets what was noted, SIGUSR2 writes it to ``records``."""
    from harmony_responses.cli import main
    from harmony_responses.engine import _stream_client
    from harmony_responses.run import turns

    noted: list[dict[str, float]] = []
    clock = time.monotonic

    class Start(turns.Start):
        __slots__ = ("note",)

        def __init__(self, loop: Any) -> None:
            self.note = {"arrived": clock()}
            noted.append(self.note)
            super().__init__(loop)

        async def enter_lane(self, rank: int = turns._DEFAULT_RANK) -> None:
            await super().enter_lane(rank)
            self.note.setdefault("let_in", clock())

        def leave_lane(self) -> None:
            if self._in_lane:
                self.note["left"] = clock()
            super().leave_lane()

        def finish(self) -> None:
            if not self.delivered:
                self.note["first_delta"] = clock()
            super().finish()

    class Answer(_stream_client.Answer):
        __slots__ = ("note",)

        def __init__(self, connection: Any, loop: Any) -> None:
            super().__init__(connection, loop)
            start = turns.current_start()
            self.note = start.note if isinstance(start, Start) else {}
            self.note["called"] = clock()

        def _headers_done(self, status: int) -> None:
            self.note.setdefault("admitted", clock())
            super()._headers_done(status)

        def _arrived(self, size: int) -> None:
            if "first_delta" not in self.note:
                self.note["read"] = clock()
            super()._arrived(size)

    turns.Start, _stream_client.Answer = Start, Answer  # type: ignore[misc]

    def dump(*_: object) -> None:
        records.write_text(json.dumps(noted))

    signal.signal(signal.SIGUSR1, lambda *_: noted.clear())
    signal.signal(signal.SIGUSR2, dump)
    sys.argv = ["harmony-responses", *argv]
    main()


def spread(values: list[float]) -> str:
    values = sorted(values)
    if not values:
        return "-"
    return f"{_pct(values, 0.5):6.1f} {_pct(values, 0.99):6.1f} {values[-1] * 1e3:6.1f}"


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))] * 1e3


def main() -> None:
    from engine_bench import HERE, INPUT, completion, direct_body, free_port, spawn, stop, wait_healthy
    from harmony_responses.run import turns
    from scale_bench import MODEL, burst, ours

    for name in ("Start", "current_start"):
        if not hasattr(turns, name):
            sys.exit(f"burst_timeline: run/turns.py has no {name} any more; update this bench's hooks")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        records = work / "records.json"
        (work / "tokens.json").write_text(json.dumps(completion(TOKENS)))
        (work / "ours.json").write_text(json.dumps({"model": MODEL, "input": INPUT, "stream": True, "store": False}))
        (work / "direct.json").write_text(json.dumps(direct_body()))  # what our server sends the fake
        fake, port, proxy_port = free_port(), free_port(), free_port()
        engine = f"http://127.0.0.1:{fake}"
        procs = {
            "fake": spawn(
                [sys.executable, str(HERE / "_vllm_fake.py"), str(fake), str(work / "tokens.json"), PACE, "0"]
            ),
            "bare proxy": spawn([sys.executable, str(HERE / "_bare_proxy.py"), str(proxy_port), engine]),
        }
        argv = ours(port, ["--engine", f"vllm:{engine}"])[1:]
        procs["ours"] = spawn([sys.executable, __file__, "--serve", str(records), *argv], stdout=subprocess.DEVNULL)
        try:
            for name, port_of in (("fake", fake), ("bare proxy", proxy_port), ("ours", port)):
                wait_healthy(f"http://127.0.0.1:{port_of}", procs[name])
            ours_url = f"http://127.0.0.1:{port}/v1/responses"
            proxy_url = f"http://127.0.0.1:{proxy_port}/v1/completions"
            burst("ours", ours_url, STREAMS, work / "ours.json")  # not counted: what loads lazily
            pace = "flat out" if PACE == "0" else f"paced at {PACE} ms"
            print(f"bursts of {STREAMS} streams at once, {TOKENS} text tokens each, {pace} (ms)")
            ratios = []
            for number in range(ROUNDS):
                proxy = burst("direct", proxy_url, STREAMS, work / "direct.json").arrivals
                procs["ours"].send_signal(signal.SIGUSR1)
                arrivals = burst("ours", ours_url, STREAMS, work / "ours.json").arrivals
                records.unlink(missing_ok=True)
                procs["ours"].send_signal(signal.SIGUSR2)
                while not records.exists():
                    time.sleep(0.05)
                time.sleep(0.05)  # written whole before the next read: json.dumps first, one write_text
                noted = sorted(json.loads(records.read_text()), key=lambda n: n["arrived"])[-STREAMS:]
                firsts = sorted(a[0] for a in arrivals if a)
                bare = sorted(a[0] for a in proxy if a)
                ratios.append(_pct(firsts, 0.99) / _pct(bare, 0.99))
                t0 = min(n["arrived"] for n in noted)
                lane = [n for n in noted if "let_in" in n and "left" in n]
                drain = max(n["left"] for n in lane) - t0 if lane else 0.0
                work_in = sum(n["left"] - n["let_in"] for n in lane)
                delivered = [n for n in noted if {"called", "read", "first_delta"} <= n.keys()]
                print(
                    f"burst {number + 1}: first token (client) p50/p99 ours {_pct(firsts, 0.5):.0f} / "
                    f"{_pct(firsts, 0.99):.0f}, proxy {_pct(bare, 0.5):.0f} / {_pct(bare, 0.99):.0f} "
                    f"(p99 {ratios[-1]:.2f}x); the start lane drained in {drain * 1e3:.0f}, "
                    f"{work_in * 1e3:.0f} of it start work inside the lane"
                )
                print("  per request, p50 / p99 / max:")
                print(f"    waiting for the lane        {spread([n['let_in'] - n['arrived'] for n in lane])}")
                print(f"    engine, call to first text  {spread([n['read'] - n['called'] for n in delivered])}")
                print(f"    ours, that read to delta    {spread([n['first_delta'] - n['read'] for n in delivered])}")
            print(f"first-token p99 ÷ the proxy's, median of {ROUNDS} bursts: {statistics.median(ratios):.2f}")
        finally:
            stop(procs)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[3:], Path(sys.argv[2]))
    else:
        main()
