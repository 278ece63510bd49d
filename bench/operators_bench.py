"""What the operators' features cost together (#28): events/s and first-delta p50 with tracing off and on,
quotas off and on, and both, measured in one run.

Run: ``python bench/operators_bench.py [ROUNDS]``. Two server subprocesses of ``quota_bench.server()`` (replay
engine, ``quota_bench.TOKENS``-token answers one token per chunk at zero delay, the SQLite store, an
``--api-key`` key that counts nothing and a ``[[keys]]`` key with limits too high to refuse anything), one
plain and one with ``--otel`` exporting over OTLP/HTTP to ``otel_bench.sink()`` (a collector in this process
that reads and drops every export: the exporter's work is in the figures). The modes, each a server and a key:

- ``off``: the plain server, the unlimited key; ``again``: the same, measured again (the floor: how far two
  measurements of the same thing differ on this machine now);
- ``quotas``: the plain server, the limited key; ``tracing``: the traced server, the unlimited key; ``both``:
  the traced server, the limited key.

``quota_bench.rounds_of()`` runs them in turns in a client process, ``ROUNDS`` rounds of ``STREAMS``
concurrent streams (the order rotated each round). Printed per mode: the median events/s and first-delta p50,
and the median over rounds of its ratio to ``off`` in the same round (rounds a few seconds apart: the
machine's drift falls on both alike).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from otel_bench import sink
from quota_bench import LIMITED, STREAMS, TOKENS, UNLIMITED, rounds_of, server

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 30


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, sink() as collector:
        with server(Path(tmp) / "plain") as plain, server(Path(tmp) / "traced", collector=collector) as traced:
            targets = {
                "off": (plain, UNLIMITED),
                "quotas": (plain, LIMITED),
                "tracing": (traced, UNLIMITED),
                "both": (traced, LIMITED),
                "again": (plain, UNLIMITED),
            }
            figures = rounds_of(targets, rounds=ROUNDS)
    off = figures["off"]
    print(f"{STREAMS} concurrent streams of {TOKENS} tokens, replay engine at zero delay, {ROUNDS} rounds of each")
    for mode, values in figures.items():
        rate = statistics.median(values["rate"])
        first = statistics.median(values["first"])
        rate_ratio = statistics.median(r / o for r, o in zip(values["rate"], off["rate"], strict=True))
        first_ratio = statistics.median(f / o for f, o in zip(values["first"], off["first"], strict=True))
        print(
            f"{mode:>8}: {rate:9,.0f} events/s ({rate_ratio:.2f} of off)   "
            f"first delta p50 {first * 1000:6.1f} ms ({first_ratio:.2f} of off)"
        )
    print("again / off is the floor: a ratio no farther from 1.00 than again's is this machine's noise")


if __name__ == "__main__":
    main()
