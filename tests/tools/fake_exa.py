"""A wire-faithful fake of Exa's search API on 127.0.0.1, for the online backend's tests.

Real HTTP (``http.server`` in a thread), the documented shapes (exa.ai/docs/reference): ``POST /search`` and
``POST /contents`` with the key in ``x-api-key`` and a JSON body; ``401 {"error": …, "tag": …}`` for a wrong
key; ``/contents`` answers 200 with a per-URL ``statuses`` entry, ``CRAWL_NOT_FOUND`` for an unknown URL.
Every request is recorded (path, headers, body) so tests can check what the backend sent. ``fail_with``
makes every request answer that HTTP status (a backend that is down or overloaded).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_KEY = "exa-test-key"


@dataclass
class FakePage:
    url: str
    title: str
    text: str  # Markdown, as Exa's contents endpoint returns it
    highlight: str


@dataclass
class FakeExa:
    pages: list[FakePage]
    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_with: int | None = None
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeExa:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if fake.fail_with is not None:
                    self._answer(fake.fail_with, {"error": "Service temporarily unavailable", "tag": "INTERNAL"})
                    return
                if self.headers.get("x-api-key") != API_KEY:
                    self._answer(401, {"requestId": "r1", "error": "Invalid API key", "tag": "INVALID_API_KEY"})
                    return
                if self.path == "/search":
                    self._answer(200, fake.search(body))
                elif self.path == "/contents":
                    self._answer(200, fake.contents(body))
                else:
                    self._answer(404, {"error": f"Not found: {self.path}", "tag": "NOT_FOUND"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def search(self, body: dict[str, Any]) -> dict[str, Any]:
        words = set(body["query"].lower().split())
        hits = [p for p in self.pages if words & set(f"{p.title} {p.text}".lower().split())]
        domains = body.get("includeDomains")
        if domains:
            hits = [p for p in hits if any(d in p.url for d in domains)]
        results = [
            {
                "id": p.url,
                "url": p.url,
                "title": p.title,
                "publishedDate": "2025-01-01T00:00:00.000Z",
                "author": None,
                "highlights": [p.highlight],
                "highlightScores": [0.5],
            }
            for p in hits[: body.get("numResults", 10)]
        ]
        return {"requestId": "r2", "resolvedSearchType": "neural", "results": results, "costDollars": {"total": 0.005}}

    def contents(self, body: dict[str, Any]) -> dict[str, Any]:
        results, statuses = [], []
        for url in body["urls"]:
            page = next((p for p in self.pages if p.url == url), None)
            if page is None:
                error = {"tag": "CRAWL_NOT_FOUND", "httpStatusCode": 404}
                statuses.append({"id": url, "status": "error", "error": error})
                continue
            results.append({"id": url, "url": url, "title": page.title, "text": page.text})
            statuses.append({"id": url, "status": "success"})
        return {"requestId": "r3", "results": results, "statuses": statuses}


PAGES = [
    FakePage(
        url="https://www.example.org/tides",
        title="Tides explained",
        text="# Tides\n\nTides are caused by the Moon's gravity.\nSpring tides happen at new and full moon.\n\n"
        "See [the Moon](https://moon.example.net/facts).",
        highlight="Tides are caused by the Moon's gravity.",
    ),
    FakePage(
        url="https://moon.example.net/facts",
        title="Moon facts",
        text="The Moon is 384,400 km from Earth.",
        highlight="The Moon is 384,400 km from Earth.",
    ),
]
