"""An engine stream's lines (engine/_lines.py): the compiled scanner and the pure-Python path feed the reader
alike, for any lines and any chunking.

Each example is a completions stream of lines of every kind the scanner must take or leave (the common line
with its fields in any order and any spacing, finishing, usage and error lines, [DONE], comments, NDJSON, and
lines that are almost JSON: a byte changed, dropped or added, an escape, a duplicate key, a number it does not
read), cut into reads anywhere. Two readers are fed read by read as the stream loop feeds them, one through
the scanner and one without; after every read they must hand over the same chunks, and at the end have the
same ending (finish, matched stop id, end of sequence, cached tokens, message) and the same error, at the
same read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harmony_responses.engine import GenerateRequest, _lines
from harmony_responses.engine._http import StreamReader
from harmony_responses.engine._lines import Lines
from harmony_responses.engine._vllm import CompletionsReader
from harmony_responses.vocab import VOCAB_SIZE

try:
    from harmony_responses.engine._completion_lines import take as compiled
except ImportError:  # no C compiler where the package was installed: the pure-Python path alone is served
    if os.environ.get("CI"):
        raise  # CI's machine has one: the scanner must have been built, and be what these tests hold
    compiled = None

needs_compiled = pytest.mark.skipif(compiled is None, reason="the compiled scanner was not built here")

PROMPT = [200006, 1428, 200008, 12194, 200007, 200006, 173781]


def common(*tokens: int, **fields: Any) -> dict[str, Any]:
    """A completions chunk of ``tokens``, as vLLM streams it (``fields`` override the choice's)."""
    choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": None, "stop_reason": None}
    choice.update(token_ids=list(tokens), **fields)
    return {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj)


tokens = st.integers(min_value=0, max_value=VOCAB_SIZE - 1)
texts = st.text(max_size=6)


def json_values(scannable: bool) -> st.SearchStrategy[Any]:
    """Any JSON value; ``scannable``: none the scanner leaves to Python (a float, an integer of 19 digits)."""
    if scannable:
        numbers: st.SearchStrategy[Any] = st.integers(-(10**18) + 1, 10**18 - 1)
    else:
        numbers = st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    scalars = st.none() | st.booleans() | numbers | texts
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3))


@st.composite
def common_lines(draw: st.DrawFn, scannable: bool = True) -> bytes:
    """A common line (one id or several: vLLM's steps can outrun its output), its members reordered and
    spaced, with other fields of any JSON value."""
    obj = common(*draw(st.lists(tokens, min_size=1, max_size=4)))
    if draw(st.booleans()):
        obj["choices"][0]["text"] = draw(texts)
    if draw(st.booleans()):
        obj["choices"][0]["prompt_token_ids"] = draw(st.lists(tokens, max_size=5))
    if draw(st.booleans()):
        obj["usage"] = None
    keys = st.sampled_from(["x", "system_fingerprint", "created", "kv"])
    obj.update(draw(st.dictionaries(keys, json_values(scannable), max_size=3)))
    items = list(obj.items())
    if draw(st.booleans()):
        items.reverse()
    space = draw(st.sampled_from(["", " ", "  ", "\t"]))
    ascii_only = draw(st.booleans())  # text as \u escapes, or as UTF-8

    def dumps(value: Any) -> str:
        return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))

    body = "{" + f",{space}".join(f"{dumps(k)}:{space}{dumps(v)}" for k, v in items)
    lead = draw(st.sampled_from([" ", "", "  ", "\t", " \x0c"]))
    trail = draw(st.sampled_from(["", " ", "\r", " \x0b"]))
    return b"data:" + lead.encode() + body.encode() + b"}" + trail.encode()


