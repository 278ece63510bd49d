"""A custom tool call's ``input``, read as the model writes it: the string of ``{"input": "…"}``, streamed.

The prompt declares a custom (freeform) tool as a function taking one string (render/_tools.py), so the
model writes ``{"input": "*** Begin Patch\\n…"}``. ``InputUnwrapper`` turns that JSON text, fed in pieces of any
size, into the raw input, released as soon as it is decoded (escapes split between pieces wait for their
end), so that ``response.custom_tool_call_input.delta`` streams the input itself, not its JSON.

What the model may write instead, and what it becomes:

- text that does not start with ``{``: the input as written (a model that writes the raw input directly);
- another JSON object (``{"patch": "…"}``): held to the end, then the value of its only string member, else
  the text as written;
- ``{"input": "…`` cut short (a length cut), or an escape the JSON does not define: what was decoded, and
  the undecodable characters as written.

Everything after the string's closing quote (``}``, other members) is not input and is dropped.
"""

from __future__ import annotations

import enum
import json

__all__ = ["InputUnwrapper"]

_PREFIX = ("{", '"input"', ":", '"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class _Mode(enum.Enum):
    PREFIX = "prefix"  # reading up to the string's opening quote
    STRING = "string"  # inside the input string: decoding
    AFTER = "after"  # past the closing quote: nothing more is input
    RAW = "raw"  # not our JSON: the text is the input
    HOLD = "hold"  # another JSON object: held to the end


def _prefix_end(text: str) -> int | None:
    """Where the input string starts in ``text``; -1 while ``text`` may still become the prefix; None if not."""
    pos = 0
    for piece in _PREFIX:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        rest = text[pos : pos + len(piece)]
        if rest != piece:
            return -1 if piece.startswith(rest) and pos + len(rest) == len(text) else None
        pos += len(piece)
    return pos


class InputUnwrapper:
    """Feed the model's text with ``feed``; each call returns the input decoded so far; ``flush`` the rest."""

    __slots__ = ("_buffer", "_mode", "_pending")

    def __init__(self) -> None:
        self._mode = _Mode.PREFIX
        self._buffer = ""  # PREFIX/HOLD: the text so far
        self._pending = ""  # STRING: an escape not yet complete

    def feed(self, text: str) -> str:
        mode = self._mode
        if mode is _Mode.STRING:
            return self._decode(text)
        if mode is _Mode.RAW:
            return text
        if mode is _Mode.AFTER:
            return ""
        self._buffer += text
        if mode is _Mode.HOLD:
            return ""
        end = _prefix_end(self._buffer)
        if end == -1:
            return ""
        buffered, self._buffer = self._buffer, ""
        if end is None:
            if buffered.lstrip().startswith("{"):
                self._mode, self._buffer = _Mode.HOLD, buffered
                return ""
            self._mode = _Mode.RAW
            return buffered
        self._mode = _Mode.STRING
        return self._decode(buffered[end:])

    def flush(self) -> str:
        """The end of the call: what is left (see the module docstring)."""
        mode, self._mode = self._mode, _Mode.AFTER
        if mode is _Mode.STRING:
            pending, self._pending = self._pending, ""
            return pending
        if mode is _Mode.HOLD:
            return _only_string(self._buffer)
        if mode is _Mode.PREFIX:
            return self._buffer  # e.g. just "{": not our JSON after all
        return ""

    def _decode(self, text: str) -> str:
        text = self._pending + text
        self._pending = ""
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            # Plain characters up to the next quote or backslash go out in one slice.
            j = i
            while j < n and text[j] != '"' and text[j] != "\\":
                j += 1
            out.append(text[i:j])
            if j == n:
                break
            if text[j] == '"':
                self._mode = _Mode.AFTER
                break
            decoded, used = _escape(text, j)
            if used == 0:  # incomplete: wait for the rest
                self._pending = text[j:]
                break
            out.append(decoded)
            i = j + used
        return "".join(out)


def _escape(text: str, at: int) -> tuple[str, int]:
    """The escape at ``text[at]`` (a backslash): (its text, characters used); used 0 when it is incomplete."""
    if at + 1 >= len(text):
        return "", 0
    code = text[at + 1]
    if code in _ESCAPES:
        return _ESCAPES[code], 2
    if code != "u":
        return text[at : at + 2], 2  # not JSON: kept as written
    digits = text[at + 2 : at + 6]
    if not _is_hex(digits):
        return text[at : at + 2], 2
    if len(digits) < 4:
        return "", 0
    unit = int(digits, 16)
    if 0xD800 <= unit < 0xDC00:  # a high surrogate: its low half follows as another \\u escape
        tail = text[at + 6 : at + 12]
        if len(tail) < 6 and ("\\u".startswith(tail) or (tail.startswith("\\u") and _is_hex(tail[2:]))):
            return "", 0
        if len(tail) == 6 and tail.startswith("\\u") and _is_hex(tail[2:]):
            low = int(tail[2:], 16)
            if 0xDC00 <= low < 0xE000:
                return chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)), 12
        return "\ufffd", 6
    if 0xDC00 <= unit < 0xE000:
        return "\ufffd", 6  # a lone low surrogate
    return chr(unit), 6


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdefABCDEF" for c in text)


def _only_string(text: str) -> str:
    """The value of the only string member of the JSON object ``text``, else ``text`` itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict):
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and len(strings) == 1:
            return strings[0]
    return text
