"""The trace page in a real headless Chromium: what a user sees of a streamed response with a tool call and a
recovered malformed header, and that the page asks nothing of anyone but the server.

Chromium from npm, installed at test setup (tests/chromium.py); the tests skip, naming the command to run,
when it cannot be installed or cannot start here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from api.helpers import MODEL, openai_client
from chromium import ensure, node

from .helpers import ANSWER, MALFORMED_SEARCH, WEB_SEARCH, Servers, trace_json

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def browser() -> None:
    ensure()


def shown(text: str) -> str:
    return text.replace("\n", "↵\n")  # how the page shows a newline inside a token


def test_the_trace_page_of_a_streamed_response_in_chromium(
    browser: None, servers: Servers, docs: Path, tmp_path: Path
) -> None:
    live = servers.start([MALFORMED_SEARCH, ANSWER], trace=True, search_dir=str(docs))
    stream = openai_client(live).responses.create(
        model=MODEL,
        input="How tall is Etna?",
        tools=[WEB_SEARCH],
        stream=True,  # type: ignore[list-item]
    )
    received = [event for event in stream]
    response_id = received[-1].response.id
    trace = trace_json(live, response_id).json()
    by_seq = {entry["seq"]: entry for entry in trace["events"]}

    shot = Path(os.environ.get("TRACE_SCREENSHOT") or tmp_path / "trace.png")
    done = node((HERE / "trace_page.mjs").read_text(), f"{live.base_url}/responses/{response_id}/trace", str(shot))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["errors"] == []
    # The page asked the server for itself and for nothing else, anywhere.
    assert seen["requested"] == [f"{live.base_url}/responses/{response_id}/trace"]

    # The token timeline: every output token, in order, as the model wrote it, coloured by channel.
    timeline = seen["timeline"]
    assert [t["i"] for t in timeline] == [t["i"] for t in trace["tokens"]]
    assert [t["text"] for t in timeline] == [shown(t["text"]) for t in trace["tokens"]]
    finals = [t["text"] for t in timeline if "ch-final" in t["classes"] and "special" not in t["classes"]]
    assert "".join(finals) == "Etna is about 3,357 m tall."
    assert seen["toolMarkers"] and seen["toolMarkers"][0].startswith("⚙ browser.search")

    # Click a token: its events are the ones selected; click an event: its token is.
    token = trace["tokens"][seen["clickedToken"]]
    assert seen["eventsOfToken"] == token["events"] != []
    assert "response.output_text.delta" in seen["tokenDetail"]
    assert seen["tokensOfEvent"] == [by_seq[seen["clickedEvent"]]["token"]]
    assert by_seq[seen["clickedEvent"]]["event"]["type"] == "response.output_text.delta"

    # The recovered malformed header is highlighted, and its tokens are the ones the recovery names.
    recovered = "".join(t["text"] for t in timeline if "recovered" in t["classes"])
    assert recovered == "I should search first<|channel|>"
    assert seen["recoveredStyle"]["outline"] == "solid"
    [recovery] = seen["recoveries"]
    assert recovery.startswith("text_before_channel")
    assert seen["tokensOfRecovery"] == trace["recoveries"][0]["tokens"]

    # The timing plot: the arrival line, the tool's time, the figures.
    assert seen["plot"] == 1 and seen["toolBands"] == 1
    assert "time to first token" in seen["timing"] and "tool time" in seen["timing"]
    assert shot.stat().st_size > 10_000


COMPACTION_PAGE = """
import chromium from "@sparticuz/chromium";
import { chromium as playwright } from "playwright-core";
const browser = await playwright.launch({ executablePath: await chromium.executablePath(), args: chromium.args });
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  await page.goto(process.argv[2]);
  await page.waitForSelector("#tokens .tok");
  await page.locator("#engine-calls li.compaction details.compaction-tokens summary").click();
  const texts = (selector) => page.$$eval(selector, (nodes) => nodes.map((n) => n.textContent));
  console.log(JSON.stringify({
    calls: await page.$$eval("#engine-calls > li", (nodes) => nodes.map((n) => n.firstChild.textContent)),
    summary: await texts("#engine-calls li.compaction .compaction-tokens .tokens:first-of-type .tok"),
    summaryVisible: await page.locator("#engine-calls li.compaction .compaction-tokens .tok").first().isVisible(),
    timeline: await texts("#tokens .tok"),
    bands: await page.$$eval("#timing svg rect.compactionband", (nodes) => nodes.length),
    errors,
  }));
} finally {
  await browser.close();
}
"""


def test_a_compactions_summary_call_is_shown_with_the_engine_calls(browser: None, servers: Servers) -> None:
    summary = "The user asked how tall Etna is."
    answer = "<|channel|>final<|message|>About 3,357 m.<|return|>"
    live = servers.start([summary + "<|return|>", answer], trace=True)
    conversation = [
        {"role": "user", "content": "How tall is Etna?"},
        {"role": "assistant", "content": "Let me think about Etna's height."},
        {"role": "user", "content": "In metres, please."},
    ]
    response = openai_client(live).responses.create(
        model=MODEL,
        input=conversation,  # type: ignore[arg-type]
        context_management=[{"type": "compaction", "compact_threshold": 20}],
    )
    done = node(COMPACTION_PAGE, f"{live.base_url}/responses/{response.id}/trace")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["errors"] == []
    first, second = seen["calls"]
    assert first.startswith("compaction summary · ") and not second.startswith("compaction")
    assert "".join(seen["summary"]).endswith(summary + "<|return|>") and seen["summaryVisible"]
    # The answer's timeline is the answer's tokens only; the summary's time is a band of its own in the plot.
    assert "".join(seen["timeline"]) == answer and seen["bands"] == 1
