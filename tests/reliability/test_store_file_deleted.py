"""A SQLite store file deleted under a running server is noticed: writes are refused with 503 and ``/ready`` says
so, logged once (issue 25 #10).

Before: the open connections went on writing into the unlinked file without an error, ``/ready`` stayed 200, and
at the next start everything written since was gone.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest

from api.helpers import MODEL, start_live, write_script
from harmony_responses.serve import Config, create_app


def test_a_deleted_store_file_refuses_writes_and_is_not_ready(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "responses.sqlite3"
    engine = write_script(tmp_path / "script.jsonl", ["<|channel|>final<|message|>OK<|return|>"])
    live = start_live(create_app(Config(models=(MODEL,), engine=engine, store=f"sqlite:{path}")))
    try:
        assert httpx.post(f"{live.base_url}/conversations", json={}, timeout=30).status_code == 200
        assert httpx.get(f"{live.root}/ready", timeout=30).status_code == 200
        caplog.set_level(logging.ERROR, logger="harmony_responses.store")
        path.unlink()

        # The next write notices at once.
        refused = httpx.post(f"{live.base_url}/conversations", json={}, timeout=30)
        assert refused.status_code == 503, refused.text[:300]
        error = refused.json()["error"]
        assert error["code"] == "store_unavailable" and "deleted" in error["message"]
        # And the heartbeat: /ready is 503 until the server is restarted.
        deadline = time.monotonic() + 30
        while (ready := httpx.get(f"{live.root}/ready", timeout=30)).status_code == 200:
            assert time.monotonic() < deadline, "/ready stayed 200"
            time.sleep(0.1)
        assert ready.status_code == 503 and "deleted" in ready.json()["store"]["error"]
        for body in ({"background": True}, {}, {"stream": True}):
            reply = httpx.post(f"{live.base_url}/responses", json={"model": MODEL, "input": "hi", **body}, timeout=30)
            assert reply.status_code == 503 and reply.json()["error"]["code"] == "store_unavailable"
        unstored = {"model": MODEL, "input": "hi", "store": False}
        assert httpx.post(f"{live.base_url}/responses", json=unstored, timeout=30).status_code == 200
        assert not path.exists()  # nothing wrote a new, empty store in its place either
    finally:
        live.stop()
    noticed = [r for r in caplog.records if "deleted or replaced" in r.getMessage()]
    assert len(noticed) == 1, [r.getMessage() for r in noticed]
