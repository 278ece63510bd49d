"""The browser tool of one response: gpt-oss's ``search`` / ``open`` / ``find`` over a page stack.

Each call pushes one page on the stack and its index is the page's cursor, shown as ``[cursor]`` in the
display the model reads; ``open`` and ``find`` take a ``cursor`` (default: the latest page). Behaviour follows
gpt-oss's ``SimpleBrowserTool``: ``open(id=n)`` follows link ``n`` of a page (on a find results page, to the
match's line), ``open(id="url")`` opens a URL, ``open()`` without ``id`` scrolls (``loc``, ``num_lines``);
``find`` is case-insensitive and refuses search and find results pages.

Every outcome is a ``ToolResult``: the display text, or ``{"error": "…"}`` with ``error`` set (unknown
function, bad arguments, bad cursor or link, a backend that fails), so the model reads what went wrong and
the ``web_search_call`` item ends ``failed``. The result's ``action`` is the real one: ``search`` with the
query (``sources`` only when the request includes ``web_search_call.action.sources``), ``open_page`` with
the page's URL and ``find_in_page`` with the searched page's URL and the pattern, all resolved through the
stack — never a cursor placeholder.

``cite(cursor)`` resolves the model's citations ``【cursor†L…】`` for the translator: the cited page's URL and
title (a find results page cites the page it searched; search results cannot be cited).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from ...translate import ToolCall
from .._base import ToolResult, ToolSession
from ._backend import BackendError, SearchBackend, SearchOptions
from ._page import VIEW_TOKENS, Page, ToolUsageError, find_in_page, render_view, search_results_page

__all__ = ["BrowserSession", "WebSearch"]

logger = logging.getLogger("harmony_responses.tools.browser")

FUNCTIONS = ("search", "open", "find")
DEFAULT_TOPN = 10
MAX_TOPN = 20  # gpt-oss's max_search_results


def _int(args: Mapping[str, Any], key: str, default: int) -> int:
    value = args.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ToolUsageError(f"Invalid function arguments: `{key}` should be an integer, not `{value!r}`")
    return int(value)


def _str(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolUsageError(f"Invalid function arguments: `{key}` should be a non-empty string")
    return value


class BrowserSession(ToolSession):
    """The page stack of one response.

    Args:
        backend: where searches and pages come from (shared by the server's responses).
        options: what the request's ``web_search`` tool allows (live web, domains).
        include_sources: put ``sources`` on search actions (``include: ["web_search_call.action.sources"]``).
        view_tokens: tokens of page text per view.
    """

    namespace = "browser"

    def __init__(
        self,
        backend: SearchBackend,
        *,
        options: SearchOptions | None = None,
        include_sources: bool = False,
        view_tokens: int = VIEW_TOKENS,
    ) -> None:
        self.backend = backend
        self.options = options or SearchOptions()
        self.include_sources = include_sources
        self.view_tokens = view_tokens
        self.stack: list[Page] = []
        self._cache: dict[tuple[str, bool], Page] = {}

    # ------------------------------------------------------------------ for the translator

    def cite(self, cursor: int) -> tuple[str, str] | None:
        """The ``(url, title)`` a citation of ``cursor`` points to, or None."""
        if not 0 <= cursor < len(self.stack):
            return None
        page = self.stack[cursor]
        if not page.cite_url:
            return None
        return page.cite_url, page.cite_title or page.title

    # ------------------------------------------------------------------ the tool

    async def call(self, call: ToolCall) -> ToolResult:
        action: dict[str, Any] = _default_action(call.name)
        try:
            if call.name not in FUNCTIONS:
                raise ToolUsageError(f"Unknown function: {call.name}")
            args = _arguments(call.arguments)
            if call.name == "search":
                text = await self._search(args, action)
            elif call.name == "open":
                text = await self._open(args, action)
            else:
                text = self._find(args, action)
        except (ToolUsageError, BackendError) as exc:
            return _failure(str(exc), action)
        except Exception as exc:  # a bug or an unexpected backend failure: still a result, never a crash
            logger.exception("browser.%s failed", call.name)
            return _failure(f"The browser failed: {type(exc).__name__}: {exc}", action)
        return ToolResult(text=text, action=action)

    def _page(self, cursor: int) -> Page:
        if not self.stack:
            raise ToolUsageError("No pages to access!")
        if cursor == -1:
            return self.stack[-1]
        if not 0 <= cursor < len(self.stack):
            raise ToolUsageError(
                f"Cursor `{cursor}` is out of range. Available cursor indices: [0 - {len(self.stack) - 1}]."
            )
        return self.stack[cursor]

    def _show(self, page: Page, loc: int = 0, num_lines: int = -1) -> str:
        self.stack.append(page)
        try:
            return render_view(page, len(self.stack) - 1, loc, num_lines, self.view_tokens)
        except ToolUsageError:
            self.stack.pop()  # a view that cannot be shown leaves no cursor behind (gpt-oss show_page_safely)
            raise

    async def _search(self, args: Mapping[str, Any], action: dict[str, Any]) -> str:
        query = _str(args, "query")
        action["query"] = query
        topn = min(max(_int(args, "topn", _int(args, "top_n", DEFAULT_TOPN)), 1), MAX_TOPN)
        hits = await self.backend.search(query, topn, self.options)
        if self.include_sources:
            action["sources"] = [{"type": "url", "url": hit.url} for hit in hits]
        return self._show(search_results_page(query, hits))

    async def _fetch(self, url: str, view_source: bool, *, fresh: bool) -> Page:
        key = (url, view_source)
        page = None if fresh else self._cache.get(key)
        if page is None:
            page = self._cache[key] = await self.backend.fetch(url, self.options, view_source=view_source)
        return page

    async def _open(self, args: Mapping[str, Any], action: dict[str, Any]) -> str:
        link = args.get("id", -1)
        cursor = _int(args, "cursor", -1)
        loc = _int(args, "loc", -1)
        num_lines = _int(args, "num_lines", -1)
        view_source = args.get("view_source", False)
        if not isinstance(view_source, bool):
            raise ToolUsageError("Invalid function arguments: `view_source` should be a boolean")
        line: int | None = None
        if isinstance(link, str):
            action["url"] = link
            page = await self._fetch(link, view_source, fresh=True)  # a URL typed by the model: reload it
        else:
            link = _int(args, "id", -1)
            current = self._page(cursor)
            if link >= 0:
                url = current.links.get(link)
                if url is None:
                    raise ToolUsageError(f"Invalid link id `{link}`.")
                action["url"] = url
                line = (current.snippets or {}).get(link)
                page = await self._fetch(url, view_source, fresh=False)
            elif view_source:
                if not current.cite_url:
                    raise ToolUsageError("This page has no source to view.")
                action["url"] = current.cite_url
                page = await self._fetch(current.cite_url, True, fresh=False)
            else:
                if current.cite_url:
                    action["url"] = current.cite_url
                page = current  # scroll the page
        if loc < 0:
            # A find match opens a few lines above the match, as gpt-oss does.
            loc = 0 if line is None else line - 4 if line > 4 else line
        action["url"] = page.cite_url or action.get("url")
        return self._show(page, loc, num_lines)

    def _find(self, args: Mapping[str, Any], action: dict[str, Any]) -> str:
        pattern = args.get("pattern")
        if isinstance(pattern, str):
            action["pattern"] = pattern
        page = self._page(_int(args, "cursor", -1))
        action["url"] = page.cite_url or page.url
        pattern = _str(args, "pattern")
        if page.snippets is not None:
            raise ToolUsageError("Cannot run `find` on search results page or find results page")
        return self._show(find_in_page(pattern, page))


def _arguments(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise ToolUsageError("Invalid function arguments") from None
    if not isinstance(value, dict):
        raise ToolUsageError("Invalid function arguments")
    return value


def _default_action(name: str) -> dict[str, Any]:
    """The action before anything is known: filled in as the call resolves its query, URL and pattern."""
    if name == "open":
        return {"type": "open_page", "url": None}
    if name == "find":
        return {"type": "find_in_page", "url": "", "pattern": ""}
    return {"type": "search"}


def _failure(message: str, action: dict[str, Any]) -> ToolResult:
    return ToolResult(text=json.dumps({"error": message}, ensure_ascii=False), error=message, action=action)


class WebSearch:
    """The server's web search: its backend, and a browser session per response that declares the tool.

    Args:
        backend: the configured backend (local index or online service).
    """

    def __init__(self, backend: SearchBackend) -> None:
        self.backend = backend

    def describe(self) -> str:
        return self.backend.describe()

    def session(self, tool: Mapping[str, Any] | None = None, *, include_sources: bool = False) -> BrowserSession:
        """A fresh page stack for one response, honouring the request's ``web_search`` tool options."""
        tool = tool or {}
        live = tool.get("external_web_access")
        filters = tool.get("filters")
        domains = filters.get("allowed_domains") if isinstance(filters, Mapping) else None
        options = SearchOptions(
            live=live is not False,
            allowed_domains=tuple(d for d in domains or () if isinstance(d, str)),
        )
        return BrowserSession(self.backend, options=options, include_sources=include_sources)

    async def aclose(self) -> None:
        await self.backend.aclose()
