"""Our real server in front of an engine fake, and the clients that drive it."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from openai import OpenAI

# The same scripted completions and tool as the api tests, so both suites speak of one model.
from api.helpers import ANSWER, CALL_WEATHER, MODEL, WEATHER_TOOL  # noqa: F401
from harmony_responses.engine import Engine
from harmony_responses.serve import Config, create_app

from .fakes import Fake, run_app, run_fake


@dataclass
class Stack:
    fake: Fake
    root: str  # our server

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def client(self, **kwargs: Any) -> OpenAI:
        return OpenAI(base_url=self.base_url, api_key="unused", max_retries=0, timeout=30, **kwargs)

    def post(self, body: dict[str, Any], timeout: float = 30) -> httpx.Response:
        return httpx.post(f"{self.base_url}/responses", json={"model": MODEL, **body}, timeout=timeout)


@contextlib.contextmanager
def stack(
    kind: str,
    fake: Fake,
    *,
    engine: Callable[[str], Engine] | None = None,
    sndbuf: int | None = None,
    http: Any = "auto",
    **config: Any,
) -> Iterator[Stack]:
    """The fake engine, and our server using it through the ``kind`` adapter (or ``engine(fake_url)``)."""
    config.setdefault("models", (MODEL,))
    config.setdefault("current_date", "2025-06-01")
    with run_fake(fake):
        instance = engine(fake.url) if engine is not None else None
        app = create_app(Config(engine=kind, engine_url=fake.url, **config), engine=instance)
        with run_app(app, sndbuf=sndbuf, http=http) as root:
            yield Stack(fake=fake, root=root)


def per_tool_stack(kind: str, fake: Fake, **config: Any) -> contextlib.AbstractContextManager[Stack]:
    """``stack`` under ``--constrain-recipients off``: each grammar tool is reached by its own trigger at its
    call's header, the shape the per-tool tests read. The default, ``declared``, holds one grammar from
    ``to=`` on (tests/engine/test_constrain_recipients.py)."""
    config.setdefault("constrain_recipients", "off")
    return stack(kind, fake, **config)


def dechunked(raw: bytes) -> bytes:
    """The body of a chunked HTTP/1.1 response, its framing checked."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    body = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert rest == b"\r\n", "bytes after the last chunk"
            return bytes(body)
        body += rest[:size]
        assert rest[size : size + 2] == b"\r\n", "a chunk not ended by CRLF"
        rest = rest[size + 2 :]


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    events = []
    for block in raw.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    return events


def without_ids(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events with what differs between runs (random ids, timestamps) replaced by stable placeholders."""
    text = json.dumps(events)
    names: dict[str, str] = {}

    def stable(match: re.Match[str]) -> str:
        return names.setdefault(match[0], f"{match[1]}_{len(names)}")

    text = re.sub(r"\b([a-z]+)_[0-9a-f]{48}\b", stable, text)
    text = re.sub(r'"(created_at|completed_at)": \d+', r'"\1": 0', text)
    return json.loads(text)
