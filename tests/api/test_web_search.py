"""Web search end to end: replay-scripted models drive the browser through the real server and the openai client.

A folder of documents made by each test is the local index (``--search-dir``); the online backend talks to
the fake Exa server. Every stream passes ``check_stream`` (protocol invariants, openai validation and its
accumulator). What the model reads back (the tool messages spliced into the next prompt) is checked on the
prompts a recording engine receives.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.serve import Config, create_app
from harmony_responses.serve.app import web_search_from_config
from harmony_responses.serve.cli import add_serve_arguments, banner, config_from_args
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding
from tools.fake_exa import API_KEY, PAGES, FakeExa
from translate.invariants import check_stream

from .conftest import Serve
from .helpers import MODEL, openai_client, post, sse_events, start_live

ETNA = """# Mount Etna

Mount Etna is an active stratovolcano on the east coast of Sicily, Italy.

## Height

Etna stands about 3,357 metres tall, the highest peak in Italy south of the Alps.
Its height changes with each eruption.
"""
VESUVIUS = "<html><head><title>Vesuvius</title></head><body><p>Vesuvius destroyed Pompeii in 79 AD.</p></body></html>"

SEARCH = (
    "<|channel|>analysis<|message|>Let me search the documents.<|end|>"
    '<|start|>assistant<|channel|>analysis to=browser.search code<|message|>{"query": "Etna volcano height"}<|call|>'
)
OPEN = '<|channel|>analysis to=browser.open code<|message|>{"id": 0}<|call|>'
FIND = '<|channel|>analysis to=browser.find code<|message|>{"pattern": "metres"}<|call|>'
ANSWER = (
    "<|channel|>analysis<|message|>Found it.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Etna is about 3,357 m tall【2†L0-L1】 and still active【1†L4】."
    "<|return|>"
)
WEB_SEARCH = {"type": "web_search"}


@pytest.fixture
def docs() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="kb", dir="/tmp"))  # short path: page lines don't wrap
    (root / "etna.md").write_text(ETNA)
    (root / "vesuvius.html").write_text(VESUVIUS)
    yield root
    shutil.rmtree(root)


def stream(live: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = post(live, {"model": MODEL, "stream": True, **body})
    assert response.status_code == 200, response.text
    events = sse_events(response.content)
    check_stream(events)
    return events


def items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return events[-1]["response"]["output"]


def test_search_open_find_and_cite_a_local_folder(serve: Serve, docs: Path) -> None:
    live = serve([SEARCH, OPEN, FIND, ANSWER], search_dir=str(docs))
    events = stream(live, {"input": "How tall is Etna?", "tools": [WEB_SEARCH]})
    assert events[-1]["type"] == "response.completed"
    output = items(events)
    etna = (docs / "etna.md").as_uri()
    assert [item["type"] for item in output] == [
        "reasoning",
        "web_search_call",
        "web_search_call",
        "web_search_call",
        "reasoning",
        "message",
    ]
    searches = output[1:4]
    assert [s["status"] for s in searches] == ["completed"] * 3
    assert [s["action"] for s in searches] == [
        {"type": "search", "query": "Etna volcano height"},
        {"type": "open_page", "url": etna},
        {"type": "find_in_page", "url": etna, "pattern": "metres"},
    ]
    # Each call is bracketed: in_progress at added, searching at the call, completed after the tool ran.
    for search in searches:
        kinds = [
            e["type"] for e in events if e.get("item_id") == search["id"] or e.get("item", {}).get("id") == search["id"]
        ]
        assert kinds == [
            "response.output_item.added",
            "response.web_search_call.in_progress",
            "response.web_search_call.searching",
            "response.web_search_call.completed",
            "response.output_item.done",
        ]
    # Citations: both cursors resolve to the document (cursor 2 is the find results page of cursor 1).
    part = output[-1]["content"][0]
    cited = f" ([Mount Etna]({etna})) "
    assert part["text"] == f"Etna is about 3,357 m tall{cited} and still active{cited}."
    assert [(a["start_index"], a["end_index"]) for a in part["annotations"]] == [
        (len("Etna is about 3,357 m tall"), len("Etna is about 3,357 m tall") + len(cited)),
        (len(f"Etna is about 3,357 m tall{cited} and still active"), len(part["text"]) - 1),
    ]
    for annotation in part["annotations"]:
        assert annotation == {
            "type": "url_citation",
            "start_index": annotation["start_index"],
            "end_index": annotation["end_index"],
            "title": "Mount Etna",
            "url": etna,
        }
        assert part["text"][annotation["start_index"] : annotation["end_index"]] == cited
    added = [e for e in events if e["type"] == "response.output_text.annotation.added"]
    assert [e["annotation"] for e in added] == part["annotations"]
    assert [e["annotation_index"] for e in added] == [0, 1]


def test_the_openai_client_gets_items_and_annotations(serve: Serve, docs: Path) -> None:
    live = serve([SEARCH, OPEN, FIND, ANSWER], search_dir=str(docs))
    client = openai_client(live)
    response = client.responses.create(
        model=MODEL,
        input="How tall is Etna?",
        tools=[{"type": "web_search"}],
        include=["web_search_call.action.sources"],
    )
    calls = [item for item in response.output if item.type == "web_search_call"]
    assert calls[0].action.type == "search" and calls[0].action.query == "Etna volcano height"
    assert [s.url for s in calls[0].action.sources or []] == [(docs / "etna.md").as_uri()]
    assert calls[1].action.type == "open_page" and calls[2].action.type == "find_in_page"
    message = response.output[-1]
    assert message.type == "message"
    annotations = message.content[0].annotations
    assert [a.type for a in annotations] == ["url_citation", "url_citation"]
    assert response.output_text.count("([Mount Etna](file://") == 2
    # Streamed through the SDK's accumulator: the final response carries the same annotations.
    with client.responses.stream(model=MODEL, input="How tall is Etna?", tools=[{"type": "web_search"}]) as s:
        for _ in s:
            pass
        final = s.get_final_response()
    assert final.output[-1].content[0].annotations == annotations


class Recorder:
    """A scripted engine that keeps every prompt it was given."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)
        self.prompts: list[str] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        encoding = load_encoding()
        self.prompts.append(encoding.decode(request.prompt_ids))
        yield TokenChunk(token_ids=encoding.encode(self.lines.pop(0), allowed_special="all"))
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


