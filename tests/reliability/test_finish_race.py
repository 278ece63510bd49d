"""A cancel, DELETE or disconnect that lands while a response is finishing never leaves it open (issue 16 #2).

The finishing path (close the run, flush the log, mark the response closed) could be cancelled half-way:
the cancel or DELETE request then hung, a replay of the stored response sent ``response.completed`` and
never ended its body, and shutdown waited on the leaked task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from api.helpers import MODEL
from harmony_responses.run.live import LiveResponse, produce
from harmony_responses.store import Writer, store_from_spec

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def _event(seq: int, kind: str, status: str) -> dict[str, Any]:
    return {"type": kind, "sequence_number": seq, "response": {"id": "resp_race", "status": status, "output": []}}


class _Translator:
    closed = True

    def events(self) -> list[dict[str, Any]]:
        return []


class FinishingRun:
    """A run that has produced its whole response and whose closing takes until ``release`` is set."""

    request_id = "resp_race"
    span = None  # its --otel span (ResponseRun.span): tracing is off

    def __init__(self) -> None:
        self.translator = _Translator()
        self.closing = asyncio.Event()
        self.release = asyncio.Event()

    async def start(self, *, at_admission: bool = False) -> None:
        return None

    async def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        yield [_event(0, "response.created", "in_progress"), _event(1, "response.completed", "completed")]

    async def aclose(self) -> None:
        self.closing.set()
        await self.release.wait()


def test_a_cancel_while_finishing_still_closes_the_response(store_spec: str) -> None:
    async def run() -> None:
        store = store_from_spec(store_spec)
        await store.open()
        writer = Writer(store)
        writer.start()
        try:
            live = LiveResponse(response_id="resp_race", owner="", created_at=1, writer=writer, persist=False)
            fake = FinishingRun()
            live.task = asyncio.get_running_loop().create_task(produce(live, fake))  # type: ignore[arg-type]
            await fake.closing.wait()  # the terminal event is out; the producer is in its finishing path
            stopping = asyncio.ensure_future(live.stop("cancel"))  # cancels the producer right there
            await asyncio.sleep(0.05)
            fake.release.set()
            await asyncio.wait_for(stopping, 5)  # hung forever before
            assert live.closed
            followed = [types async for types, _ in live.follow()]
            assert followed and followed[-1][-1] == "response.completed"
        finally:
            await writer.aclose()
            await store.aclose()

    asyncio.run(run())


def _replay_ends(root: str, response_id: str) -> bool:
    """Whether the stored response's replay ends its body after a terminal event, within 10 s."""
    with httpx.stream("GET", f"{root}/v1/responses/{response_id}", params={"stream": "true"}, timeout=10) as r:
        if r.status_code == 404:
            return True  # deleted: nothing to replay
        last = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                last = line[7:]
        return last in TERMINAL


def test_cancels_deletes_and_disconnects_racing_the_end_all_terminate(serve: Any) -> None:
    # Short answers, so that most cancels, deletes and disconnects land around the end of the response.
    live = serve(["<|channel|>final<|message|>" + "ok " * 8 + "<|return|>"] * 200)
    root = live.root
    created: list[str] = []

    def one(i: int) -> None:
        with httpx.Client(base_url=root, timeout=20) as client:
            body = {"model": MODEL, "input": f"hi {i}", "background": True}
            response_id = client.post("/v1/responses", json=body).json()["id"]
            created.append(response_id)
            time.sleep((i % 5) * 0.002)
            if i % 3 == 0:
                assert client.post(f"/v1/responses/{response_id}/cancel").status_code == 200
            elif i % 3 == 1:
                assert client.delete(f"/v1/responses/{response_id}").status_code in (200, 404)
            else:
                # A foreground stream whose client goes away after a few bytes.
                with client.stream("POST", "/v1/responses", json={"model": MODEL, "input": "x", "stream": True}) as s:
                    next(s.iter_bytes())

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(one, i) for i in range(60)]:
            future.result(timeout=30)  # a cancel or DELETE that hangs fails here
    assert time.monotonic() - started < 60
    assert all(_replay_ends(root, rid) for rid in created)
