"""Browser pages as gpt-oss reads them: text with numbered links, wrapped lines, token-sized windows, find.

A ``Page`` is what one cursor of the page stack shows: a document (opened from a search result, a link or a
URL), a search results page (url ``""``) or a find results page. The display format is the one gpt-oss's
``SimpleBrowserTool`` was trained on (harmony.md §5.2)::

    [{cursor}] {title} ({url})
    **viewing lines [{a} - {b}] of {last}**

    L{a}: …

Links in page text are written ``【{id}†{text}†{domain}】`` (``【{id}†{text}】`` for a link to the same site
or to a URL without a host) and ``open(id=…)`` follows them. Lines are the text wrapped at 80 columns; a
view shows as many lines as fit in ``VIEW_TOKENS`` o200k tokens (rounding up to the whole line), measured
with the vocabulary the model itself uses (``vocab.load_encoding``).
"""

from __future__ import annotations

import itertools
import re
import textwrap
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit

from ...text_tokens import encode_text

__all__ = [
    "VIEW_TOKENS",
    "Page",
    "SearchHit",
    "ToolUsageError",
    "clean_text",
    "domain_of",
    "find_in_page",
    "link_markup",
    "plain_text",
    "render_view",
    "search_results_page",
]

VIEW_TOKENS = 1024  # gpt-oss SimpleBrowserTool's view_tokens
WRAP_WIDTH = 80
FIND_MAX_RESULTS = 50
FIND_SHOW_LINES = 4
MAX_SHOWN_URL = 1024

# Link markup inside page text, and its partial forms at the edges of a line (gpt-oss strip_links).
_LINK = re.compile(r"【\d+†(?P<content>[^†】]+)(?:†[^†】]+)?】")
_PARTIAL_START = re.compile(r"^[^【】]*】")
_PARTIAL_END = re.compile(r"【\d*(?:†(?P<content>[^†】]*)(?:†[^†】]*)?)?$")
# Characters a document must not use, since they would forge links or citations (gpt-oss does the same).
_FORGERY = str.maketrans({"【": "〖", "】": "〗", "\u200b": ""})


class ToolUsageError(Exception):
    """The model called the browser wrongly (bad cursor, link id, location…): the model is told why."""


@dataclass(slots=True)
class Page:
    """One page of the browser.

    Args:
        url: the page's address; ``""`` for search results (they have none).
        title: shown in the display header.
        text: the page's text, with link markup.
        links: link id → absolute URL, for ``open(id=…)``.
        snippets: for result pages (search, find): link id → the line of the target to show on open; None
            for documents. ``find`` refuses result pages, as gpt-oss does.
        cite_url: the URL a citation of this page points to: the page itself, the page a find ran on, or
            None (search results cannot be cited).
        cite_title: the title of that page.
    """

    url: str
    title: str
    text: str
    links: dict[int, str] = field(default_factory=dict)
    snippets: dict[int, int | None] | None = None
    cite_url: str | None = None
    cite_title: str | None = None
    _lines: list[str] | None = field(default=None, repr=False, compare=False)  # wrapped once, on first view

    def __post_init__(self) -> None:
        if self.cite_url is None and self.snippets is None and self.url:
            self.cite_url = self.url
        if self.cite_url is not None and self.cite_title is None:
            self.cite_title = self.title

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = wrap_lines(self.text)
        return self._lines


def clean_text(text: str) -> str:
    """Document text made safe to show: no characters that would read as links or citations."""
    return text.translate(_FORGERY)


def domain_of(url: str) -> str:
    """The host of ``url`` (``""`` for ``file:`` URLs and anything without one)."""
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def link_markup(link_id: int, text: str, url: str, *, current_url: str = "") -> str:
    """``【id†text†domain】``, or ``【id†text】`` when the target has no host or is on the page's own site."""
    text = " ".join(clean_text(text).replace("†", "‡").split()) or url
    domain = domain_of(url)
    if not domain or domain == domain_of(current_url):
        return f"【{link_id}†{text}】"
    return f"【{link_id}†{text}†{domain}】"


def wrap_lines(text: str, width: int = WRAP_WIDTH) -> list[str]:
    """Lines as gpt-oss shows them: each text line wrapped at ``width``, whitespace kept, empty lines kept."""
    wrapped = (
        textwrap.wrap(line, width=width, replace_whitespace=False, drop_whitespace=False) if line else [""]
        for line in text.split("\n")
    )
    return list(itertools.chain.from_iterable(wrapped))


