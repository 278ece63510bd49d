"""What a search backend is: ``search`` a query into hits, ``fetch`` a URL into a page.

Backends are shared by every response of a server (they hold an index or an API key); the per-response
state (the page stack) lives in the browser session. A backend reports failures by raising
``BackendError`` with a message the model can read; the session turns it into a failed tool call.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from ._page import Page, SearchHit

__all__ = ["BackendError", "SearchBackend", "SearchOptions"]


class BackendError(Exception):
    """The backend could not answer (down, refused, nothing at that URL): the message is shown to the model."""


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """What the request's ``web_search`` tool asks of the backend.

    ``live``: the tool may reach the live web (``external_web_access``, default true); false restricts an
    online backend to its cache. ``allowed_domains``: ``filters.allowed_domains``, when given.
    """

    live: bool = True
    allowed_domains: tuple[str, ...] = ()


class SearchBackend(abc.ABC):
    """A source of search results and pages."""

    name: str  # as in --search-backend

    @abc.abstractmethod
    async def search(self, query: str, topn: int, options: SearchOptions) -> list[SearchHit]:
        """Up to ``topn`` hits for ``query``, best first."""

    @abc.abstractmethod
    async def fetch(self, url: str, options: SearchOptions, *, view_source: bool = False) -> Page:
        """The page at ``url`` (its source text when ``view_source``)."""

    def describe(self) -> str:
        """One line for the startup banner."""
        return self.name

    async def aclose(self) -> None:  # noqa: B027 - optional: most backends hold nothing to release
        """Release what the backend holds, when the server stops."""
