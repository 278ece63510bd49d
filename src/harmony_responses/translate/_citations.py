"""Citations in message text → ``url_citation`` and ``file_citation`` annotations, streamed without re-scanning.

gpt-oss cites what the browser showed as ``【{cursor}†L{start}(-L{end})?】`` (harmony.md §5.2). When the
cursor resolves to a page with a URL, the citation is replaced, as gpt-oss's ``normalize_citations``
does, by `` ([{domain}]({url})) `` and an annotation ``{type: "url_citation", start_index, end_index,
title, url}`` records where the replacement sits in the message's text. A citation that does not resolve
(search results have no URL; an unknown cursor) stays as the model wrote it, with no annotation.

File search results are cited ``【{call}:{result}†{filename}】`` (the tool message's numbers,
``tools/file_search/_session.py``). One that resolves to a result is removed from the text and recorded as
``{type: "file_citation", file_id, filename, index}``, ``index`` being where it stood, as the API places its
file citations; one that does not resolve stays as written. The two forms differ by the ``:``, so a response
with both tools declared resolves each against its own tool.

Streaming: text is passed through at once unless it might be the start of a citation. From a ``【`` on,
text is held back while it is still a prefix of a citation; it is released as soon as it completes one
(replaced) or can no longer be one (as written). Only the held tail is ever scanned again, and it is
bounded (``MAX_HELD`` characters: a longer "citation" is text), so each token costs O(1) in the common
case (no ``【`` in it) and O(``MAX_HELD``) at worst. What is released depends only on the text, never on
how it was split, so deltas and annotations are the same however the engine chunks its tokens.

Offsets are Python string indices (Unicode code points) into the message's final text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["CitationFilter", "CitationResolver", "FileCitationResolver", "MAX_HELD"]

# cursor → (url, title) of the page it showed, or None when that page cannot be cited.
CitationResolver = Callable[[int], tuple[str, str] | None]
# (call, result) → (file_id, filename) of the file search result so numbered, or None.
FileCitationResolver = Callable[[int, int], tuple[str, str] | None]

CITATION = re.compile(r"【(?P<cursor>\d+)(?::(?P<result>\d+))?†(?P<content>[^†】]+)(?:†[^†】]+)?】")
# Every proper prefix of a CITATION match, anchored at a 【 and running to the end of the held text.
_PREFIX = re.compile(r"【(?:\d+(?::(?:\d+(?:†(?:[^†】]+(?:†[^†】]*)?)?)?)?|†(?:[^†】]+(?:†[^†】]*)?)?)?)?")
OPEN = "【"
MAX_HELD = 256


def _label(url: str, title: str) -> str:
    """The link text of a replacement: the domain, as gpt-oss writes it, or the title for host-less URLs."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        host = None
    return host or title or url


class CitationFilter:
    """The citation state of one message's text.

    ``feed(text)`` and ``flush()`` return what to emit, in order: strings (text for deltas) and dicts
    (annotations, each right after the text that contains its replacement).
    """

    __slots__ = ("_emitted", "_held", "_resolve", "_resolve_file", "announced", "annotations")

    def __init__(self, resolve: CitationResolver | None, resolve_file: FileCitationResolver | None = None) -> None:
        self._resolve = resolve
        self._resolve_file = resolve_file
        self._held = ""
        self._emitted = 0  # characters released so far: the next annotation's offsets start here
        self.annotations: list[dict[str, Any]] = []
        self.announced = 0  # annotation.added events sent (the next one's annotation_index)

    def feed(self, text: str) -> list[str | dict[str, Any]]:
        if not self._held and OPEN not in text:
            self._emitted += len(text)
            return [text]
        return self._scan(self._held + text, final=False)

    def flush(self) -> list[str | dict[str, Any]]:
        """The end of the message: whatever is held is text (an unfinished citation stays as written)."""
        if not self._held:
            return []
        return self._scan(self._held, final=True)

    def _scan(self, buffer: str, *, final: bool) -> list[str | dict[str, Any]]:
        out: list[str | dict[str, Any]] = []
        start = 0  # first character not yet released
        position = 0  # where to look for the next 【
        self._held = ""
        while (i := buffer.find(OPEN, position)) >= 0:
            match = CITATION.match(buffer, i)
            if match is not None and match.group("result") is not None:
                found = None
                if self._resolve_file is not None:
                    found = self._resolve_file(int(match.group("cursor")), int(match.group("result")))
                if found is not None:
                    piece = buffer[start:i]
                    self._emitted += len(piece)
                    annotation = {
                        "type": "file_citation",
                        "file_id": found[0],
                        "filename": found[1],
                        "index": self._emitted,
                    }
                    self.annotations.append(annotation)
                    out += (piece, annotation)
                    start = match.end()
                position = match.end()
                continue
            if match is not None:
                target = self._resolve(int(match.group("cursor"))) if self._resolve is not None else None
                if target is not None:
                    url, title = target
                    replacement = f" ([{_label(url, title)}]({url})) "
                    piece = buffer[start:i] + replacement
                    begin = self._emitted + i - start
                    self._emitted += len(piece)
                    annotation = {
                        "type": "url_citation",
                        "start_index": begin,
                        "end_index": begin + len(replacement),
                        "title": title,
                        "url": url,
                    }
                    self.annotations.append(annotation)
                    out += (piece, annotation)
                    start = match.end()
                position = match.end()
                continue
            if not final and len(buffer) - i <= MAX_HELD and _PREFIX.fullmatch(buffer, i) is not None:
                self._held = buffer[i:]
                buffer = buffer[:i]
                break
            position = i + 1
        if start < len(buffer):
            piece = buffer[start:]
            self._emitted += len(piece)
            out.append(piece)
        return out
