"""``harmony-responses trace``: a traced response's page or JSON from a live server, and a recording's page."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from api.helpers import post, sse_events
from harmony_responses.cli import main

from .helpers import ANSWER, MALFORMED_SEARCH, WEB_SEARCH, Servers, trace_json

BODY = {"input": "How tall is Etna?", "tools": [WEB_SEARCH], "stream": True}


def embedded(page: str) -> dict:
    match = re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', page, re.S)
    assert match, "the page embeds its trace"
    return orjson.loads(match.group(1))


def test_trace_writes_the_page_and_the_json_of_a_served_response(
    servers: Servers, docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live = servers.start([MALFORMED_SEARCH, ANSWER], trace=True, search_dir=str(docs), api_keys=("k",))
    sent = sse_events(post(live, {"model": "gpt-oss-20b", **BODY}, headers={"authorization": "Bearer k"}).content)
    response_id = sent[-1]["response"]["id"]
    served = trace_json(live, response_id, authorization="Bearer k").json()

    page = tmp_path / "trace.html"
    assert main(["trace", response_id, "--url", live.root, "--api-key", "k", "-o", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("<!doctype html>") and embedded(text) == served
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "the page loads nothing from elsewhere"

    capsys.readouterr()
    assert main(["trace", response_id, "--url", live.root, "--api-key", "k", "--json", "-o", "-"]) == 0
    assert orjson.loads(capsys.readouterr().out) == served

    assert main(["trace", response_id, "--url", live.root, "--api-key", "wrong", "-o", str(page)]) == 2
    assert "answered 401" in capsys.readouterr().err
    assert main(["trace", "resp_nothere", "--url", live.root, "--api-key", "k", "-o", str(page)]) == 2
    assert "answered 404: Response with id 'resp_nothere' not found." in capsys.readouterr().err


def test_trace_makes_the_page_of_a_recorded_engine_call(
    servers: Servers, docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = tmp_path / "calls.jsonl"
    live = servers.start([MALFORMED_SEARCH, ANSWER], search_dir=str(docs), record=str(recording))
    sse_events(post(live, {"model": "gpt-oss-20b", **BODY}).content)
    first, second = (orjson.loads(line) for line in recording.read_text().splitlines())

    page = tmp_path / "recorded.html"
    tools = orjson.dumps([WEB_SEARCH]).decode()
    assert main(["trace", "--record", str(recording), "--line", "1", "--tools", tools, "-o", str(page)]) == 0
    trace = embedded(page.read_text())
    assert [t["id"] for t in trace["tokens"]] == first["tokens"]
    assert [t["chunk"] for t in trace["tokens"]] == [k for k, n in enumerate(first["chunks"]) for _ in range(n)]
    assert [r["rule"] for r in trace["recoveries"]] == ["text_before_channel"]
    [tool] = trace["tools"]
    assert tool["name"] == "search" and tool["output"] is None  # a recording holds no tool results
    assert trace["prompt"]["count"] == first["prompt_tokens"]

    assert main(["trace", "--record", str(recording), "--json", "-o", str(page)]) == 0  # the last call
    last = orjson.loads(page.read_text())
    assert [t["id"] for t in last["tokens"]] == second["tokens"]
    assert last["events"][-1]["event"]["type"] == "response.completed"

    capsys.readouterr()
    assert main(["trace", "--record", str(recording), "--line", "3", "-o", str(page)]) == 2
    assert "has 2 recorded calls" in capsys.readouterr().err