# Lines the scanner must leave to Python, each for its own reason.
OTHER_LINES = [
    sse(common(200002, finish_reason="stop", stop_reason=None)),
    sse(common(200012, finish_reason="stop", stop_reason=200012)),
    sse(common(13225, finish_reason="length")),
    sse({"id": "c", "choices": [], "usage": {"prompt_tokens": 7, "prompt_tokens_details": {"cached_tokens": 3}}}),
    sse({**common(13225), "usage": {"prompt_tokens": 7, "prompt_tokens_details": {"cached_tokens": 5}}}),
    sse({**common(13225), "usage": {}}),
    sse({"error": {"message": "CUDA error: out of memory", "code": 500}}),
    sse({**common(13225), "error": None}),
    sse({**common(13225), "object": "error", "message": "bad"}),
    sse({**common(13225), "object": 3}),
    sse(common(VOCAB_SIZE)),
    sse(common(-1)),
    sse({**common(13225), "choices": [{**common(1)["choices"][0], "token_ids": [1, 2]}]}),
    sse(common(1, 2, VOCAB_SIZE)),
    sse(common(1, -2)),
    b'data: {"choices": [{"token_ids": [5, 6.0], "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5,], "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5 6], "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [ 5 , 6 ], "finish_reason": null}]}',
    sse({**common(13225), "choices": [{**common(1)["choices"][0], "token_ids": []}]}),
    sse({**common(13225), "choices": [{**common(1)["choices"][0], "token_ids": None}]}),
    sse({**common(13225), "choices": [{"index": 0, "text": "hi", "finish_reason": None}]}),
    sse({**common(13225), "choices": "abc"}),
    sse({**common(13225), "choices": [3]}),
    sse({**common(13225), "choices": {"0": 1}}),
    b'data: {"choices": [{"token_ids": [1.0], "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [1e2], "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [true], "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": ["5"], "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [-0], "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [007], "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}], "created": 12345678901234567890123}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}], "created": 1.5}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}], "t": NaN}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}], "choices": []}',
    b'data: {"choices": [{"token_ids": [5], "token_ids": [6], "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null, "finish_reason": "stop"}]}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}], "usage": null, "usage": {"a": 1}}',
    b'data: {"choices": [{"tok\\u0065n_ids": [5], "finish_reason": null}]}',
    b'data: {"ch\\u006fices": [{"token_ids": [5]}], "choices": [{"token_ids": [6]}]}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}], "object": "\\u0065rror"}',
    b'data: {"choices": [{"token_ids": [5], "text": "\\ud83d\\ude00", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\\ud800", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\\udc00", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\\ud800\\u0041", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\\ud800\\ud800", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\\u00e9\\n\\t\\"\\\\\\/", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\\x", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "a\x01b", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\xc3", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\xed\xa0\x80", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\xc0\xaf", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "text": "\xf4\x90\x80\x80", "finish_reason": null}]}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}]} x',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}]}}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}]',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null},]}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}], "a": [' + b"[" * 80 + b"]" * 81 + b"}",
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}], "a": [' + b"[" * 20 + b"]" * 21 + b"}",
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}, {"token_ids": [6]}, 7, "x"]}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}], "a": tru}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}], "a": {"k" 1}}',
    b'data: {"choices": [{"token_ids": [5], "finish_reason": null}],\x0b"a": 1}',
    b'data: {"choices" : [ { "token_ids" : [ 5 ] , "finish_reason" : null } ] }',
    b'{"choices": [{"token_ids": [5], "finish_reason": null}]}',
    b"data: [DONE]",
    b"data: ",
    b"data:",
    b": keep-alive",
    b"event: message",
    b"id: 3",
    b"retry: 10",
    b"garbage",
    b"data: {not json",
    b"data: []",
    b"data: 5",
    b'data: "text"',
]


@st.composite
def broken(draw: st.DrawFn) -> bytes:
    """A common line with one byte changed, dropped or added."""
    line = draw(common_lines())
    at = draw(st.integers(0, len(line) - 1))
    byte = bytes([draw(st.integers(0, 255))])
    how = draw(st.sampled_from(["change", "drop", "add"]))
    if how == "change":
        return line[:at] + byte + line[at + 1 :]
    if how == "drop":
        return line[:at] + line[at + 1 :]
    return line[:at] + byte + line[at:]


any_line = st.one_of(common_lines(), common_lines(scannable=False), st.sampled_from(OTHER_LINES), broken())


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    """A stream's bytes, cut into reads anywhere."""
    lines = draw(st.lists(any_line, min_size=1, max_size=12))
    ending = draw(st.sampled_from(["\n\n", "\n", "\r\n\r\n"])).encode()
    body = b"".join(line + ending for line in lines)
    if draw(st.booleans()):
        body = body.rstrip(b"\n")  # the last line without its newline: read at the body's end
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=6)))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if body[a:b]]