def test_the_model_reads_what_the_browser_showed(serve: Serve, docs: Path) -> None:
    recorder = Recorder([SEARCH, OPEN, ANSWER])
    live = serve(recorder.engine, search_dir=str(docs))
    stream(live, {"input": "How tall is Etna?", "tools": [WEB_SEARCH]})
    first, second, third = recorder.prompts
    assert "## browser\n\n// Tool for browsing." in first and "namespace browser {" in first
    etna = (docs / "etna.md").as_uri()
    # The call as the model wrote it, then the results as the tool message, then the assistant's turn again.
    call = '<|channel|>analysis to=browser.search code<|message|>{"query": "Etna volcano height"}<|call|>'
    results = second[second.index(call) + len(call) :]
    assert results.startswith(
        "<|start|>browser.search to=assistant<|channel|>analysis<|message|>[0] Etna volcano height\n"
        "**viewing lines [0 - "
    )
    assert "L2: # Search Results\nL3: \nL4:   * 【0†Mount Etna】 " in results
    assert results.endswith("<|end|><|start|>assistant")
    assert f"<|start|>browser.open to=assistant<|channel|>analysis<|message|>[1] Mount Etna ({etna})\n" in third
    assert "L8: Etna stands about 3,357 metres tall" in third


def test_a_failing_call_ends_its_item_failed_and_the_model_is_told(serve: Serve, docs: Path) -> None:
    bad_open = '<|channel|>analysis to=browser.open code<|message|>{"id": "https://example.com/elsewhere"}<|call|>'
    recorder = Recorder([bad_open, "<|channel|>final<|message|>I could not open it.<|return|>"])
    live = serve(recorder.engine, search_dir=str(docs))
    events = stream(live, {"input": "Open it", "tools": [WEB_SEARCH]})
    assert events[-1]["type"] == "response.completed"
    call, answer = items(events)
    assert call["status"] == "failed" and call["action"] == {
        "type": "open_page",
        "url": "https://example.com/elsewhere",
    }
    kinds = [e["type"] for e in events if e.get("item_id") == call["id"]]
    assert "response.web_search_call.completed" not in kinds and "response.web_search_call.searching" in kinds
    assert answer["content"][0]["text"] == "I could not open it."
    assert recorder.prompts[1].endswith(
        '<|start|>browser.open to=assistant<|channel|>analysis<|message|>{"error": "Error fetching URL '
        '`https://example.com/elsewhere`: not in the local search index"}<|end|><|start|>assistant'
    )


@pytest.fixture
def exa() -> Iterator[FakeExa]:
    fake = FakeExa(pages=list(PAGES)).start()
    yield fake
    fake.stop()


def test_online_backend_search_open_and_cite(exa: FakeExa) -> None:
    search = '<|channel|>analysis to=browser.search code<|message|>{"query": "moon tides"}<|call|>'
    answer = "<|channel|>final<|message|>The Moon's gravity causes tides【1†L3】.<|return|>"
    recorder = Recorder([search, OPEN, answer])
    config = Config(
        models=(MODEL,), current_date="2025-06-01", search_backend="exa", search_api_key=API_KEY, search_api_url=exa.url
    )
    live = start_live(create_app(config, engine=recorder.engine))
    try:
        events = stream(
            live, {"input": "Why are there tides?", "tools": [{"type": "web_search", "external_web_access": False}]}
        )
    finally:
        live.stop()
    search_call, open_call, message = items(events)
    assert search_call["action"] == {"type": "search", "query": "moon tides"}
    assert open_call["action"] == {"type": "open_page", "url": "https://www.example.org/tides"}
    assert exa.requests[0]["body"]["contents"]["maxAgeHours"] == -1  # external_web_access: false → cache only
    part = message["content"][0]
    assert part["text"] == "The Moon's gravity causes tides ([www.example.org](https://www.example.org/tides)) ."
    assert part["annotations"][0]["url"] == "https://www.example.org/tides"
    assert part["annotations"][0]["title"] == "Tides explained"
    assert "L2: # Tides" in recorder.prompts[2]


