"""The online backend: Exa's search API (``--search-backend exa``), the backend gpt-oss's own browser used.

Two endpoints, both ``POST`` with the key in ``x-api-key`` (from ``HARMONY_RESPONSES_SEARCH_API_KEY`` or
``EXA_API_KEY``; never a flag, which would show in ``ps``):

- ``/search`` ``{query, type: "auto", numResults, contents: {highlights: …}}`` → ``{results: [{title, url,
  highlights?, summary?, text?}]}``: the hits, each with its best passage as the snippet;
- ``/contents`` ``{urls: [url], text: true}`` → ``{results: [{url, title, text}], statuses: [{id, status,
  error?: {tag, httpStatusCode}}]}``: a page's text (Markdown), which ``open`` shows. Exa fetches the page,
  so this server never connects to the URLs a model opens.

``external_web_access: false`` (Codex sends it) maps to Exa's ``maxAgeHours: -1``: cached content only,
never a live crawl. ``filters.allowed_domains`` maps to ``includeDomains``. Any failure (network, HTTP
status, a per-URL error status, a body that is not the documented JSON) is a ``BackendError`` whose
message the model reads.
"""

from __future__ import annotations

from typing import Any

import httpx

from ._backend import BackendError, SearchBackend, SearchOptions
from ._page import Page, SearchHit, domain_of
from ._text import document_page

__all__ = ["DEFAULT_EXA_URL", "ExaBackend"]

DEFAULT_EXA_URL = "https://api.exa.ai"
TIMEOUT_SECONDS = 30.0
MAX_ERROR_CHARS = 300
SNIPPET_CHARS = 400


def _message(response: httpx.Response) -> str:
    """The error message of an Exa error body (``{"error": "…", "tag": …}``), else the body's start."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("error", "message"):
            if isinstance(body.get(key), str):
                return body[key][:MAX_ERROR_CHARS]
    return response.text[:MAX_ERROR_CHARS] or response.reason_phrase


class ExaBackend(SearchBackend):
    """Search and pages through Exa.

    Args:
        api_key: the Exa key.
        base_url: the API's root (tests point it at a local fake).
        timeout: seconds per request.
    """

    name = "exa"

    def __init__(self, api_key: str, *, base_url: str = DEFAULT_EXA_URL, timeout: float = TIMEOUT_SECONDS) -> None:
        if not api_key:
            raise ValueError("the exa search backend needs an API key")
        self._key = api_key
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"ExaBackend(base_url={self.base_url!r})"  # never the key

    def describe(self) -> str:
        return f"exa ({self.base_url})"

    async def _post(self, path: str, payload: dict[str, Any], what: str) -> dict[str, Any]:
        headers = {"x-api-key": self._key, "accept": "application/json"}
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.post(self.base_url + path, json=payload, headers=headers)
        except httpx.HTTPError as exc:
            raise BackendError(f"{what}: the search service is unreachable ({type(exc).__name__}: {exc})") from exc
        if response.status_code != 200:
            raise BackendError(f"{what}: the search service answered HTTP {response.status_code}: {_message(response)}")
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("results"), list):
            raise BackendError(f"{what}: the search service sent an unexpected answer")
        return body

    async def search(self, query: str, topn: int, options: SearchOptions) -> list[SearchHit]:
        contents: dict[str, Any] = {"highlights": {"numSentences": 3, "highlightsPerUrl": 1}}
        if not options.live:
            contents["maxAgeHours"] = -1
        payload: dict[str, Any] = {"query": query, "type": "auto", "numResults": topn, "contents": contents}
        if options.allowed_domains:
            payload["includeDomains"] = list(options.allowed_domains)
        body = await self._post("/search", payload, f"Error during search for `{query}`")
        hits = []
        for result in body["results"]:
            if not isinstance(result, dict) or not isinstance(result.get("url"), str):
                continue
            url = result["url"]
            highlights = result.get("highlights")
            if isinstance(highlights, list) and highlights:
                snippet = " ".join(h for h in highlights if isinstance(h, str))
            else:
                snippet = result.get("summary") or result.get("text") or ""
                snippet = snippet if isinstance(snippet, str) else ""
            title = result.get("title")
            hits.append(
                SearchHit(
                    url=url,
                    title=title if isinstance(title, str) and title.strip() else domain_of(url) or url,
                    snippet=snippet[:SNIPPET_CHARS],
                )
            )
        return hits[:topn]

    async def fetch(self, url: str, options: SearchOptions, *, view_source: bool = False) -> Page:
        what = f"Error fetching URL `{url}`"
        payload: dict[str, Any] = {"urls": [url], "text": {"includeHtmlTags": True} if view_source else True}
        if not options.live:
            payload["maxAgeHours"] = -1
        body = await self._post("/contents", payload, what)
        for status in body.get("statuses") or ():
            if isinstance(status, dict) and status.get("status") == "error":
                error = status.get("error") if isinstance(status.get("error"), dict) else {}
                tag, code = error.get("tag", "error"), error.get("httpStatusCode")
                raise BackendError(f"{what}: {tag}" + (f" (HTTP {code})" if code else ""))
        results = [r for r in body["results"] if isinstance(r, dict)]
        if not results:
            raise BackendError(f"{what}: no content returned")
        result = results[0]
        text = result.get("text") if isinstance(result.get("text"), str) else ""
        title = result.get("title") if isinstance(result.get("title"), str) else None
        # The URL asked for, not Exa's canonical one: it is the link the model followed and the one it cites.
        return document_page(
            url, text, "text" if view_source else "markdown", title=title, fallback_title=domain_of(url) or url
        )