def _read(reads: list[bytes], take: Any, top_logprobs: int | None = None) -> list[Any]:
    """What the stream loop hands over after each read, then the reader's ending (or the error, and where)."""
    reader = CompletionsReader(GenerateRequest(prompt_ids=PROMPT, max_tokens=50, top_logprobs=top_logprobs), "e")
    lines = Lines(reader, "e", take)
    seen: list[Any] = []
    for data in [*reads, b""]:
        if not data and not lines.tail:
            break
        try:
            lines.read(data)
        except Exception as exc:
            seen.append([c.token_ids for c in reader.take()])
            seen.append(("raised", type(exc).__name__, str(exc)))
            return seen
        seen.append([c.token_ids for c in reader.take()])
    seen.append((reader.finish, reader.matched, reader.eos, reader.message, reader.cached_tokens, reader.generated))
    return seen


@needs_compiled
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_the_scanner_feeds_the_reader_as_python_does(reads: list[bytes]) -> None:
    assert _read(reads, compiled) == _read(reads, None)


@needs_compiled
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(common_lines(), min_size=1, max_size=8), st.sampled_from(["\n", "\n\n", "\r\n\r\n"]))
def test_the_scanner_takes_every_common_line(lines: list[bytes], ending: str) -> None:
    """The lines it exists for are its own: a read of them all is taken whole, in one call."""
    body = b"".join(line + ending.encode() for line in lines)
    ids: list[int] = []
    assert compiled(body, 0, _lines.MAX_LINE, VOCAB_SIZE, ids) == len(body)
    assert ids == [t for line in lines for t in orjson.loads(line[5:].strip())["choices"][0]["token_ids"]]


@needs_compiled
@pytest.mark.parametrize("line", OTHER_LINES, ids=range(len(OTHER_LINES)))
def test_the_scanner_leaves_the_other_lines_to_python(line: bytes) -> None:
    """Each of these is left to Python from its start, unless Python would take it as the common line (the
    spaced-out line, the one whose extra choices follow) or pass it over (a comment, an empty "data:"): then
    the scanner does too. Either way both paths feed the reader alike."""
    body = sse(common(7)) + b"\n\n" + line + b"\n\n"
    ids: list[int] = []
    pos = compiled(body, 0, _lines.MAX_LINE, VOCAB_SIZE, ids)
    assert pos in (len(sse(common(7))) + 2, len(body))  # left from its start, or taken (passed over) whole
    assert _read([body], compiled) == _read([body], None)


@needs_compiled
def test_a_line_longer_than_the_limit_is_left_to_python() -> None:
    line = sse(common(5, text="x" * 300)) + b"\n"
    assert compiled(line, 0, 200, VOCAB_SIZE, []) == 0
    assert compiled(line, 0, len(line) - 1, VOCAB_SIZE, []) == len(line)


def test_with_logprobs_asked_for_every_line_is_read_in_python() -> None:
    reader = CompletionsReader(GenerateRequest(prompt_ids=PROMPT, max_tokens=5, top_logprobs=2), "e")
    assert Lines(reader, "e", compiled)._take is None


def test_a_reader_that_does_not_take_the_common_line_is_fed_by_python() -> None:
    class Other(StreamReader):
        def feed(self, obj: Any) -> None:
            self.chunk(obj["ids"], None)

    reader = Other(GenerateRequest(prompt_ids=PROMPT, max_tokens=5), "e")
    lines = Lines(reader, "e", compiled)
    assert lines._take is None
    lines.read(b'data: {"ids": [1, 2]}\n')
    with pytest.raises(KeyError):  # the common line goes to its feed too
        lines.read(sse(common(5)) + b"\n")
    assert [c.token_ids for c in reader.take()] == [[1, 2]]


def test_start_up_says_how_lines_are_read() -> None:
    """HARMONY_RESPONSES_PURE_PYTHON turns the scanner off, and start-up's engine line says so; without it the
    engine line says whichever path this installation has."""
    code = "from harmony_responses.engine import VLLMEngine; print(VLLMEngine().describe())"
    env = {k: v for k, v in os.environ.items() if k != "HARMONY_RESPONSES_PURE_PYTHON"}
    pure = subprocess.run(
        [sys.executable, "-c", code], env={**env, "HARMONY_RESPONSES_PURE_PYTHON": "1"}, capture_output=True, text=True
    )
    assert "lines read in pure Python: HARMONY_RESPONSES_PURE_PYTHON is set" in pure.stdout
    default = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    expected = "lines read by the compiled scanner" if compiled is not None else "lines read in pure Python"
    assert expected in default.stdout, default.stderr
