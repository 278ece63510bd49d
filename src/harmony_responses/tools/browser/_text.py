"""Documents (HTML, Markdown, plain text) → browser pages: readable text with numbered links.

gpt-oss read web pages converted by html2text with links rewritten as ``【{id}†{text}†{domain}】``; this
module does the same with the standard library only (``html.parser``), so that local documents and pages
from an online backend look like what the model was trained on:

- HTML: scripts, styles and the head are dropped; headings become ``#`` lines, list items ``  * ``;
  whitespace is collapsed except inside ``<pre>``; images become ``[Image N: alt]``; ``<title>`` is the title.
- Markdown: kept as written (it already reads well), with ``[text](url)`` links and ``<url>`` autolinks
  rewritten as numbered links and images as ``[Image N: alt]``; the first ``# heading`` is the title.
- Plain text: as is.

Relative links are resolved against the document's URL, so a local document linking ``other.md`` opens the
indexed ``other.md``. Every page starts with a ``URL:`` line, as gpt-oss's pages did (``display_urls``).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

from ._page import Page, clean_text, link_markup

__all__ = ["DocumentKind", "document_page", "kind_of"]

DocumentKind = str  # "html" | "markdown" | "text"

_HTML_SUFFIXES = (".html", ".htm", ".xhtml")
_MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdown", ".mkd")

_SKIP = frozenset({"script", "style", "head", "noscript", "template", "svg", "iframe", "object"})
_BLOCK = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "header",
        "footer",
        "main",
        "nav",
        "aside",
        "table",
        "tr",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "blockquote",
        "figure",
        "figcaption",
        "form",
        "hr",
        "br",
        "pre",
        "li",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
    }
)
_PARAGRAPH = frozenset({"p", "table", "ul", "ol", "blockquote", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "hr"})
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source", "wbr"})

_MD_IMAGE = re.compile(r"!\[(?P<alt>[^\]\n]*)\]\((?P<src>[^)\s]*)(?:\s+\"[^\"\n]*\")?\)")
_MD_LINK = re.compile(r"\[(?P<text>[^\]\n]+)\]\((?P<url>[^)\s]+)(?:\s+\"[^\"\n]*\")?\)")
_MD_AUTOLINK = re.compile(r"<(?P<url>https?://[^>\s]+)>")
_MD_TITLE = re.compile(r"^#[ \t]+(?P<title>.+?)[ \t#]*$", re.MULTILINE)
_BLANK_RUNS = re.compile(r"\n{3,}")


def kind_of(name: str) -> DocumentKind:
    """The kind of a document from its file name or URL path."""
    lower = name.lower()
    if lower.endswith(_HTML_SUFFIXES):
        return "html"
    if lower.endswith(_MARKDOWN_SUFFIXES):
        return "markdown"
    return "text"


class _Links:
    """Numbered links of one page: the same URL keeps its first id."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.urls: dict[int, str] = {}
        self._ids: dict[str, int] = {}

    def markup(self, text: str, href: str) -> str | None:
        """The link's markup, or None when it leads nowhere the browser can open (anchors, mailto:)."""
        href = href.strip()
        if not href or href.startswith(("#", "mailto:", "javascript:", "tel:", "data:")):
            return None
        try:
            url = urljoin(self.base_url, href) if self.base_url else href
        except ValueError:
            return None
        link_id = self._ids.get(url)
        if link_id is None:
            link_id = self._ids[url] = len(self.urls)
            self.urls[link_id] = url
        return link_markup(link_id, text, url, current_url=self.base_url)


