"""``service_tier`` orders the start lane: requests waiting to start go by tier (priority, default, flex), in
arrival order within one; what a request's body asks for is read from the raw JSON as from the parsed body."""

from __future__ import annotations

import asyncio

from harmony_responses.run.turns import starting, tier_rank


def test_waiting_requests_start_by_tier_then_arrival() -> None:
    async def main() -> list[str]:
        order: list[str] = []

        async def request(name: str, tier: str | None, queued: asyncio.Event) -> None:
            with starting() as start:
                entering = asyncio.ensure_future(start.enter_lane(tier_rank({"service_tier": tier})))
                queued.set()
                await entering
                order.append(name)
                start.leave_lane()

        with starting() as first:
            await first.enter_lane()  # inside the lane: everyone after it waits
            tasks = []
            for name, tier in [
                ("flex-1", "flex"),
                ("default-1", None),
                ("flex-2", "flex"),
                ("prio-1", "priority"),
                ("default-2", "auto"),
                ("prio-2", "fast"),
            ]:
                queued = asyncio.Event()
                tasks.append(asyncio.create_task(request(name, tier, queued)))
                await queued.wait()
                await asyncio.sleep(0)  # its enter_lane has queued it
            first.leave_lane()
            await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == ["prio-1", "prio-2", "default-1", "default-2", "flex-1", "flex-2"]


def test_the_tier_is_read_from_raw_json_too() -> None:
    assert tier_rank(b'{"model": "m", "service_tier" : "priority", "input": "x"}') == 0
    assert tier_rank(b'{"model": "m", "service_tier":"flex"}') == 2
    assert tier_rank(b'{"model": "m"}') == tier_rank({"model": "m"}) == tier_rank(None) == 1
    assert tier_rank({"service_tier": 5}) == 1
