"""Citations in message text → ``url_citation`` (browser, harmony.md §5.2) and ``file_citation`` (file search)
annotations (translate/_citations.py).

Driven at the translator's boundary (token ids in, events out) with an injected resolver, every stream checked
by ``check_stream``; the filter itself is also checked directly against every way of splitting its input.
"""

from __future__ import annotations

import pytest

from harmony_responses.tokens import TokenLogprob
from harmony_responses.translate import RecipientMap, Translator
from harmony_responses.translate._citations import MAX_HELD, CitationFilter, CitationResolver

from .helpers import VOCAB, WEB_SEARCH_TOOL, Clock, id_factory, tokens
from .invariants import check_stream

PAGES = {
    1: ("https://en.wikipedia.org/wiki/Paris", "Paris - Wikipedia"),
    2: ("file:///srv/docs/lyon.md", "Lyon"),
    4: ("https://example.com/find-me", "Example"),
}
WIKI = " ([en.wikipedia.org](https://en.wikipedia.org/wiki/Paris)) "
LYON = " ([Lyon](file:///srv/docs/lyon.md)) "


def run(
    harmony: str, *, chunk: int | None = None, resolver: CitationResolver | None = PAGES.get, logprobs: bool = False
) -> list[dict]:
    translator = Translator(
        vocab=VOCAB,
        new_id=id_factory(),
        clock=Clock(),
        recipients=RecipientMap.from_tools([WEB_SEARCH_TOOL]),
        citations=resolver,
        logprobs=logprobs,
    )
    ids = tokens(harmony)
    size = chunk or len(ids)
    events: list[dict] = []
    for start in range(0, len(ids), size):
        part = ids[start : start + size]
        lps = [TokenLogprob(logprob=-0.5, top=((t, -0.5),)) for t in part] if logprobs else None
        translator.receive_tokens(part, lps)
        events += translator.events()
    translator.receive_end("stop")
    events += translator.events()
    check_stream(events)
    return events


def answer(events: list[dict]) -> dict:
    (message,) = [item for item in events[-1]["response"]["output"] if item["type"] == "message"]
    return message["content"][0]


def annotation_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "response.output_text.annotation.added"]


FINAL = "<|channel|>final<|message|>{}<|return|>"


def test_a_resolved_citation_is_replaced_and_annotated_everywhere() -> None:
    events = run(FINAL.format("Paris has 2.1 million people【1†L4-L6】 and a river."))
    part = answer(events)
    assert part["text"] == f"Paris has 2.1 million people{WIKI} and a river."
    (annotation,) = part["annotations"]
    assert annotation == {
        "type": "url_citation",
        "start_index": len("Paris has 2.1 million people"),
        "end_index": len("Paris has 2.1 million people") + len(WIKI),
        "title": "Paris - Wikipedia",
        "url": "https://en.wikipedia.org/wiki/Paris",
    }
    assert part["text"][annotation["start_index"] : annotation["end_index"]] == WIKI
    (event,) = annotation_events(events)
    assert event["annotation"] == annotation and event["annotation_index"] == 0 and event["content_index"] == 0
    # The same annotations on content_part.done, the item's done and the final response (check_stream too).
    (part_done,) = [e for e in events if e["type"] == "response.content_part.done"]
    (item_done,) = [e for e in events if e["type"] == "response.output_item.done"]
    assert part_done["part"]["annotations"] == item_done["item"]["content"][0]["annotations"] == [annotation]
    # output_text.done carries the replaced text.
    (text_done,) = [e for e in events if e["type"] == "response.output_text.done"]
    assert text_done["text"] == part["text"]


def test_annotation_follows_the_delta_that_holds_its_text() -> None:
    events = run(FINAL.format("A【1†L1】B"))
    kinds = [(e["type"], e.get("delta")) for e in events if e["type"].startswith("response.output_text")]
    index = kinds.index(("response.output_text.annotation.added", None))
    assert kinds[index - 1][1].endswith(WIKI)  # type: ignore[union-attr]


