"""A request whose data the store refuses is refused with 503 ``store_unavailable``, and ``/ready`` says so while
the store fails its writes (issue 25 #9).

Before: with the store refusing rows (a full disk), a background POST answered ``queued`` with an id that was then
a 404 for good, never ``failed``; a foreground JSON request a 500 naming a response nobody could retrieve;
``POST /v1/conversations`` a generic 500; and ``/ready`` stayed 200 while every heartbeat failed. (A stream,
whose 200 is out before its first write, ends failed in-band, as it did.)

The store refuses through a trigger on the real database, as a full disk does: the write fails in the driver.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import httpx

from api.helpers import MODEL
from state.conftest import Serve

ANSWER = ["<|channel|>final<|message|>OK<|return|>"]
FULL = "database or disk is full"


def _sql(store_spec: str, statements: list[str]) -> None:
    if store_spec.startswith("sqlite:"):
        conn = sqlite3.connect(store_spec.removeprefix("sqlite:"), timeout=30)
        try:
            for statement in statements:
                conn.execute(statement)
            conn.commit()
        finally:
            conn.close()
        return

    async def run() -> None:
        import asyncpg

        conn = await asyncpg.connect(store_spec)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


def refuse(store_spec: str, table: str, event: str = "INSERT") -> Callable[[], None]:
    """Make the store refuse every ``event`` on ``table`` as a full disk would; returns what undoes it."""
    name = f"refuse_{table}_{event.lower()}"
    if store_spec.startswith("sqlite:"):
        _sql(store_spec, [f"CREATE TRIGGER {name} BEFORE {event} ON {table} BEGIN SELECT RAISE(ABORT, '{FULL}'); END"])
    else:
        _sql(
            store_spec,
            [
                f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '{FULL}'; "
                "END $$",
                f"CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()",
            ],
        )
    drop = f"DROP TRIGGER {name}" if store_spec.startswith("sqlite:") else f"DROP TRIGGER {name} ON {table}"
    return lambda: _sql(store_spec, [drop])


def _assert_store_unavailable(reply: httpx.Response) -> None:
    assert reply.status_code == 503, reply.text[:300]
    error = reply.json()["error"]
    assert error["code"] == "store_unavailable" and error["type"] == "server_error" and FULL in error["message"]


def _wait_for(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + 30
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)
    return result


def test_a_response_whose_row_the_store_refuses_is_refused(serve: Serve, store_spec: str) -> None:
    live = serve(ANSWER * 10)
    url = f"{live.base_url}/responses"
    body = {"model": MODEL, "input": "hi"}
    undo = refuse(store_spec, "responses")
    _assert_store_unavailable(httpx.post(url, json={**body, "background": True}, timeout=30))
    _assert_store_unavailable(httpx.post(url, json=body, timeout=30))
    # A stream's 200 is out before its first write: it ends failed in-band, never completed.
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=30) as stream:
        events = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.failed", [e["type"] for e in events]
    assert "could not be stored" in events[-1]["response"]["error"]["message"]
    undo()
    queued = httpx.post(url, json={**body, "background": True}, timeout=30).json()
    assert httpx.get(f"{url}/{queued['id']}", timeout=30).status_code == 200


def test_a_conversation_the_store_refuses_is_a_503(serve: Serve, store_spec: str) -> None:
    live = serve(ANSWER)
    undo = refuse(store_spec, "conversations")
    _assert_store_unavailable(httpx.post(f"{live.base_url}/conversations", json={"metadata": {"a": "b"}}, timeout=30))
    undo()
    assert httpx.post(f"{live.base_url}/conversations", json={}, timeout=30).status_code == 200


def test_ready_says_the_store_fails_while_its_writes_fail(serve: Serve, store_spec: str) -> None:
    live = serve(ANSWER * 5)
    assert httpx.get(f"{live.root}/ready", timeout=30).status_code == 200
    undo = refuse(store_spec, "processes", "UPDATE")  # every heartbeat fails from now on
    unready = _wait_for(lambda: (r := httpx.get(f"{live.root}/ready", timeout=30)).status_code == 503 and r, "503")
    body = unready.json()
    assert body["status"] == "unavailable" and not body["store"]["ready"] and FULL in body["store"]["error"]
    assert "store" in body["reason"]
    # Stored requests are refused meanwhile, before anything is handed out; one not stored still runs.
    _assert_store_unavailable(httpx.post(f"{live.base_url}/responses", json={"model": MODEL, "input": "hi"}))
    plain = httpx.post(f"{live.base_url}/responses", json={"model": MODEL, "input": "hi", "store": False}, timeout=30)
    assert plain.status_code == 200
    undo()
    _wait_for(lambda: httpx.get(f"{live.root}/ready", timeout=30).status_code == 200, "ready again")
    assert httpx.post(f"{live.base_url}/responses", json={"model": MODEL, "input": "hi"}, timeout=30).status_code == 200
