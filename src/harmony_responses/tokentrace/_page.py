"""The trace page: one self-contained HTML file (its CSS, its script and the trace's JSON inlined).

The page's files ship in the package (``page/``: plain HTML, CSS and a small script, no build step) and
nothing in them loads from anywhere else, so the page works offline, saved to a file or served.
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources
from typing import Any

import orjson

__all__ = ["render_page"]


@cache
def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("page", name).read_text(encoding="utf-8")


def _script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``</`` or ``<!--`` can end or alter it."""
    text = orjson.dumps(value).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(trace: dict[str, Any]) -> str:
    """The HTML page showing ``trace`` (a ``Recorder.document()``)."""
    page = _asset("trace.html")
    title = html.escape(f"Trace of {trace.get('response_id', 'a response')}")
    return (
        page.replace("{{title}}", title)
        .replace("/*{{css}}*/", _asset("trace.css"))
        .replace("/*{{script}}*/", _asset("trace.js"))
        .replace("{{trace}}", _script_json(trace))
    )