def test_several_citations_in_order_with_host_less_urls_labelled_by_title() -> None:
    text = "One【1†L1】, two【2†L3-L4】 and three【4†L9】."
    events = run(FINAL.format(text))
    part = answer(events)
    assert part["text"] == f"One{WIKI}, two{LYON} and three ([example.com](https://example.com/find-me)) ."
    assert [a["url"] for a in part["annotations"]] == [PAGES[1][0], PAGES[2][0], PAGES[4][0]]
    assert [e["annotation_index"] for e in annotation_events(events)] == [0, 1, 2]
    for annotation in part["annotations"]:
        cited = part["text"][annotation["start_index"] : annotation["end_index"]]
        assert cited.startswith(" ([") and cited.endswith(f"]({annotation['url']})) ")


@pytest.mark.parametrize(
    "text",
    [
        "Search results have no URL【0†L4】.",  # cursor 0: a search results page, not citable
        "An unknown cursor【9†L1】.",
        "Not a citation【note】, nor this【1】, nor this 【†L1】.",
        "An unfinished one at the end【1†L4-",
        "Just a bracket 【",
    ],
)
def test_what_does_not_resolve_stays_as_written(text: str) -> None:
    events = run(FINAL.format(text))
    assert answer(events) == {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    assert annotation_events(events) == []


def test_chunking_does_not_change_a_single_event() -> None:
    harmony = (
        "<|channel|>analysis<|message|>Cite 【1†L2】 later.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Fact【1†L4-L6】【2†L1】 and 【0†L2】 end【4†L3<|return|>"
    )
    reference = run(harmony)
    for chunk in (1, 2, 3, 5, 7, 64):
        assert run(harmony, chunk=chunk) == reference


def test_reasoning_is_left_alone_and_commentary_is_cited() -> None:
    harmony = (
        "<|channel|>analysis<|message|>Will cite 【1†L2】.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Looking at【2†L1】.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done.<|return|>"
    )
    output = run(harmony)[-1]["response"]["output"]
    assert output[0]["content"][0]["text"] == "Will cite 【1†L2】."
    assert output[1]["phase"] == "commentary" and output[1]["content"][0]["text"] == f"Looking at{LYON}."
    assert output[2]["content"][0]["annotations"] == []


def test_without_a_resolver_text_is_untouched() -> None:
    events = run(FINAL.format("Fact【1†L4】."), resolver=None)
    assert answer(events)["text"] == "Fact【1†L4】." and annotation_events(events) == []


def test_logprobs_stay_with_their_deltas_across_held_text() -> None:
    events = run(FINAL.format("Fact【1†L4-L6】 and【2"), logprobs=True)
    part = answer(events)
    assert part["text"] == f"Fact{WIKI} and【2"
    assert len(part["logprobs"]) == len(tokens("Fact【1†L4-L6】 and【2"))  # check_stream matched them to deltas


def test_a_citation_cut_short_by_the_length_limit_is_released_as_text() -> None:
    translator = Translator(vocab=VOCAB, new_id=id_factory(), clock=Clock(), citations=PAGES.get)
    translator.receive_tokens(tokens("<|channel|>final<|message|>Fact【1†L4"))
    translator.receive_end("length")
    events = translator.events()
    check_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    assert answer(events)["text"] == "Fact【1†L4"


# ---------------------------------------------------------------------------------------------- the filter


def _filtered(chunks: list[str]) -> tuple[str, list[dict]]:
    cites = CitationFilter(PAGES.get)
    out = []
    for chunk in chunks:
        out += cites.feed(chunk)
    out += cites.flush()
    text = "".join(p for p in out if isinstance(p, str))
    annotations = [p for p in out if isinstance(p, dict)]
    assert annotations == cites.annotations
    return text, annotations


@pytest.mark.parametrize(
    "text",
    [
        "a【1†L1】b",
        "【1†L1-L3】【2†x】【0†L1】【",
        "x【1†L1†extra】y【12",
        "【【1†L2】】",
        "no citation here at all",
    ],
)
def test_filter_output_does_not_depend_on_how_text_is_split(text: str) -> None:
    reference = _filtered([text])
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            assert _filtered([text[:i], text[i:j], text[j:]]) == reference, (i, j)


def test_held_text_is_bounded() -> None:
    cites = CitationFilter(PAGES.get)
    released = cites.feed("【1†" + "x" * (MAX_HELD - 3))
    assert released == []  # still a possible citation
    released = cites.feed("y")  # now longer than any citation we wait for: text
    assert "".join(p for p in released if isinstance(p, str)) == "【1†" + "x" * (MAX_HELD - 3) + "y"
    assert cites.flush() == []


def test_plain_text_passes_straight_through() -> None:
    cites = CitationFilter(PAGES.get)
    assert cites.feed("hello") == ["hello"]
    assert cites.feed(" world") == [" world"]
    assert cites.flush() == []


# ---------------------------------------------------------------------------------------------- file citations

RESULTS = {(0, 0): ("file_otters", "otters.md"), (1, 2): ("file_etna", "etna.txt")}


def _file_run(harmony: str, chunk: int | None = None) -> list[dict]:
    translator = Translator(
        vocab=VOCAB,
        new_id=id_factory(),
        clock=Clock(),
        recipients=RecipientMap.from_tools([WEB_SEARCH_TOOL, {"type": "file_search", "vector_store_ids": ["vs"]}]),
        citations=PAGES.get,
        file_citations=lambda n, i: RESULTS.get((n, i)),
    )
    ids = tokens(harmony)
    events: list[dict] = []
    for start in range(0, len(ids), chunk or len(ids)):
        translator.receive_tokens(ids[start : start + (chunk or len(ids))])
        events += translator.events()
    translator.receive_end("stop")
    events += translator.events()
    check_stream(events)
    return events


def test_a_file_citation_is_removed_and_annotated_where_it_stood() -> None:
    harmony = FINAL.format("Otters hold hands【0:0†otters.md】; Etna【1:2†etna.txt】 and Paris【1†L4】, not【0:5†x】.")
    part = answer(_file_run(harmony))
    assert part["text"] == f"Otters hold hands; Etna and Paris{WIKI}, not【0:5†x】."
    assert part["annotations"] == [
        {"type": "file_citation", "file_id": "file_otters", "filename": "otters.md", "index": len("Otters hold hands")},
        {
            "type": "file_citation",
            "file_id": "file_etna",
            "filename": "etna.txt",
            "index": len("Otters hold hands; Etna"),
        },
        {
            "type": "url_citation",
            "start_index": len("Otters hold hands; Etna and Paris"),
            "end_index": len(f"Otters hold hands; Etna and Paris{WIKI}"),
            "title": "Paris - Wikipedia",
            "url": "https://en.wikipedia.org/wiki/Paris",
        },
    ]
    for chunk in (1, 2, 3, 7):
        assert _file_run(harmony, chunk) == _file_run(harmony)


def test_without_a_file_resolver_file_markers_stay_and_browser_ones_resolve() -> None:
    events = run(FINAL.format("Fact【0:0†otters.md】 and【1†L4】."))
    assert answer(events)["text"] == f"Fact【0:0†otters.md】 and{WIKI}."


@pytest.mark.parametrize("text", ["a【0:0†otters.md】b", "【1:2†e】【0:0†o】【0:", "x【0:0†y†z】【1:", "【【0:0†o】】"])
def test_file_citations_do_not_depend_on_how_text_is_split(text: str) -> None:
    def filtered(chunks: list[str]) -> list[str | dict]:
        cites = CitationFilter(PAGES.get, lambda n, i: RESULTS.get((n, i)))
        out = [piece for chunk in chunks for piece in cites.feed(chunk)] + cites.flush()
        joined: list[str | dict] = []
        for piece in out:  # the text between annotations, however it was released
            if isinstance(piece, str) and joined and isinstance(joined[-1], str):
                joined[-1] += piece
            elif piece != "":
                joined.append(piece)
        return joined

    reference = filtered([text])
    assert any(isinstance(p, dict) for p in reference)
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            assert filtered([text[:i], text[i:j], text[j:]]) == reference, (i, j)
