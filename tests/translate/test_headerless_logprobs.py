"""Logprobs of text the model wrote without a Harmony header: the answer keeps them, as any message does.

A model that skips its header (garbage, or a model that is not quite gpt-oss) writes plain text; the
translator makes it the answer (harmony.md §9). Its tokens waited in the header buffer, which kept no
logprobs, so such an answer came without them although ``include`` asked (issue 12, item 9). Every stream
here is checked by ``check_stream`` (deltas and done events carry the same logprobs).
"""

from __future__ import annotations

import pytest

from harmony_responses.tokens import TokenLogprob

from .helpers import make_translator, tokens
from .invariants import check_stream


def _run(ids: list[int], finish: str = "stop", chunk: int = 1) -> list[dict]:
    translator = make_translator(logprobs=True)
    events: list[dict] = []
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        lps = [TokenLogprob(logprob=-0.5 - i * 0.01, top=((t, -0.5),)) for i, t in enumerate(part, start)]
        translator.receive_tokens(part, lps)
        events.extend(translator.events())
    translator.receive_end(finish)  # type: ignore[arg-type]
    events.extend(translator.events())
    check_stream(events)
    return events


def _answer(events: list[dict]) -> dict:
    done = events[-1]["response"]
    (message,) = [item for item in done["output"] if item["type"] == "message"]
    return message["content"][0]


@pytest.mark.parametrize("chunk", [1, 3, 100])
@pytest.mark.parametrize("finish", ["stop", "length"])
def test_headerless_answer_keeps_its_logprobs(chunk: int, finish: str) -> None:
    ids = tokens("Just some text 🚀 without a header")
    part = _answer(_run(ids, finish, chunk))
    assert part["text"] == "Just some text 🚀 without a header"
    assert len(part["logprobs"]) == len(ids)
    assert b"".join(bytes(lp["bytes"]) for lp in part["logprobs"]) == part["text"].encode()
    assert [lp["logprob"] for lp in part["logprobs"]] == [-0.5 - i * 0.01 for i in range(len(ids))]


def test_headerless_answer_held_at_end_keeps_its_logprobs() -> None:
    # Text ended by <|end|>, then the output ends: the held text is the answer.
    ids = tokens("A plain answer<|end|>")
    part = _answer(_run(ids))
    assert part["text"] == "A plain answer"
    assert len(part["logprobs"]) == len(tokens("A plain answer"))


def test_a_dropped_role_word_has_no_logprob_entry() -> None:
    # "<|start|>assistant Hello" without a channel: the role word is the header, only "Hello" is text.
    ids = tokens("<|start|>assistant Hello there")
    part = _answer(_run(ids))
    assert part["text"] == "Hello there"
    assert b"".join(bytes(lp["bytes"]) for lp in part["logprobs"]).decode().strip() == "Hello there"


def test_long_headerless_text_streams_with_its_logprobs() -> None:
    text = " ".join(["word"] * 400)
    ids = tokens(text)
    part = _answer(_run(ids, chunk=7))
    assert part["text"] == text
    assert len(part["logprobs"]) == len(ids)
