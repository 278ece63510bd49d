"""The default search backend: a local folder of documents, indexed with SQLite FTS5 — real search, no network.

The operator points ``--search-dir`` at a folder; every Markdown, HTML and text file under it (hidden files
and folders skipped, symlinks leaving the folder skipped, files over 8 MiB skipped) becomes a page. The
index lives in memory: built when the server starts, then brought up to date before a search or an open
whenever ``refresh_interval`` seconds have passed since the last check (one ``stat`` per file; only new,
changed and deleted files are re-read). Queries are ranked with BM25 (title weighted above body) over
Porter-stemmed words, any word matching (``OR``), so natural-language queries find something.

URLs: a document's URL is its ``file://`` URI by default, so citations point at the real file; with
``--search-base-url https://docs.example.com/`` it is that base plus the document's path relative to the
folder (for a folder that mirrors a website). Either way ``open`` accepts exactly those URLs, and relative
links between documents resolve to them. Nothing outside the folder is ever read.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from pathlib import Path, PurePosixPath
from urllib.parse import quote, urldefrag

import anyio.to_thread

from ._backend import BackendError, SearchBackend, SearchOptions
from ._page import Page, SearchHit, plain_text
from ._text import document_page, kind_of

__all__ = ["LocalIndex"]

logger = logging.getLogger("harmony_responses.tools.browser")

SUFFIXES = (".md", ".markdown", ".mdown", ".mkd", ".html", ".htm", ".xhtml", ".txt", ".text", ".rst")
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_QUERY_WORDS = 32
SNIPPET_TOKENS = 32
_WORD = re.compile(r"\w+")

_SCHEMA = """
CREATE TABLE docs (
    id INTEGER PRIMARY KEY,
    path TEXT UNIQUE NOT NULL,
    url TEXT UNIQUE NOT NULL,
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    links TEXT NOT NULL
);
CREATE VIRTUAL TABLE fts USING fts5(title, body, tokenize = 'porter unicode61 remove_diacritics 2');
"""


class LocalIndex(SearchBackend):
    """Full-text search over the documents of one folder.

    Args:
        root: the folder.
        base_url: the URL prefix documents are served under; None: ``file://`` URIs.
        refresh_interval: seconds between checks for changed files (0: before every call).

    Raises:
        ValueError: ``root`` is not a folder, or SQLite lacks FTS5.
    """

    name = "local"

    def __init__(self, root: str | os.PathLike[str], *, base_url: str | None = None, refresh_interval: float = 2.0):
        self.root = Path(root).expanduser().resolve()
        if not self.root.is_dir():
            raise ValueError(f"the search folder {str(root)!r} is not a directory")
        if base_url is not None and not base_url.endswith("/"):
            base_url += "/"
        self.base_url = base_url
        self.refresh_interval = refresh_interval
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            self._db.executescript(_SCHEMA)
        except sqlite3.OperationalError as exc:
            raise ValueError(f"this Python's SQLite has no FTS5 ({exc}); the local search index needs it") from exc
        self._files: dict[str, tuple[int, int]] = {}  # relative path -> (mtime_ns, size) indexed
        self._checked = -math.inf
        self.refresh(force=True)

    def describe(self) -> str:
        return f"local index of {self.root} ({len(self._files)} documents)"

    def url_for(self, relative: str) -> str:
        if self.base_url is not None:
            return self.base_url + quote(relative)
        return (self.root / relative).as_uri()

    # ------------------------------------------------------------------ index upkeep

    def _walk(self) -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        root = str(self.root)
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in files:
                if name.startswith(".") or not name.lower().endswith(SUFFIXES):
                    continue
                path = os.path.join(folder, name)
                try:
                    if os.path.islink(path) and not os.path.realpath(path).startswith(root + os.sep):
                        continue  # a link out of the folder: the operator shared the folder, not what it points to
                    st = os.stat(path)
                except OSError:
                    continue
                if st.st_size > MAX_FILE_BYTES:
                    continue
                relative = PurePosixPath(Path(path).relative_to(self.root)).as_posix()
                found[relative] = (st.st_mtime_ns, st.st_size)
        return found

    def refresh(self, *, force: bool = False) -> None:
        """Bring the index up to date with the folder (if the interval has passed, or ``force``)."""
        with self._lock:
            now = time.monotonic()
            if not force and now - self._checked < self.refresh_interval:
                return
            self._checked = now
            found = self._walk()
            gone = [p for p in self._files if p not in found]
            changed = [p for p, stamp in found.items() if self._files.get(p) != stamp]
            if not gone and not changed:
                return
            with self._db:
                for relative in gone:
                    self._delete(relative)
                for relative in changed:
                    self._delete(relative)
                    self._insert(relative, found[relative])
            logger.info(
                "search index: %d documents (%d new or changed, %d removed)", len(self._files), len(changed), len(gone)
            )

    def _delete(self, relative: str) -> None:
        row = self._db.execute("SELECT id FROM docs WHERE path = ?", (relative,)).fetchone()
        if row is not None:
            self._db.execute("DELETE FROM fts WHERE rowid = ?", row)
            self._db.execute("DELETE FROM docs WHERE id = ?", row)
        self._files.pop(relative, None)

    def _insert(self, relative: str, stamp: tuple[int, int]) -> None:
        try:
            raw = (self.root / relative).read_bytes().decode("utf-8", errors="replace")
        except OSError:
            return
        url = self.url_for(relative)
        page = document_page(url, raw, kind_of(relative), fallback_title=PurePosixPath(relative).name)
        cursor = self._db.execute(
            "INSERT INTO docs (path, url, mtime_ns, size, title, text, links) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (relative, url, stamp[0], stamp[1], page.title, page.text, json.dumps(page.links)),
        )
        # Indexed without the page's URL line, which would otherwise lead every snippet.
        row = (cursor.lastrowid, page.title, plain_text(page.text.removeprefix(f"\nURL: {url}\n")))
        self._db.execute("INSERT INTO fts (rowid, title, body) VALUES (?, ?, ?)", row)
        self._files[relative] = stamp

    # ------------------------------------------------------------------ queries

    def _search(self, query: str, topn: int) -> list[SearchHit]:
        self.refresh()
        words = _WORD.findall(query.lower())[:MAX_QUERY_WORDS]
        if not words:
            return []
        # Each word quoted: FTS5 syntax in the model's query (AND, NEAR, *, ") is text, never an operator.
        match = " OR ".join(f'"{word}"' for word in dict.fromkeys(words))
        with self._lock:
            rows = self._db.execute(
                "SELECT docs.url, docs.title, snippet(fts, 1, '', '', '…', ?) FROM fts "
                "JOIN docs ON docs.id = fts.rowid WHERE fts MATCH ? ORDER BY bm25(fts, 5.0, 1.0), docs.path LIMIT ?",
                (SNIPPET_TOKENS, match, topn),
            ).fetchall()
        return [SearchHit(url=url, title=title, snippet=snippet) for url, title, snippet in rows]

    def _fetch(self, url: str, view_source: bool) -> Page:
        self.refresh()
        with self._lock:
            row = self._db.execute("SELECT path, url, title, text, links FROM docs WHERE url = ?", (url,)).fetchone()
            if row is None:
                row = self._db.execute(
                    "SELECT path, url, title, text, links FROM docs WHERE url = ?", (urldefrag(url).url,)
                ).fetchone()
        if row is None:
            raise BackendError(f"Error fetching URL `{url}`: not in the local search index")
        relative, url, title, text, links = row
        if view_source:
            try:
                raw = (self.root / relative).read_bytes().decode("utf-8", errors="replace")
            except OSError as exc:
                raise BackendError(f"Error fetching URL `{url}`: {exc.strerror or exc}") from None
            return document_page(url, raw, "text", title=title, fallback_title=title)
        return Page(url=url, title=title, text=text, links={int(k): v for k, v in json.loads(links).items()})

    async def search(self, query: str, topn: int, options: SearchOptions) -> list[SearchHit]:
        try:
            return await anyio.to_thread.run_sync(self._search, query, topn)
        except sqlite3.Error as exc:
            raise BackendError(f"Error during search for `{query}`: {exc}") from exc

    async def fetch(self, url: str, options: SearchOptions, *, view_source: bool = False) -> Page:
        try:
            return await anyio.to_thread.run_sync(self._fetch, url, view_source)
        except sqlite3.Error as exc:
            raise BackendError(f"Error fetching URL `{url}`: {exc}") from exc

    async def aclose(self) -> None:
        with self._lock:
            self._db.close()
