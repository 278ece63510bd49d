"""An engine stream's lines: each socket read's bytes split into SSE/NDJSON lines, each line's object fed to the
adapter's ``StreamReader`` (engine/_http.py's stream loop calls ``Lines.read`` once per read).

A completions stream (vLLM, TensorRT-LLM) is almost all one kind of line: a token id or a few. Those lines are
taken by a compiled scanner when it could be built (``_completion_lines.c``, built by ``pip install`` when a
C compiler is there): one call per read for every such line at its start, the ids handed to the reader at
once, where the pure-Python path parses each line with ``orjson`` and feeds it. The scanner takes a line only
when ``CompletionsReader.feed`` would take it the same way and leaves everything else, from that line on, to
the Python path below, which is also the whole path without it (``HARMONY_RESPONSES_PURE_PYTHON=1``, or no
compiler): tests/engine/test_lines.py holds the two to the same chunks, ends and errors for any lines and any
chunking. Start-up says which one runs (``describe``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import orjson

from .. import _compiled
from ..vocab import VOCAB_SIZE
from ._base import EngineProtocolError

if TYPE_CHECKING:
    from ._http import StreamReader

__all__ = ["COMPILED", "ERROR_EXCERPT", "MAX_LINE", "TOO_LONG", "Lines", "describe", "excerpt"]

# The longest streamed line read: vLLM and TensorRT-LLM echo the prompt's ids in their first chunk
# (about 1 MB for a 131k-token prompt); an engine sending a line without end must not cost unbounded memory.
MAX_LINE = 16 * 1024 * 1024
TOO_LONG = f"sent a line longer than {MAX_LINE >> 20} MiB"
# How much of an error body or a bad line goes into a message: enough for the engine's sentence, never a page.
ERROR_EXCERPT = 300

_Take = Callable[[bytes, int, int, int, list[int]], int]

# The compiled scanner, None where it is not used.
COMPILED: _Take | None
COMPILED, _why_not = _compiled.load(f"{__package__}._completion_lines", "take", "scanner")


def describe() -> str:
    """What start-up says of how completions lines are read."""
    return _compiled.describe(COMPILED, _why_not, "lines read", "scanner")


def excerpt(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= ERROR_EXCERPT else text[:ERROR_EXCERPT] + "…"


class Lines:
    """One engine stream's lines, fed to ``reader`` read by read (sans-I/O: bytes in, the reader fed).

    ``take`` is the compiled scanner for a reader whose ``feed`` takes its common line (``StreamReader.
    common_lines``, without logprobs), else None: every line is then parsed here.
    """

    __slots__ = ("_ids", "_take", "done", "feed", "label", "reader", "tail")

    def __init__(self, reader: StreamReader, label: str, take: _Take | None = None) -> None:
        self.reader = reader
        self.feed = reader.feed
        self.label = label
        self.tail = b""  # the last line, until its newline comes
        self.done = False  # [DONE] came: what follows is read to the end of the body, not fed
        self._take = take if reader.common_lines and reader.request.top_logprobs is None else None
        self._ids: list[int] = []

    def read(self, data: bytes) -> None:
        """Feed the lines ``data`` completes (``b""``: the body ended, its last line has no newline).

        Raises:
            EngineProtocolError: a line that is not JSON, or longer than ``MAX_LINE``; whatever ``feed``
                raised for a line. The lines before it have been fed.
        """
        tail = self.tail
        if not data:
            lines, self.tail = [tail], b""
        else:
            buf = tail + data if tail else data
            take = self._take
            if take is not None and not self.done:
                ids = self._ids
                pos = take(buf, 0, MAX_LINE, VOCAB_SIZE, ids)
                if ids:
                    self.reader.chunk(ids, None)  # what feed does with each such line
                    ids.clear()
                if pos == len(buf):  # the read was all common lines (its usual case): nothing left to split
                    self.tail = b""
                    return
                if pos:
                    buf = buf[pos:]
            # Whatever the socket delivered, split here rather than one ``readline`` await per line: that
            # costs several Python calls and an await per token, and under load one read holds many lines.
            lines = buf.split(b"\n")
            self.tail = lines.pop()
        feed = self.feed
        for line in lines:
            if not line:  # the blank line after every SSE event
                continue
            if len(line) > MAX_LINE:
                raise EngineProtocolError(f"{self.label}: {TOO_LONG}")
            # SSE "data: {...}"; NDJSON "{...}"; comments, event names and blank lines skipped.
            if line.startswith(b"data:"):
                payload = line[5:].strip()
            elif line.startswith(b"{"):
                payload = line
            else:
                continue
            if not payload or self.done:
                continue
            if payload == b"[DONE]":
                # Read on to the end of the body (the terminating chunk): a response read to its end returns
                # its connection to the pool; one closed early is dropped, and the next request pays a new
                # connection (a resolver round trip too).
                self.done = True
                continue
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError:
                text = line.decode(errors="replace").rstrip()
                raise EngineProtocolError(f"{self.label}: sent a line that is not JSON: {excerpt(text)}") from None
            feed(obj)
        if len(self.tail) > MAX_LINE:  # a line without end in sight: memory is bounded
            raise EngineProtocolError(f"{self.label}: {TOO_LONG}")
