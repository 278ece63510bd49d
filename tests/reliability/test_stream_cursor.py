"""A ``starting_after`` outside what the store can compare with is a 400 before the stream starts (issue 25 #6).

Before: |N| >= 2**63 on SQLite and N >= 2**31 on PostgreSQL answered 200 with the SSE headers, then the body
was cut and "Exception in ASGI application" logged (the driver refused the parameter).
"""

from __future__ import annotations

import httpx
import pytest

from api.helpers import MODEL
from state.conftest import Serve

ANSWER = ["<|channel|>final<|message|>OK<|return|>"]


@pytest.mark.parametrize("after", [2**31, 2**63, -(2**63) - 1, 10**30])
def test_a_cursor_out_of_the_stores_range_is_a_400(serve: Serve, after: int) -> None:
    live = serve(ANSWER)
    created = httpx.post(f"{live.base_url}/responses", json={"model": MODEL, "input": "hi"}, timeout=30).json()
    reply = httpx.get(
        f"{live.base_url}/responses/{created['id']}", params={"stream": "true", "starting_after": after}, timeout=30
    )
    assert reply.status_code == 400, reply.text[:300]
    error = reply.json()["error"]
    assert error["param"] == "starting_after" and error["type"] == "invalid_request_error"
    assert error["code"] in ("integer_above_max_value", "integer_below_min_value")


def test_the_largest_cursor_streams_nothing_after_it(serve: Serve) -> None:
    live = serve(ANSWER)
    created = httpx.post(f"{live.base_url}/responses", json={"model": MODEL, "input": "hi"}, timeout=30).json()
    url = f"{live.base_url}/responses/{created['id']}"
    reply = httpx.get(url, params={"stream": "true", "starting_after": 2**31 - 1}, timeout=30)
    assert reply.status_code == 200 and reply.text == ""
    replay = httpx.get(url, params={"stream": "true", "starting_after": 2}, timeout=30)
    assert replay.status_code == 200 and "event: response.completed" in replay.text
