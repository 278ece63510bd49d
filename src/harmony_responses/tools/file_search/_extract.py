"""A stored file's bytes → its text, by its name (and content type): text, Markdown, HTML, JSON, code, PDF.

Text is UTF-8 (a BOM dropped); a text that starts with a UTF-16 BOM is read as UTF-16, and so is one whose
NUL bytes say it is UTF-16 without a BOM (the high bytes of Latin text); any other NUL byte says it is not text
at all (``invalid_file``; NUL is valid UTF-8, yet no text holds it). A text that is not UTF-8 is read as
Windows-1252 (every byte a character).
HTML loses its tags, scripts and styles (the standard library's parser). PDF goes through pypdf (the
``file-search`` extra), whose decoders bound what one stream may inflate to (``pypdf.filters``), so a zip bomb
inside a PDF is an error, not a full memory; the text extracted is bounded too, and so is the page content
read over the whole document (``MAX_PDF_CONTENT_BYTES``) and its pages (``MAX_PDF_PAGES``): pages may share
one content stream, so a small file of many pages all showing one stream that inflates to pypdf's bound, or
of a million pages all one empty page, would otherwise keep a thread parsing for minutes. Anything else is
``Unsupported`` (the file ends ``failed`` with ``unsupported_file``); a file that cannot be read as its type
raises ``Unsupported`` with ``code="invalid_file"``.
"""

from __future__ import annotations

import html.parser
import io
import os

__all__ = [
    "MAX_INGEST_BYTES",
    "MAX_PDF_CONTENT_BYTES",
    "MAX_PDF_PAGES",
    "MAX_TEXT_CHARS",
    "Unsupported",
    "extract_text",
]

# What one file may bring to ingestion: its bytes are read whole (a PDF needs them so), its text tokenized
# whole. OpenAI's own limit is 5,000,000 tokens per file (``_chunking.MAX_FILE_TOKENS``); about four
# characters a token, so a longer text cannot pass it, and is refused before it is tokenized.
MAX_INGEST_BYTES = 128 * 1024 * 1024
MAX_TEXT_CHARS = 25_000_000
# Decoded page content over a whole PDF: pypdf parses it at about 75 MB/s here, so this bounds one file's
# extraction to a few seconds; a book of 5,000 dense pages holds well under 100 MB of content streams.
MAX_PDF_CONTENT_BYTES = 256 * 1024 * 1024
# Pages of one PDF: each costs about half a millisecond to a millisecond to read even when empty.
MAX_PDF_PAGES = 10_000

TEXT_EXTENSIONS = frozenset(
    ".txt .text .md .markdown .rst .adoc .org .tex .csv .tsv .log .json .jsonl .ndjson .yaml .yml .toml .ini .cfg "
    ".conf .xml .py .pyi .js .mjs .cjs .ts .tsx .jsx .java .kt .scala .c .h .cc .cpp .hpp .cs .go .rs .rb .php "
    ".pl .swift .m .sh .bash .zsh .ps1 .sql .r .lua .dart .ex .exs .erl .hs .ml .vue .svelte .css .scss .less "
    ".proto .graphql .dockerfile .makefile .gitignore .env".split()
)
HTML_EXTENSIONS = frozenset({".html", ".htm", ".xhtml"})


class Unsupported(ValueError):
    """The file yields no text: ``code`` is the API's ``last_error.code`` (unsupported_file, invalid_file)."""

    def __init__(self, message: str, code: str = "unsupported_file") -> None:
        super().__init__(message)
        self.code = code


def _utf16_order(data: bytes) -> str | None:
    """``utf-16-le``/``-be`` when ``data`` looks like UTF-16 without a BOM: its NUL bytes all on one side of each
    byte pair and common there (the high bytes of Latin text), else None."""
    if len(data) % 2:
        return None
    low, high = data[0::2].count(0), data[1::2].count(0)
    if low == 0 and high * 8 >= len(data) // 2:
        return "utf-16-le"
    if high == 0 and low * 8 >= len(data) // 2:
        return "utf-16-be"
    return None


def _decode(data: bytes) -> str:
    text = _decoded(data)
    if "\x00" in text:  # UTF-16 can spell NUL too
        raise Unsupported("The file's text holds NUL characters: it is not text.", "invalid_file")
    return text


def _decoded(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise Unsupported("The file is neither UTF-8 nor valid UTF-16 text.", "invalid_file") from None
    if b"\x00" in data:
        # NUL is valid UTF-8, but no text holds it: UTF-16 without its BOM, or not text at all. (PostgreSQL
        # could not store it either.)
        order = _utf16_order(data)
        try:
            if order is not None:
                return data.decode(order)
        except UnicodeDecodeError:
            pass
        raise Unsupported("The file holds NUL bytes and is not UTF-16 text: it is not text.", "invalid_file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


class _HTMLText(html.parser.HTMLParser):
    SKIPPED = frozenset({"script", "style", "head", "template", "noscript"})
    BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in self.SKIPPED:
            self._skipping += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIPPED and self._skipping:
            self._skipping -= 1

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def _html(text: str) -> str:
    parser = _HTMLText()
    parser.feed(text)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


def _pdf(data: bytes) -> str:
    try:
        import pypdf
    except ImportError:  # pragma: no cover - an installation without the extra
        raise Unsupported("PDF needs pypdf on the server (the file-search extra).") from None
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if len(reader.pages) > MAX_PDF_PAGES:
            raise Unsupported(f"The PDF has {len(reader.pages)} pages, more than {MAX_PDF_PAGES}.", "invalid_file")
        pages: list[str] = []
        size = content = 0
        for page in reader.pages:
            # get_data() is cached on the stream object: extract_text below does not inflate it again.
            stream = page.get_contents()
            content += len(stream.get_data()) if stream is not None else 0
            if content > MAX_PDF_CONTENT_BYTES:
                raise Unsupported(
                    f"The PDF's pages hold more than {MAX_PDF_CONTENT_BYTES} bytes of content once inflated.",
                    "invalid_file",
                )
            text = (page.extract_text() or "").replace("\x00", "")  # fonts can map glyphs to NUL
            size += len(text)
            if size > MAX_TEXT_CHARS:
                raise Unsupported(f"The PDF's text is longer than {MAX_TEXT_CHARS} characters.", "invalid_file")
            pages.append(text)
    except Unsupported:
        raise
    except Exception as exc:  # pypdf raises many kinds (PdfReadError, LimitReachedError, ValueError…)
        raise Unsupported(f"The PDF could not be read: {exc}", "invalid_file") from None
    return "\n\n".join(pages)


def extract_text(filename: str, content_type: str | None, data: bytes) -> str:
    """The text of a file named ``filename`` holding ``data``; raises ``Unsupported``."""
    name = filename.lower()
    extension = os.path.splitext(name)[1] or (f".{name}" if name in ("dockerfile", "makefile") else "")
    kind = (content_type or "").split(";")[0].strip().lower()
    if extension == ".pdf" or kind == "application/pdf" or data.startswith(b"%PDF-"):
        text = _pdf(data)
    elif extension in HTML_EXTENSIONS or kind == "text/html":
        text = _html(_decode(data))
    elif extension in TEXT_EXTENSIONS or kind.startswith("text/") or kind in ("application/json", "application/xml"):
        text = _decode(data)
    else:
        raise Unsupported(
            f"Files of type '{extension or kind or 'unknown'}' are not supported for retrieval: text, Markdown, "
            "HTML, JSON, code and PDF are."
        )
    if len(text) > MAX_TEXT_CHARS:
        raise Unsupported(f"The file's text is longer than {MAX_TEXT_CHARS} characters.", "invalid_file")
    return text
