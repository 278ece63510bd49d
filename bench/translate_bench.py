"""Per-token cost of the translator against the bare openai-harmony parser (issue 30's goal 1).

Run: ``python bench/translate_bench.py``. For completions of 1k, 16k and 128k tokens of three kinds
(reasoning then a final answer; a long function call; a long built-in tool call, code for the code
interpreter) it measures, in one run:

1. the bare openai-harmony ``StreamableParser``: ``process(token)`` then reading ``last_content_delta``,
   ``current_channel`` and ``current_recipient``, the least any Harmony streaming server must do;
2. our Translator including serialising every event to its SSE bytes (each chunk's events framed as the one
   body the server writes for it, ``sse.encode_events``), fed one token at a time (the worst case: one
   engine chunk per token) and 16 tokens at a time.

The machine is shared and its speed drifts by tens of percent from one second to the next, so the three
take turns, round after round (``TRANSLATE_ROUNDS``, default 7), and each round's ratio is taken against
the parser's run of the same round: the figures are medians of those per-round ratios (and of µs/token).
Times are the process's CPU time (``time.process_time``), not the wall clock, which counts the other
processes' turns on the cores as ours; a completion shorter than 64k tokens runs several times per turn.

Goals (issue 30): ours(1) ≤ 1.0× the parser, ours(16) ≤ 0.6×, flat from 1k to 128k tokens: ours(1)'s
µs/token at 128k over its µs/token at 1k ≤ 1.05. The sizes take turns too, within each round, and the growth
is the median of the rounds' own (the parser's growth, from its medians, is printed beside it).
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable

from openai_harmony import Role, StreamableParser

from harmony_responses.sse import encode_events
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
    # Each chunk's events become one body, as the server frames them for one socket write
    # (http/streaming.py), which the socket then takes: not appended to one buffer for the whole completion,
    # whose reallocations at 128k tokens (~30 MB) cost several percent per token that no server pays.
    for i in range(0, len(tokens), chunk):
        t.receive_tokens(tokens[i : i + chunk])
        body = encode_events(t.events())
    t.receive_end("stop")
    body = encode_events(t.events())
    if t.pending_tool_call is not None:  # the built-in call: its result ends the response
        t.send_tool_result(outputs=None)
        t.receive_end("stop")
        body = encode_events(t.events())
    assert body  # the terminal event's frame
    elapsed = time.process_time() - start
    assert t.response["status"] == "completed", t.response["status"]
    return elapsed


def _turn(fn: Callable[[], float], n: int) -> float:
    repeat = max(1, MIN_TOKENS // n)  # a short completion runs several times per turn: a turn of a few ms is noise
    return sum(fn() for _ in range(repeat)) / (repeat * n) * 1e6


def measure(make: Callable[[int], list[int]]) -> tuple[dict[int, dict[str, float]], float]:
    """Each size's median µs/token per reader and median per-round ratios to the parser, and the median per-round
    growth of ours(1) from the first size to the last: readers and sizes all take turns within each round."""
    completions = {size: make(size) for size in SIZES}
    runs = {size: {"parser": [], "ours1": [], "ours16": []} for size in SIZES}
    for r in range(ROUNDS):
        turns: list[tuple[int, str, Callable[[], float]]] = []
        for size, tokens in completions.items():
            turns.append((size, "parser", lambda tokens=tokens: bare_parser(tokens)))
            turns.append((size, "ours1", lambda tokens=tokens: translator(tokens, 1)))
            turns.append((size, "ours16", lambda tokens=tokens: translator(tokens, 16)))
        for size, name, fn in turns if r % 2 == 0 else reversed(turns):
            runs[size][name].append(_turn(fn, len(completions[size])))
    figures: dict[int, dict[str, float]] = {}
    for size, per_reader in runs.items():
        m = figures[size] = {name: statistics.median(values) for name, values in per_reader.items()}
        m["tokens"] = len(completions[size])
        for name in ("ours1", "ours16"):
            pairs = zip(per_reader[name], per_reader["parser"], strict=True)
            m[f"ratio_{name}"] = statistics.median(o / p for o, p in pairs)
    first, last = runs[SIZES[0]]["ours1"], runs[SIZES[-1]]["ours1"]
    growth = statistics.median(b / a for a, b in zip(first, last, strict=True))
    return figures, growth


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
        figures, growth = measure(make)
        for m in figures.values():
            print(
                f"{name:<20}{int(m['tokens']):>8}{m['parser']:>15.3f}{m['ours1']:>16.3f}{m['ours16']:>17.3f}"
                f"{m['ratio_ours1']:>10.2f}{m['ratio_ours16']:>10.2f}"
            )
        parser_growth = figures[SIZES[-1]]["parser"] / figures[SIZES[0]]["parser"]
        worst_1 = max(m["ratio_ours1"] for m in figures.values())
        worst_16 = max(m["ratio_ours16"] for m in figures.values())
        print(f"{'':<20}ours(1) {SIZES[-1]} vs {SIZES[0]} tokens: {growth:.2f}× (the parser's: {parser_growth:.2f}×)")
        summary.append(
            f"{name:<20}ratio(1) {worst_1:.2f} {'ok' if worst_1 <= GOAL_1 else 'over'}"
            f"   ratio(16) {worst_16:.2f} {'ok' if worst_16 <= GOAL_16 else 'over'}"
            f"   growth {growth:.2f} {'ok' if growth <= GOAL_FLAT else 'over'}"
        )
    print("\ngoal ratios (ratio(1), ratio(16): the worst size of each completion; growth: ours(1), 1k to 128k):")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
