"""Per-token cost of the translator against the bare openai-harmony parser (issue 2's benchmark).

Run: ``python bench/translate_bench.py``. For completions of 1k, 16k and 64k tokens (reasoning then a final
answer; a long function call) it measures, in one run:

1. the bare openai-harmony ``StreamableParser``: ``process(token)`` then reading ``last_content_delta``,
   ``current_channel`` and ``current_recipient`` — the least any Harmony streaming server must do;
2. our Translator including serialising every event to its SSE bytes, fed one token at a time (the worst
   case: one engine chunk per token) and 16 tokens at a time.

It prints µs per token, the ratio of (2) to (1) and the growth from 1k to 64k tokens. Targets: ratio ≤ 2.5
and growth ≤ 10 % (nothing per token may grow with the message length).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from openai_harmony import Role, StreamableParser

from harmony_responses.sse import encode_event
from harmony_responses.translate import RecipientMap, Translator
from harmony_responses.vocab import load_encoding, load_vocabulary

SIZES = (1_000, 16_000, 64_000)
REPEATS = 3


def _filler(n: int) -> list[int]:
    enc = load_encoding()
    words = (
        "The user asks about the weather in San Francisco, so I should check the forecast, compare it with "
        "yesterday's numbers and explain the difference clearly. Überprüfung 天気 ✓ "
    )
    base = enc.encode(words * 8)
    return list(itertools.islice(itertools.cycle(base), n))


def reasoning_then_final(n: int) -> list[int]:
    enc = load_encoding()
    half = n // 2
    return (
        enc.encode("<|channel|>analysis<|message|>", allowed_special="all")
        + _filler(half)
        + enc.encode("<|end|><|start|>assistant<|channel|>final<|message|>", allowed_special="all")
        + _filler(n - half)
        + enc.encode("<|return|>", allowed_special="all")
    )


def long_function_call(n: int) -> list[int]:
    enc = load_encoding()
    return (
        enc.encode("<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>", allowed_special="all")
        + enc.encode('{"path": "notes.txt", "content": "')
        + _filler(n)
        + enc.encode('"}<|call|>', allowed_special="all")
    )


def bare_parser(tokens: list[int]) -> float:
    enc = load_encoding()
    parser = StreamableParser(enc, Role.ASSISTANT)
    process = parser.process
    start = time.perf_counter()
    for token in tokens:
        process(token)
        parser.last_content_delta  # noqa: B018 - reading is the cost being measured
        parser.current_channel  # noqa: B018
        parser.current_recipient  # noqa: B018
    return time.perf_counter() - start


def translator(tokens: list[int], chunk: int) -> float:
    vocab = load_vocabulary()
    counter = itertools.count()
    recipients = RecipientMap.from_tools([{"type": "function", "name": "write_file"}])
    start = time.perf_counter()
    t = Translator(vocab=vocab, new_id=lambda p: f"{p}_{next(counter)}", clock=lambda: 0, recipients=recipients)
    sink = bytearray()
    for i in range(0, len(tokens), chunk):
        t.receive_tokens(tokens[i : i + chunk])
        for event in t.events():
            sink += encode_event(event)
    t.receive_end("stop")
    for event in t.events():
        sink += encode_event(event)
    elapsed = time.perf_counter() - start
    assert t.response["status"] == "completed", t.response["status"]
    return elapsed


def best(fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(REPEATS))


def main() -> None:
    load_vocabulary()
    print(
        f"{'completion':<24}{'tokens':>8}{'parser µs/tok':>15}{'ours(1) µs/tok':>16}{'ours(16) µs/tok':>17}"
        f"{'ratio(1)':>10}{'ratio(16)':>10}"
    )
    for name, make in (("reasoning+final", reasoning_then_final), ("function call", long_function_call)):
        per_token_1: dict[int, float] = {}
        for size in SIZES:
            tokens = make(size)
            n = len(tokens)
            p = best(lambda tokens=tokens: bare_parser(tokens)) / n * 1e6
            o1 = best(lambda tokens=tokens: translator(tokens, 1)) / n * 1e6
            o16 = best(lambda tokens=tokens: translator(tokens, 16)) / n * 1e6
            per_token_1[size] = o1
            print(f"{name:<24}{n:>8}{p:>15.3f}{o1:>16.3f}{o16:>17.3f}{o1 / p:>10.2f}{o16 / p:>10.2f}")
        growth = per_token_1[SIZES[-1]] / per_token_1[SIZES[0]] - 1
        print(f"{'':<24}growth of ours(1) from {SIZES[0]} to {SIZES[-1]} tokens: {growth * 100:+.1f} %")


if __name__ == "__main__":
    main()
