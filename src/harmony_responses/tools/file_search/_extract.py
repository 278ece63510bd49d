"""A stored file's bytes → its text, by its name (and content type): text, Markdown, HTML, JSON, code, PDF.

Text is UTF-8 (a BOM dropped); a text that is not UTF-8 is read as UTF-16 when it starts with a UTF-16 BOM,
else as Windows-1252 (every byte a character) unless it holds NUL bytes, which say it is not text at all.
HTML loses its tags, scripts and styles (the standard library's parser). PDF goes through pypdf (the
``file-search`` extra), whose decoders bound what one stream may inflate to (``pypdf.filters``), so a zip bomb
inside a PDF is an error, not a full memory; the text extracted is bounded too. Anything else is
``Unsupported`` (the file ends ``failed`` with ``unsupported_file``); a file that cannot be read as its type
raises ``Unsupported`` with ``code="invalid_file"``.
"""

from __future__ import annotations

import html.parser
import io
import os

__all__ = ["MAX_INGEST_BYTES", "MAX_TEXT_CHARS", "Unsupported", "extract_text"]

# What one file may bring to ingestion: its bytes are read whole (a PDF needs them so), its text tokenized
# whole. OpenAI's own limit is 5,000,000 tokens per file (``_chunking.MAX_FILE_TOKENS``); about four
# characters a token, so a longer text cannot pass it, and is refused before it is tokenized.
MAX_INGEST_BYTES = 128 * 1024 * 1024
MAX_TEXT_CHARS = 25_000_000

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


def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise Unsupported("The file is neither UTF-8 nor valid UTF-16 text.", "invalid_file") from None
    if b"\x00" in data:
        raise Unsupported("The file holds NUL bytes: it is not text.", "invalid_file")
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
        pages: list[str] = []
        size = 0
        for page in reader.pages:
            text = page.extract_text() or ""
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