def _tokens(text: str) -> int:
    # Page text is data: a literal "<|end|>" in it is ordinary text, never the special token.
    return len(encode_text(text))


def _end_line(lines: list[str], loc: int, num_lines: int, view_tokens: int) -> int:
    """One past the last line a view starting at ``loc`` shows."""
    if num_lines > 0:
        return min(loc + num_lines, len(lines))
    used = 0
    end = loc
    # Whole lines until the budget is spent; the line that crosses it is shown too (gpt-oss rounds up).
    while end < len(lines) and used < view_tokens:
        used += _tokens(f"L{end}: {lines[end]}\n")
        end += 1
    return end


def render_view(page: Page, cursor: int, loc: int = 0, num_lines: int = -1, view_tokens: int = VIEW_TOKENS) -> str:
    """The display of ``page`` at ``cursor``, from line ``loc``.

    Raises:
        ToolUsageError: ``loc`` is past the end of the page.
    """
    lines = page.lines
    total = len(lines)
    if loc >= total:
        raise ToolUsageError(f"Invalid location parameter: `{loc}`. Cannot exceed page maximum of {total - 1}.")
    end = _end_line(lines, loc, num_lines, view_tokens)
    body = "\n".join(f"L{i}: {lines[i]}" for i in range(loc, end))
    header = page.title
    shown_url = unquote(page.url)
    if len(shown_url) > MAX_SHOWN_URL:
        shown_url = shown_url[: MAX_SHOWN_URL - 3] + "..."
    if shown_url:
        header += f" ({shown_url})"
    return f"[{cursor}] {header}\n**viewing lines [{loc} - {end - 1}] of {total - 1}**\n\n{body}"


def plain_text(text: str) -> str:
    """Page text without link markup (each link becomes its text): what search indexes and snippets use."""
    return _LINK.sub(lambda m: m.group("content"), text)


def _strip_links(text: str) -> str:
    text = _PARTIAL_START.sub("", text)
    text = _PARTIAL_END.sub(lambda m: m.group("content") or "", text)
    return _LINK.sub(lambda m: m.group("content"), text)


def find_in_page(pattern: str, page: Page) -> Page:
    """gpt-oss's ``find``: case-insensitive exact matches, each shown with the lines after it, as a page."""
    needle = pattern.lower()
    lines = _strip_links("\n".join(page.lines)).split("\n")
    chunks: list[str] = []
    snippets: dict[int, int | None] = {}
    index = 0
    while index < len(lines) and len(chunks) < FIND_MAX_RESULTS:
        if needle not in lines[index].lower():
            index += 1
            continue
        match = len(chunks)
        snippet = "\n".join(lines[index : index + FIND_SHOW_LINES])
        chunks.append(f"# 【{match}†match at L{index}】\n{snippet}")
        snippets[match] = index
        index += FIND_SHOW_LINES
    text = "\n\n".join(chunks) if chunks else f"No `find` results for pattern: `{pattern}`"
    return Page(
        url=f"{page.url}/find?pattern={quote(pattern)}",
        title=f"Find results for text: `{pattern}` in `{page.title}`",
        text=text,
        links=dict.fromkeys(snippets, page.url),
        snippets=snippets,
        cite_url=page.cite_url,
        cite_title=page.cite_title,
    )


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result: where it is, what it is called, and a line of text about it."""

    url: str
    title: str
    snippet: str


def search_results_page(query: str, hits: list[SearchHit]) -> Page:
    """Search results as the synthetic page gpt-oss shows (url ``""``, one ``  * 【i†title†domain】`` per hit)."""
    entries = []
    for i, hit in enumerate(hits):
        snippet = " ".join(clean_text(hit.snippet).split())
        entries.append(f"  * {link_markup(i, hit.title, hit.url)} {snippet}".rstrip())
    body = "\n".join(entries) if entries else f"No results found for `{clean_text(query)}`."
    return Page(
        url="",
        title=clean_text(query),
        text=f"\nURL: \n# Search Results\n\n{body}",
        links={i: hit.url for i, hit in enumerate(hits)},
        snippets=dict.fromkeys(range(len(hits))),
    )