class _HtmlText(HTMLParser):
    def __init__(self, links: _Links) -> None:
        super().__init__(convert_charrefs=True)
        self.links = links
        self.out: list[str] = []
        self.title: str | None = None
        self._skip = 0
        self._pre = 0
        self._in_title = False
        self._title_parts: list[str] = []
        self._anchor: tuple[str, list[str]] | None = None
        self._images = 0

    # ------------------------------------------------------------------ output helpers

    def _write(self, text: str) -> None:
        if self._anchor is not None:
            self._anchor[1].append(text)
        else:
            self.out.append(text)

    def _at_line_start(self) -> bool:
        for chunk in reversed(self.out):
            if chunk:
                return chunk.endswith("\n")
        return True

    def _newline(self, blank: bool = False) -> None:
        if self._anchor is not None:
            self._anchor[1].append(" ")
            return
        self.out.append("\n\n" if blank else "\n")

    # ------------------------------------------------------------------ parser callbacks

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
            return
        if tag in _SKIP:
            if tag not in _VOID:
                self._skip += 1
            return
        if self._skip:
            return
        attr = {k: v or "" for k, v in attrs}
        if tag in _BLOCK:
            self._newline(blank=tag in _PARAGRAPH)
        if tag == "pre":
            self._pre += 1
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self._write("#" * int(tag[1]) + " ")
        elif tag == "li":
            self._write("  * ")
        elif tag in ("td", "th"):
            self._write(" ")
        elif tag == "img":
            alt = " ".join(clean_text(attr.get("alt") or attr.get("title") or "").split())
            self._write(f"[Image {self._images}: {alt}]" if alt else f"[Image {self._images}]")
            self._images += 1
        elif tag == "a" and "href" in attr and self._anchor is None:
            self._anchor = (attr["href"], [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            if self.title is None:
                self.title = " ".join(clean_text("".join(self._title_parts)).split())
            return
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
            return
        if self._skip:
            return
        if tag == "a" and self._anchor is not None:
            href, parts = self._anchor
            self._anchor = None
            text = " ".join("".join(parts).split())
            markup = self.links.markup(text, href) if text else None
            self.out.append(markup if markup is not None else text)
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
        if tag in _BLOCK:
            self._newline(blank=tag in _PARAGRAPH)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title_parts.append(data)
            return
        if self._skip:
            return
        data = clean_text(data)
        if not self._pre:
            data = re.sub(r"\s+", " ", data)
            if self._anchor is None and self._at_line_start():
                data = data.lstrip()
        if data:
            self._write(data)


def _tidy(text: str) -> str:
    lines = [line.rstrip() for line in text.split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip("\n")


def _html(raw: str, url: str) -> tuple[str, str | None, dict[int, str]]:
    links = _Links(url)
    parser = _HtmlText(links)
    parser.feed(raw)
    parser.close()
    return _tidy("".join(parser.out)), parser.title or None, links.urls


def _markdown(raw: str, url: str) -> tuple[str, str | None, dict[int, str]]:
    links = _Links(url)
    text = clean_text(raw)
    title_match = _MD_TITLE.search(text)
    images = iter(range(1 << 30))

    def image(m: re.Match[str]) -> str:
        n = next(images)
        alt = " ".join(m.group("alt").split())
        return f"[Image {n}: {alt}]" if alt else f"[Image {n}]"

    def link(m: re.Match[str]) -> str:
        markup = links.markup(m.group("text"), m.group("url"))
        return markup if markup is not None else m.group("text")

    text = _MD_IMAGE.sub(image, text)
    text = _MD_LINK.sub(link, text)
    text = _MD_AUTOLINK.sub(lambda m: links.markup(m.group("url"), m.group("url")) or m.group("url"), text)
    return _tidy(text), title_match.group("title").strip() if title_match else None, links.urls


def document_page(url: str, raw: str, kind: DocumentKind, *, title: str | None = None, fallback_title: str) -> Page:
    """The page for a document's raw content.

    Args:
        url: the document's URL (links are resolved against it; shown in the page).
        raw: its content (HTML source, Markdown or text).
        kind: ``"html"``, ``"markdown"`` or ``"text"`` (``"text"`` also serves ``view_source``).
        title: a title known from elsewhere (an online backend's result); the document's own otherwise.
        fallback_title: the title when neither is known (a file name, a domain).
    """
    if kind == "html":
        text, own_title, links = _html(raw, url)
    elif kind == "markdown":
        text, own_title, links = _markdown(raw, url)
    else:
        text, own_title, links = _tidy(clean_text(raw)), None, {}
    final_title = " ".join(clean_text(title or own_title or fallback_title).split()) or fallback_title
    return Page(url=url, title=final_title, text=f"\nURL: {url}\n{text}", links=links)
