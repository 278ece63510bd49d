"""Custom (freeform) tool calls: the model's ``{"input": …}`` becomes a ``custom_tool_call`` whose ``input`` streams
unwrapped (``response.custom_tool_call_input.delta`` / ``.done``), however the text is chunked."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harmony_responses.translate._custom import InputUnwrapper

from .helpers import CUSTOM_TOOL, FUNCTION_TOOL, make_translator, tokens, translate
from .invariants import check_stream

PATCH = '*** Begin Patch\n*** Add File: hello.txt\n+Hello, "world" \\ ok\n*** End Patch\n'
HEADER = "<|channel|>commentary to=functions.apply_patch <|constrain|>json<|message|>"


def _unwrap(text: str, cuts: list[int]) -> list[str]:
    unwrapper, pieces, at = InputUnwrapper(), [], 0
    for cut in cuts:
        pieces.append(unwrapper.feed(text[at : at + cut]))
        at += cut
    pieces.append(unwrapper.feed(text[at:]))
    pieces.append(unwrapper.flush())
    return pieces


@settings(max_examples=500, deadline=None)
@given(st.text(), st.booleans(), st.lists(st.integers(1, 7), max_size=40), st.sampled_from(["", " ", "\n "]))
def test_the_input_string_is_decoded_in_any_chunking(value: str, ascii_only: bool, cuts: list[int], ws: str) -> None:
    text = "{" + ws + '"input"' + ws + ":" + ws + json.dumps(value, ensure_ascii=ascii_only) + ws + "}"
    assert "".join(_unwrap(text, cuts)) == value


@pytest.mark.parametrize(
    ("written", "input_"),
    [
        ("*** Begin Patch\n+x", "*** Begin Patch\n+x"),  # the raw input, written bare
        ('{"patch": "a\\nb"}', "a\nb"),  # another key: the only string member
        ('{"input": "a", "extra": 1}', "a"),  # what follows the string is not input
        ('{"input": "cut sho', "cut sho"),  # a length cut: what was decoded
        ('{"a": 1, "b": 2}', '{"a": 1, "b": 2}'),  # not one string: as written
        ("{", "{"),
        ('{"input": "x\\q"}', "x\\q"),  # an escape JSON does not define: as written
    ],
)
def test_what_else_the_model_may_write(written: str, input_: str) -> None:
    assert "".join(_unwrap(written, [])) == input_
    assert "".join(_unwrap(written, [1] * len(written))) == input_


def test_the_input_streams_as_it_is_decoded() -> None:
    pieces = _unwrap(json.dumps({"input": "line one\nline two"}), [12, 4, 4, 30])
    # "\\n" is cut in two by the third piece: its backslash waits for the "n".
    assert [p for p in pieces if p] == ["l", "ine ", "one", "\nline two"]


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_a_custom_tool_call_becomes_its_item(chunk: int) -> None:
    completion = (
        "<|channel|>analysis<|message|>Write the file.<|end|><|start|>assistant"
        + HEADER
        + json.dumps({"input": PATCH})
        + "<|call|>"
    )
    events = translate(completion, tools=[FUNCTION_TOOL, CUSTOM_TOOL], chunk=chunk)
    check_stream(events)
    final = events[-1]
    assert final["type"] == "response.completed"
    call = final["response"]["output"][-1]
    assert call["type"] == "custom_tool_call" and call["name"] == "apply_patch"
    assert call["input"] == PATCH and call["status"] == "completed"
    assert call["id"].startswith("ctc_") and call["call_id"].startswith("call_")
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == PATCH and (chunk > 100 or len(deltas) > 5)
    (done,) = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert done["input"] == PATCH and done["item_id"] == call["id"]
    assert not [e for e in events if e["type"].startswith("response.function_call_arguments")]


def test_a_forced_call_continues_from_the_prefill() -> None:
    translator = make_translator([CUSTOM_TOOL])
    translator.receive_prefill(tokens(HEADER))
    translator.receive_tokens(tokens(json.dumps({"input": PATCH}) + "<|call|>"))
    translator.receive_end("stop")
    events = translator.events()
    check_stream(events)
    assert events[-1]["response"]["output"][-1]["input"] == PATCH


def test_a_call_cut_short_is_incomplete() -> None:
    events = translate(HEADER + '{"input": "*** Begin Pa', tools=[CUSTOM_TOOL], finish="length")
    check_stream(events)
    call = events[-1]["response"]["output"][-1]
    assert events[-1]["type"] == "response.incomplete"
    assert (call["status"], call["input"]) == ("incomplete", "*** Begin Pa")


def test_the_checker_catches_input_that_does_not_add_up() -> None:
    events = translate(HEADER + json.dumps({"input": PATCH}) + "<|call|>", tools=[CUSTOM_TOOL])
    broken = copy.deepcopy(events)
    next(e for e in broken if e["type"] == "response.custom_tool_call_input.done")["input"] = "other"
    with pytest.raises(AssertionError, match="custom tool input disagrees"):
        check_stream(broken)
    check_stream(events)
