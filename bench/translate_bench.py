"""Per-token cost of the translator against the bare openai-harmony parser (issue 30's goal 1).

Run: ``python bench/translate_bench.py``. For completions of 1k, 16k and 128k tokens of three kinds
(reasoning then a final answer; a long function call; a long built-in tool call, code for the code
interpreter) it measures, in one run:

1. the bare openai-harmony ``StreamableParser``: ``process(token)`` then reading ``last_content_delta``,
   ``current_channel`` and ``current_recipient``, the least any Harmony streaming server must do;
2. our Translator including serialising every event to its SSE bytes, fed one token at a time (the worst
   case: one engine chunk per token) and 16 tokens at a time.

The machine is shared and its speed drifts by tens of percent from one second to the next, so the three
take turns, round after round (``TRANSLATE_ROUNDS``, default 7), and each round's ratio is taken against
the parser's run of the same round: the figures are medians of those per-round ratios (and of µs/token).
Times are the process's CPU time (``time.process_time``), not the wall clock, which counts the other
processes' turns on the cores as ours; a completion shorter than 64k tokens runs several times per turn.

Goals (issue 30): ours(1) ≤ 1.0× the parser, ours(16) ≤ 0.6×, flat from 1k to 128k tokens: ours(1)'s
µs/token at 128k over its µs/token at 1k ≤ 1.05 (the parser's own growth is printed beside it).
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable

from openai_harmony import Role, StreamableParser

from harmony_responses.sse import encode_event
from harmony_responses.translate import RecipientMap, Translator
from harmony_responses.vocab import load_encoding, load_vocabulary

SIZES = (1_000, 16_000, 128_000)
ROUNDS = int(os.environ.get("TRANSLATE_ROUNDS", "7"))
TOOLS = [{"type": "function", "name": "write_file"}, {"type": "code_interpreter", "container": "cntr_bench"}]
MIN_TOKENS = 64_000
GOAL_1, GOAL_16, GOAL_FLAT = 1.0, 0.6, 1.05


def _special(text: str) -> list[int]:
    return load_encoding().encode(text, allowed_special="all")


def _filler(n: int) -> list[int]:
    words = (
        "The user asks about the weather in San Francisco, so I should check the forecast, compare it with "
        "yesterday's numbers and explain the difference clearly. Überprüfung 天気 ✓ "
    )
    base = load_encoding().encode(words * 8)
    return list(itertools.islice(itertools.cycle(base), n))


def reasoning_then_final(n: int) -> list[int]:
    half = n // 2
    return (
        _special("<|channel|>analysis<|message|>")
        + _filler(half)
        + _special("<|end|><|start|>assistant<|channel|>final<|message|>")
        + _filler(n - half)
        + _special("<|return|>")
    )


def long_function_call(n: int) -> list[int]:
    return (
        _special("<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>")
        + load_encoding().encode('{"path": "notes.txt", "content": "')
        + _filler(n)
        + _special('"}<|call|>')
    )


def long_builtin_call(n: int) -> list[int]:
    return _special("<|channel|>analysis to=python code<|message|>") + _filler(n) + _special("<|call|>")


COMPLETIONS: dict[str, Callable[[int], list[int]]] = {
    "reasoning+final": reasoning_then_final,
    "function call": long_function_call,
    "built-in tool call": long_builtin_call,
}


def bare_parser(tokens: list[int]) -> float:
    enc = load_encoding()
    parser = StreamableParser(enc, Role.ASSISTANT)
    process = parser.process
    start = time.process_time()
    for token in tokens:
        process(token)
        parser.last_content_delta  # noqa: B018 - reading is the cost being measured
        parser.current_channel  # noqa: B018
        parser.current_recipient  # noqa: B018
    return time.process_time() - start


def translator(tokens: list[int], chunk: int) -> float:
    vocab = load_vocabulary()
    counter = itertools.count()
    recipients = RecipientMap.from_tools(TOOLS)
    start = time.process_time()
    t = Translator(vocab=vocab, new_id=lambda p: f"{p}_{next(counter)}", clock=lambda: 0, recipients=recipients)
    sink = bytearray()
    for i in range(0, len(tokens), chunk):
        t.receive_tokens(tokens[i : i + chunk])
        for event in t.events():
            sink += encode_event(event)
    t.receive_end("stop")
    for event in t.events():
        sink += encode_event(event)
    if t.pending_tool_call is not None:  # the built-in call: its result ends the response
        t.send_tool_result(outputs=None)
        t.receive_end("stop")
        for event in t.events():
            sink += encode_event(event)
    elapsed = time.process_time() - start
    assert t.response["status"] == "completed", t.response["status"]
    return elapsed


def measure(tokens: list[int]) -> dict[str, float]:
    """Median µs/token of each reader and median per-round ratios to the parser, the readers taking turns."""
    n = len(tokens)
    repeat = max(1, MIN_TOKENS // n)  # a short completion runs several times per turn: a turn of a few ms is noise
    runs: dict[str, list[float]] = {"parser": [], "ours1": [], "ours16": []}
    for r in range(ROUNDS):
        order = [
            ("parser", lambda: bare_parser(tokens)),
            ("ours1", lambda: translator(tokens, 1)),
            ("ours16", lambda: translator(tokens, 16)),
        ]
        for name, fn in order if r % 2 == 0 else reversed(order):
            runs[name].append(sum(fn() for _ in range(repeat)) / (repeat * n) * 1e6)
    out = {name: statistics.median(values) for name, values in runs.items()}
    for name in ("ours1", "ours16"):
        out[f"ratio_{name}"] = statistics.median(o / p for o, p in zip(runs[name], runs["parser"], strict=True))
    return out


def main() -> None:
    load_vocabulary()
    translator(reasoning_then_final(1_000), 1)  # warm: imports, caches
    print(f"{ROUNDS} rounds, medians; goals: ratio(1) ≤ {GOAL_1}, ratio(16) ≤ {GOAL_16}, growth ≤ {GOAL_FLAT}")
    print(
        f"{'completion':<20}{'tokens':>8}{'parser µs/tok':>15}{'ours(1) µs/tok':>16}{'ours(16) µs/tok':>17}"
        f"{'ratio(1)':>10}{'ratio(16)':>10}"
    )
    summary: list[str] = []
    for name, make in COMPLETIONS.items():
        figures: dict[int, dict[str, float]] = {}
        for size in SIZES:
            tokens = make(size)
            m = figures[size] = measure(tokens)
            print(
                f"{name:<20}{len(tokens):>8}{m['parser']:>15.3f}{m['ours1']:>16.3f}{m['ours16']:>17.3f}"
                f"{m['ratio_ours1']:>10.2f}{m['ratio_ours16']:>10.2f}"
            )
        first, last = figures[SIZES[0]], figures[SIZES[-1]]
        growth = last["ours1"] / first["ours1"]
        parser_growth = last["parser"] / first["parser"]
        worst_1 = max(m["ratio_ours1"] for m in figures.values())
        worst_16 = max(m["ratio_ours16"] for m in figures.values())
        print(f"{'':<20}ours(1) {SIZES[-1]} vs {SIZES[0]} tokens: {growth:.2f}× (the parser's: {parser_growth:.2f}×)")
        summary.append(
            f"{name:<20}ratio(1) {worst_1:.2f} {'ok' if worst_1 <= GOAL_1 else 'over'}"
            f"   ratio(16) {worst_16:.2f} {'ok' if worst_16 <= GOAL_16 else 'over'}"
            f"   growth {growth:.2f} {'ok' if growth <= GOAL_FLAT else 'over'}"
        )
    print("\ngoal ratios (the worst size of each completion):")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
