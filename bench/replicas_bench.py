"""What a ``ReplicaSet`` (engine/_replicas.py) adds per engine chunk: chunks read from an in-process engine
directly (the floor) and through a set of two replicas, in the same run.

Run: ``python bench/replicas_bench.py``. Every served model's engine is a ``ReplicaSet`` (one replica or
more), so this is the cost each streamed chunk pays for balancing and failover; the choice of a replica
is once per engine call and not counted here.
"""

from __future__ import annotations

import asyncio
import time

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine, ReplicaSet
from harmony_responses.tokens import EngineEnd, TokenChunk

CHUNKS = 300_000
ROUNDS = 5


async def _chunks(request: GenerateRequest) -> EngineStream:
    chunk = TokenChunk(token_ids=[1])
    for _ in range(CHUNKS):
        yield chunk
    yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


async def _drain(engine: MockEngine | ReplicaSet) -> float:
    started = time.perf_counter()
    async for _ in engine.generate(GenerateRequest(prompt_ids=[1], request_id="resp_bench")):
        pass
    return time.perf_counter() - started


async def main() -> None:
    direct = MockEngine(_chunks)
    replicas = ReplicaSet([MockEngine(_chunks), MockEngine(_chunks)], label="bench")
    await replicas.start()
    floor, through = [], []
    for _ in range(ROUNDS):  # interleaved, best of each: the machine's other load hits both alike
        floor.append(await _drain(direct))
        through.append(await _drain(replicas))
    await replicas.aclose()
    f, t = min(floor) / CHUNKS * 1e9, min(through) / CHUNKS * 1e9
    print(f"engine read directly:    {f:6.0f} ns/chunk (floor)")
    print(f"through a ReplicaSet:    {t:6.0f} ns/chunk ({t / f:.2f}x the floor, +{t - f:.0f} ns/chunk)")


if __name__ == "__main__":
    asyncio.run(main())
