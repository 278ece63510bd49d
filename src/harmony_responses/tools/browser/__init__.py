"""tools.browser — web search: Harmony's ``browser`` tool (search / open / find) over pluggable backends.

- ``_page``: pages, the display format gpt-oss was trained on, token-sized views, ``find``;
- ``_text``: HTML / Markdown / text documents → page text with numbered links;
- ``_backend``: the backend interface; ``_local``: the default SQLite FTS5 index over a folder;
  ``_exa``: Exa's online search API;
- ``_session``: the per-response ``BrowserSession`` (a ``ToolSession`` with the page stack, and the
  citation resolver the translator uses) and ``WebSearch``, the server-wide configuration.

``web_search_from_options`` builds the server's ``WebSearch`` from its options (None: no backend, and then
``web_search`` tools are accepted but not offered to the model).
"""

from __future__ import annotations

from ._backend import BackendError, SearchBackend, SearchOptions
from ._exa import DEFAULT_EXA_URL, ExaBackend
from ._local import LocalIndex
from ._page import Page, SearchHit
from ._session import BrowserSession, WebSearch

__all__ = [
    "BACKENDS",
    "BackendError",
    "BrowserSession",
    "ExaBackend",
    "LocalIndex",
    "Page",
    "SearchBackend",
    "SearchHit",
    "SearchOptions",
    "WebSearch",
    "web_search_from_options",
]

BACKENDS = ("local", "exa")


def web_search_from_options(
    *,
    backend: str | None = None,
    search_dir: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    api_url: str | None = None,
) -> WebSearch | None:
    """The server's web search, or None when nothing is configured.

    ``backend`` defaults to ``local`` when ``search_dir`` is given. ``local`` needs ``search_dir`` (its
    documents get ``base_url`` + path, or ``file://`` URLs); ``exa`` needs ``api_key`` (``api_url``
    overrides the service's address).

    Raises:
        ValueError: an unknown backend, or one missing what it needs (the message says what).
    """
    if backend is None:
        if search_dir is None:
            return None
        backend = "local"
    if backend == "local":
        if search_dir is None:
            raise ValueError("the local search backend needs a folder of documents (--search-dir)")
        return WebSearch(LocalIndex(search_dir, base_url=base_url))
    if backend == "exa":
        if not api_key:
            raise ValueError(
                "the exa search backend needs an API key in HARMONY_RESPONSES_SEARCH_API_KEY or EXA_API_KEY"
            )
        return WebSearch(ExaBackend(api_key, base_url=api_url or DEFAULT_EXA_URL))
    raise ValueError(f"unknown search backend {backend!r}: expected one of {', '.join(BACKENDS)}")