def test_a_backend_that_is_down_fails_the_item_and_the_response_goes_on(exa: FakeExa) -> None:
    exa.fail_with = 503
    search = '<|channel|>analysis to=browser.search code<|message|>{"query": "moon"}<|call|>'
    recorder = Recorder([search, "<|channel|>final<|message|>Search is down.<|return|>"])
    config = Config(models=(MODEL,), search_backend="exa", search_api_key=API_KEY, search_api_url=exa.url)
    live = start_live(create_app(config, engine=recorder.engine))
    try:
        events = stream(live, {"input": "Moon?", "tools": [WEB_SEARCH]})
    finally:
        live.stop()
    call, message = items(events)
    assert call["status"] == "failed" and call["action"] == {"type": "search", "query": "moon"}
    assert events[-1]["type"] == "response.completed" and message["content"][0]["text"] == "Search is down."
    assert (
        '<|message|>{"error": "Error during search for `moon`: the search service answered HTTP 503: Service '
        'temporarily unavailable"}<|end|>' in recorder.prompts[1]
    )


def test_without_a_backend_web_search_is_accepted_but_not_offered(serve: Serve) -> None:
    recorder = Recorder(["<|channel|>final<|message|>Hi.<|return|>"])
    live = serve(recorder.engine)
    events = stream(live, {"input": "Hi", "tools": [{"type": "web_search", "external_web_access": False}]})
    assert "browser" not in recorder.prompts[0]
    assert [t["type"] for t in events[-1]["response"]["tools"]] == ["web_search"]
    forced = post(
        live, {"model": MODEL, "input": "Hi", "tools": [WEB_SEARCH], "tool_choice": {"type": "web_search_preview"}}
    )
    assert forced.status_code == 400
    assert forced.json()["error"]["param"] == "tool_choice.type"
    assert "no search backend" in forced.json()["error"]["message"]


def test_codex_style_declaration_with_a_local_index_is_offered_and_can_be_forced(serve: Serve, docs: Path) -> None:
    recorder = Recorder(
        ['search code<|message|>{"query": "Vesuvius"}<|call|>', "<|channel|>final<|message|>Pompeii.<|return|>"]
    )
    live = serve(recorder.engine, search_dir=str(docs))
    tools = [{"type": "web_search", "external_web_access": False}]
    events = stream(live, {"input": "Vesuvius?", "tools": tools, "tool_choice": {"type": "web_search_preview"}})
    assert recorder.prompts[0].endswith("<|start|>assistant<|channel|>analysis to=browser.")
    assert "namespace browser {" in recorder.prompts[0]
    call, message = items(events)
    assert call["type"] == "web_search_call" and call["status"] == "completed"
    assert call["action"] == {"type": "search", "query": "Vesuvius"}
    assert "【0†Vesuvius】 Vesuvius destroyed Pompeii in 79 AD." in recorder.prompts[1]


# ---------------------------------------------------------------------------------------------- options


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(argv)


def test_search_options_flags_environment_and_banner(monkeypatch: pytest.MonkeyPatch, docs: Path) -> None:
    for name in (
        "HARMONY_RESPONSES_SEARCH_DIR",
        "HARMONY_RESPONSES_SEARCH_BACKEND",
        "HARMONY_RESPONSES_SEARCH_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EXA_API_KEY", "from-exa-env")
    config = config_from_args(_parse(["--search-backend", "exa", "--search-api-url", "http://127.0.0.1:9"]))
    assert (config.search_backend, config.search_api_key, config.search_api_url) == (
        "exa",
        "from-exa-env",
        "http://127.0.0.1:9",
    )
    assert "from-exa-env" not in repr(config)
    monkeypatch.setenv("HARMONY_RESPONSES_SEARCH_DIR", str(docs))
    monkeypatch.setenv("HARMONY_RESPONSES_SEARCH_API_KEY", "ours")
    config = config_from_args(_parse(["--search-base-url", "https://kb.example.com/"]))
    assert (config.search_dir, config.search_backend, config.search_api_key) == (str(docs), None, "ours")
    web_search = web_search_from_config(config)
    assert web_search is not None and web_search.describe() == f"local index of {docs} (2 documents)"
    text = banner(config, "echo", "127.0.0.1", 8000, web_search.describe())
    assert f"  search: local index of {docs} (2 documents)" in text.splitlines()
    with pytest.raises(SystemExit):
        _parse(["--search-backend", "bing"])
