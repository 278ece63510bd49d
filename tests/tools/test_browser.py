"""The browser tool (tools/browser): display format, page stack, find, errors, actions, citations; both backends.

The local index runs over a folder made by each test; the Exa backend talks real HTTP to the fake in
``fake_exa.py``. Displays are compared literally where the format is gpt-oss's (harmony.md §5.2).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harmony_responses.tools import ToolResult
from harmony_responses.tools.browser import (
    BrowserSession,
    ExaBackend,
    LocalIndex,
    SearchOptions,
    WebSearch,
    web_search_from_options,
)
from harmony_responses.tools.browser._page import Page, render_view
from harmony_responses.translate import ItemKind, ToolCall

from .fake_exa import API_KEY, PAGES, FakeExa

PARIS_MD = """# Paris

Paris is the capital of France, with 2.1 million inhabitants.
See also [Lyon](cities/lyon.html) and [the Louvre](https://www.louvre.fr/en).

## History

The city was founded by the Parisii, a Celtic tribe, in the 3rd century BC.
"""
LYON_HTML = """<html><head><title>Lyon, city of lights</title><style>p {color: red}</style></head>
<body><h1>Lyon</h1><p>Lyon is famous   for its <b>cuisine</b> and silk.</p>
<ul><li>Fourvière</li><li><a href="../paris.md">Back to Paris</a></li><li><a href="#top">top</a></li></ul>
<img src="x.png" alt="A bridge"><script>document.write("hidden")</script></body></html>
"""


@pytest.fixture
def docs() -> Iterator[Path]:
    # A short path: the page's "URL: file://…" line stays under 80 columns, so line numbers are fixed.
    root = Path(tempfile.mkdtemp(prefix="docs", dir="/tmp"))
    (root / "cities").mkdir(parents=True)
    (root / "paris.md").write_text(PARIS_MD)
    (root / "cities" / "lyon.html").write_text(LYON_HTML)
    (root / "marseille.txt").write_text("Marseille is a port on the Mediterranean Sea.\n")
    (root / ".hidden.md").write_text("secret capital")
    (root / "image.png").write_bytes(b"\x89PNG capital")
    yield root
    shutil.rmtree(root)


def call(session: BrowserSession, name: str, arguments: Any = None) -> ToolResult:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    tool_call = ToolCall(
        kind=ItemKind.WEB_SEARCH, item_id="ws_1", name=name, namespace="browser", arguments=text, channel="analysis"
    )
    return asyncio.run(session.call(tool_call))


def local_session(root: Path, **kwargs: Any) -> BrowserSession:
    return BrowserSession(LocalIndex(root, refresh_interval=0), **kwargs)


# ---------------------------------------------------------------------------------------------- display


def test_search_results_page_is_gpt_oss_format(docs: Path) -> None:
    session = local_session(docs)
    result = call(session, "search", {"query": "Mediterranean port"})
    assert result.error is None
    url = (docs / "marseille.txt").as_uri()
    assert result.text == (
        "[0] Mediterranean port\n"
        "**viewing lines [0 - 4] of 4**\n\n"
        "L0: \n"
        "L1: URL: \n"
        "L2: # Search Results\n"
        "L3: \n"
        "L4:   * 【0†marseille.txt】 Marseille is a port on the Mediterranean Sea."
    )
    assert result.action == {"type": "search", "query": "Mediterranean port"}
    assert session.stack[0].links == {0: url}
    assert session.cite(0) is None  # search results have no URL


def test_open_a_result_then_follow_links_between_documents(docs: Path) -> None:
    session = local_session(docs)
    call(session, "search", {"query": "capital of France"})
    opened = call(session, "open", {"id": 0})
    paris = (docs / "paris.md").as_uri()
    assert opened.action == {"type": "open_page", "url": paris}
    assert opened.text.startswith(f"[1] Paris ({paris})\n**viewing lines [0 - 9] of 9**\n\nL0: \nL1: URL: {paris}\n")
    assert "L5: See also 【0†Lyon】 and 【1†the Louvre†www.louvre.fr】." in opened.text
    # Link 0 of the Markdown page is the relative link to the HTML document, resolved against its URL.
    lyon = call(session, "open", {"id": 0})
    assert lyon.action == {"type": "open_page", "url": (docs / "cities" / "lyon.html").as_uri()}
    assert lyon.text.splitlines()[0] == f"[2] Lyon, city of lights ({(docs / 'cities' / 'lyon.html').as_uri()})"
    body = lyon.text.split("\n\n", 1)[1]
    assert "# Lyon" in body and "Lyon is famous for its cuisine and silk." in body
    assert "  * Fourvière" in body and "【0†Back to Paris】" in body and "  * top" in body
    assert "[Image 0: A bridge]" in body and "hidden" not in body and "color" not in body
    assert session.cite(1) == (paris, "Paris") and session.cite(2) == (lyon.action["url"], "Lyon, city of lights")


def test_long_pages_are_shown_a_token_window_at_a_time(docs: Path) -> None:
    (docs / "long.txt").write_text("\n".join(f"Line {i} of a long manual about turbines." for i in range(400)))
    session = local_session(docs)
    first = call(session, "open", {"id": (docs / "long.txt").as_uri()})
    header = first.text.splitlines()[1]
    assert header.startswith("**viewing lines [0 - ") and header.endswith(" of 401**")
    shown = int(header.split(" - ")[1].split("]")[0])
    assert 50 < shown < 200  # about 1024 tokens of ~12-token lines, not the whole page
    scrolled = call(session, "open", {"loc": shown + 1, "num_lines": 3})
    assert scrolled.text.splitlines()[1] == f"**viewing lines [{shown + 1} - {shown + 3}] of 401**"
    assert scrolled.action == {"type": "open_page", "url": (docs / "long.txt").as_uri()}
    assert session.stack[0] is session.stack[1]  # scrolling pushes the same page again


def test_find_shows_matches_and_opening_one_jumps_to_it(docs: Path) -> None:
    session = local_session(docs)
    paris = (docs / "paris.md").as_uri()
    call(session, "open", {"id": paris})
    found = call(session, "find", {"pattern": "CELTIC"})
    assert found.action == {"type": "find_in_page", "url": paris, "pattern": "CELTIC"}
    assert found.text == (
        f"[1] Find results for text: `CELTIC` in `Paris` ({paris}/find?pattern=CELTIC)\n"
        "**viewing lines [0 - 1] of 1**\n\n"
        "L0: # 【0†match at L9】\n"
        "L1: The city was founded by the Parisii, a Celtic tribe, in the 3rd century BC."
    )
    assert session.cite(1) == (paris, "Paris")  # a find results page cites the page it searched
    jumped = call(session, "open", {"id": 0})
    assert jumped.action == {"type": "open_page", "url": paris}
    assert jumped.text.splitlines()[1] == "**viewing lines [5 - 9] of 9**"  # four lines above the match
    missing = call(session, "find", {"pattern": "zebra", "cursor": 0})
    assert missing.text.endswith("L0: No `find` results for pattern: `zebra`")


def test_view_source_shows_the_raw_document(docs: Path) -> None:
    session = local_session(docs)
    lyon = (docs / "cities" / "lyon.html").as_uri()
    result = call(session, "open", {"id": lyon, "view_source": True})
    assert "<script>document.write" in result.text and result.action == {"type": "open_page", "url": lyon}


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("name", "arguments", "message", "action"),
    [
        ("browse", {}, "Unknown function: browse", {"type": "search"}),
        ("search", "not json", "Invalid function arguments", {"type": "search"}),
        ("search", "[1]", "Invalid function arguments", {"type": "search"}),
        ("search", {"query": 3}, "Invalid function arguments: `query` should be a non-empty string", None),
        ("open", {"id": 0}, "No pages to access!", {"type": "open_page", "url": None}),
        ("find", {"pattern": "x"}, "No pages to access!", {"type": "find_in_page", "url": "", "pattern": "x"}),
        ("open", {"loc": "ten"}, "Invalid function arguments: `loc` should be an integer, not `'ten'`", None),
    ],
)
def test_errors_are_results_the_model_reads(
    docs: Path, name: str, arguments: Any, message: str, action: dict | None
) -> None:
    result = call(local_session(docs), name, arguments)
    assert result.error == message
    assert json.loads(result.text) == {"error": message}
    if action is not None:
        assert result.action == action


def test_bad_cursor_link_and_location(docs: Path) -> None:
    session = local_session(docs)
    call(session, "search", {"query": "capital"})
    assert call(session, "open", {"id": 7}).error == "Invalid link id `7`."
    assert call(session, "open", {"id": 0, "cursor": 5}).error == (
        "Cursor `5` is out of range. Available cursor indices: [0 - 0]."
    )
    assert call(session, "find", {"pattern": "x"}).error == (
        "Cannot run `find` on search results page or find results page"
    )
    result = call(session, "open", {"id": 0, "loc": 500})
    assert result.error == "Invalid location parameter: `500`. Cannot exceed page maximum of 9."
    assert result.action == {"type": "open_page", "url": (docs / "paris.md").as_uri()}
    assert len(session.stack) == 1  # failed views leave no cursor behind
    outside = call(session, "open", {"id": "https://www.louvre.fr/en"})
    assert outside.error == "Error fetching URL `https://www.louvre.fr/en`: not in the local search index"


def test_sources_only_when_included(docs: Path) -> None:
    result = call(local_session(docs, include_sources=True), "search", {"query": "Paris"})
    assert result.action == {
        "type": "search",
        "query": "Paris",
        "sources": [
            {"type": "url", "url": (docs / "paris.md").as_uri()},
            {"type": "url", "url": (docs / "cities" / "lyon.html").as_uri()},
        ],
    }


# ---------------------------------------------------------------------------------------------- the local index


def test_index_skips_hidden_and_other_files_and_survives_query_syntax(docs: Path) -> None:
    index = LocalIndex(docs, refresh_interval=0)
    assert index.describe() == f"local index of {docs} (3 documents)"
    session = BrowserSession(index)
    assert ".hidden" not in call(session, "search", {"query": "secret capital"}).text
    for query in ['"unbalanced', "AND OR NOT", "NEAR(a b)", "col:umn*", "^-+"]:
        assert call(session, "search", {"query": query}).error is None
    nothing = call(session, "search", {"query": "zebra"})
    assert nothing.text.endswith("L4: No results found for `zebra`.")


def test_index_follows_changes_to_the_folder(docs: Path) -> None:
    session = local_session(docs)
    assert "【0†" not in call(session, "search", {"query": "volcano"}).text
    (docs / "etna.md").write_text("# Etna\n\nEtna is a volcano in Sicily.")
    assert "【0†Etna†" not in (text := call(session, "search", {"query": "volcano"}).text) and "【0†Etna】" in text
    (docs / "etna.md").write_text("# Etna\n\nEtna is the tallest active volcano in Europe.")
    os.utime(docs / "etna.md", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert "tallest" in call(session, "search", {"query": "volcano"}).text
    (docs / "etna.md").unlink()
    assert "Etna" not in call(session, "search", {"query": "volcano"}).text


def test_base_url_gives_documents_web_addresses(docs: Path) -> None:
    session = BrowserSession(LocalIndex(docs, base_url="https://docs.example.com/kb", refresh_interval=0))
    result = call(session, "search", {"query": "Lyon cuisine"})
    assert "【0†Lyon, city of lights†docs.example.com】" in result.text
    opened = call(session, "open", {"id": 0})
    assert opened.action == {"type": "open_page", "url": "https://docs.example.com/kb/cities/lyon.html"}
    back = call(session, "open", {"id": 0})  # "../paris.md" from the HTML page
    assert back.action == {"type": "open_page", "url": "https://docs.example.com/kb/paris.md"}
    assert session.cite(2) == ("https://docs.example.com/kb/paris.md", "Paris")


def test_options_build_the_configured_backend(docs: Path) -> None:
    assert web_search_from_options() is None
    local = web_search_from_options(search_dir=str(docs))
    assert isinstance(local, WebSearch) and isinstance(local.backend, LocalIndex)
    exa = web_search_from_options(backend="exa", api_key="sk-secret", api_url="http://127.0.0.1:9")
    assert isinstance(exa, WebSearch) and isinstance(exa.backend, ExaBackend) and "secret" not in repr(exa.backend)
    with pytest.raises(ValueError, match="needs a folder"):
        web_search_from_options(backend="local")
    with pytest.raises(ValueError, match="API key"):
        web_search_from_options(backend="exa")
    with pytest.raises(ValueError, match="unknown search backend 'bing'"):
        web_search_from_options(backend="bing")
    with pytest.raises(ValueError, match="not a directory"):
        web_search_from_options(search_dir=str(docs / "paris.md"))
    session = exa.session({"type": "web_search", "external_web_access": False, "filters": {"allowed_domains": ["a.b"]}})
    assert session.options == SearchOptions(live=False, allowed_domains=("a.b",))
    assert local.session({"type": "web_search"}).options == SearchOptions()


def test_render_view_rounds_up_to_whole_lines() -> None:
    page = Page(url="https://x.test/", title="X", text="\n".join(["word " * 15] * 10))
    text = render_view(page, 0, view_tokens=20)
    assert text.splitlines()[1] == "**viewing lines [0 - 1] of 9**"  # line 1 crosses the budget: shown whole


# ---------------------------------------------------------------------------------------------- Exa


@pytest.fixture
def exa() -> Iterator[FakeExa]:
    fake = FakeExa(pages=list(PAGES)).start()
    yield fake
    fake.stop()


def test_exa_search_open_and_find(exa: FakeExa) -> None:
    session = BrowserSession(ExaBackend(API_KEY, base_url=exa.url), include_sources=True)
    result = call(session, "search", {"query": "moon tides", "topn": 3})
    assert result.text == (
        "[0] moon tides\n**viewing lines [0 - 5] of 5**\n\nL0: \nL1: URL: \nL2: # Search Results\nL3: \n"
        "L4:   * 【0†Tides explained†www.example.org】 Tides are caused by the Moon's gravity.\n"
        "L5:   * 【1†Moon facts†moon.example.net】 The Moon is 384,400 km from Earth."
    )
    assert result.action["sources"] == [{"type": "url", "url": p.url} for p in PAGES]
    request = exa.requests[0]
    assert request["path"] == "/search" and request["headers"]["x-api-key"] == API_KEY
    assert request["body"] == {
        "query": "moon tides",
        "type": "auto",
        "numResults": 3,
        "contents": {"highlights": {"numSentences": 3, "highlightsPerUrl": 1}},
    }
    opened = call(session, "open", {"id": 0})
    assert opened.action == {"type": "open_page", "url": "https://www.example.org/tides"}
    assert exa.requests[1]["body"] == {"urls": ["https://www.example.org/tides"], "text": True}
    assert "L2: # Tides" in opened.text and "【0†the Moon†moon.example.net】" in opened.text
    found = call(session, "find", {"pattern": "spring"})
    assert found.action == {"type": "find_in_page", "url": "https://www.example.org/tides", "pattern": "spring"}
    assert "Spring tides happen at new and full moon." in found.text
    assert session.cite(1) == session.cite(2) == ("https://www.example.org/tides", "Tides explained")


def test_exa_cached_only_and_domains(exa: FakeExa) -> None:
    session = BrowserSession(
        ExaBackend(API_KEY, base_url=exa.url), options=SearchOptions(live=False, allowed_domains=("moon.example.net",))
    )
    result = call(session, "search", {"query": "moon"})
    assert "【0†Moon facts" in result.text and "Tides" not in result.text
    assert exa.requests[0]["body"]["contents"]["maxAgeHours"] == -1
    assert exa.requests[0]["body"]["includeDomains"] == ["moon.example.net"]
    call(session, "open", {"id": 0})
    assert exa.requests[1]["body"] == {"urls": ["https://moon.example.net/facts"], "text": True, "maxAgeHours": -1}


def test_exa_failures_are_results(exa: FakeExa) -> None:
    wrong_key = call(BrowserSession(ExaBackend("nope", base_url=exa.url)), "search", {"query": "moon"})
    assert wrong_key.error == "Error during search for `moon`: the search service answered HTTP 401: Invalid API key"
    session = BrowserSession(ExaBackend(API_KEY, base_url=exa.url))
    missing = call(session, "open", {"id": "https://nowhere.example/"})
    assert missing.error == "Error fetching URL `https://nowhere.example/`: CRAWL_NOT_FOUND (HTTP 404)"
    exa.fail_with = 503
    down = call(session, "search", {"query": "moon"})
    assert down.error == (
        "Error during search for `moon`: the search service answered HTTP 503: Service temporarily unavailable"
    )
    assert json.loads(down.text) == {"error": down.error} and down.action == {"type": "search", "query": "moon"}
    exa.stop()
    gone = call(session, "search", {"query": "moon"})
    assert gone.error is not None and "the search service is unreachable (ConnectError" in gone.error
