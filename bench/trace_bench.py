"""What per-token tracing costs: a response's run with tracing off, on, and at the revision before tracing.

Run: ``python bench/trace_bench.py [REV]``. REV (default: the parent of the commit that added
``tokentrace/``) is checked out in a temporary git worktree and measured by the same script in a subprocess,
with its ``src`` ahead of the installed package. Each measurement runs ``RESPONSES`` responses of ``TOKENS``
tokens (reasoning, then the answer) through ``ResponseRun`` — engine chunks of ``CHUNK`` tokens from a mock
engine, the translator, every event serialised to SSE — and the three take turns for ``ROUNDS`` rounds; each
reports its best round, in µs per token.

It prints the three and three ratios: off / previous (tracing must cost nothing when off), the floor it is
read against — previous measured twice in each round, the second time as ``again``: how far two runs of the
same code differ on this machine now — and on / off (what a trace costs while it records).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESPONSES = int(os.environ.get("TRACE_BENCH_RESPONSES", "20"))
TOKENS = int(os.environ.get("TRACE_BENCH_TOKENS", "2000"))
CHUNK = int(os.environ.get("TRACE_BENCH_CHUNK", "16"))
ROUNDS = int(os.environ.get("TRACE_BENCH_ROUNDS", "5"))


def measure(traced: bool) -> float:
    """Best µs per token over one round of ``RESPONSES`` runs, in this interpreter's ``harmony_responses``."""
    from harmony_responses.engine import GenerateRequest, MockEngine
    from harmony_responses.run.loop import ResponseRun
    from harmony_responses.sse import encode_event
    from harmony_responses.tokens import EngineEnd, TokenChunk
    from harmony_responses.translate import Translator
    from harmony_responses.vocab import load_encoding, load_vocabulary

    vocab = load_vocabulary()
    enc = load_encoding()
    words = enc.encode("The user asks about the weather, so I check the forecast and compare it. ")
    half = TOKENS // 2
    body = [words[k % len(words)] for k in range(half)]
    tokens = [
        *enc.encode("<|channel|>analysis<|message|>", allowed_special="all"),
        *body,
        *enc.encode("<|end|><|start|>assistant<|channel|>final<|message|>", allowed_special="all"),
        *body,
        200002,
    ]
    prompt = enc.encode("<|start|>user<|message|>Hi<|end|><|start|>assistant", allowed_special="all")

    async def handler(request: GenerateRequest):  # type: ignore[no-untyped-def]
        for at in range(0, len(tokens), CHUNK):
            yield TokenChunk(token_ids=tokens[at : at + CHUNK])
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))

    engine = MockEngine(handler)

    async def one(n: int) -> int:
        ids = iter(range(10**9))
        translator = Translator(vocab=vocab, new_id=lambda p: f"{p}_{next(ids)}", clock=lambda: 0)
        kwargs = {}
        if traced:
            from harmony_responses.tokentrace import Recorder

            recorder = Recorder(response_id=f"resp_{n}", model="m", token_text=vocab.token_text, max_bytes=8 << 20)
            recorder.record_prompt([], prompt)
            kwargs["trace"] = recorder
        run = ResponseRun(translator=translator, engine=engine, request=GenerateRequest(prompt_ids=prompt), **kwargs)
        await run.start()
        size = 0
        async for batch in run.batches():
            if traced:
                recorder.sent(batch)  # as LiveResponse.publish does
            for event in batch:
                size += len(encode_event(event))
        if traced:
            recorder.document()
        return size

    async def round_() -> float:
        started = time.perf_counter()
        for n in range(RESPONSES):
            await one(n)
        return (time.perf_counter() - started) / (RESPONSES * len(tokens)) * 1e6

    async def best() -> float:
        await one(-1)  # warm up
        return min([await round_() for _ in range(3)])

    return asyncio.run(best())


def _default_rev() -> str:
    added = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%H", "--", "src/harmony_responses/tokentrace"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return f"{added[-1]}^" if added else "HEAD"


def _child(src: Path | None, traced: bool) -> float:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    argv = [sys.executable, __file__, "--measure", "on" if traced else "off"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    return float(out.stdout.split()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--measure"]:
        print(measure(sys.argv[2] == "on"))
        return
    rev = sys.argv[1] if len(sys.argv) > 1 else _default_rev()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "rev"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
        try:
            figures: dict[str, list[float]] = {"previous": [], "off": [], "on": [], "again": []}
            for _ in range(ROUNDS):  # in turns: the machine's drift falls on all alike
                figures["previous"].append(_child(tree / "src", False))
                figures["off"].append(_child(ROOT / "src", False))
                figures["on"].append(_child(ROOT / "src", True))
                figures["again"].append(_child(tree / "src", False))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    best = {name: min(values) for name, values in figures.items()}
    print(f"{RESPONSES} responses x {TOKENS} tokens, chunks of {CHUNK}; previous = {rev}; best of {ROUNDS} rounds")
    for name in ("previous", "off", "on", "again"):
        print(f"  {name:>8}: {best[name]:6.2f} µs/token")
    floor = max(best["again"], best["previous"]) / min(best["again"], best["previous"])
    print(f"  off / previous: {best['off'] / best['previous']:.3f}   (tracing off must cost nothing)")
    print(f"  floor:          {floor:.3f}   (previous against itself: a difference below this is noise)")
    print(f"  on / off:       {best['on'] / best['off']:.3f}   (what a trace costs while it records)")


if __name__ == "__main__":
    main()
