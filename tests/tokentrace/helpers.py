"""What the trace tests share: a scripted model that searches (after a malformed header) and answers."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.helpers import MODEL, Live, start_live, write_script
from harmony_responses.serve import Config, create_app

# "I should search<|channel|>…": text before the header's channel, which the translator keeps as reasoning
# (rule text_before_channel); then a browser search (a built-in tool call) and, after its result, the answer.
MALFORMED_SEARCH = (
    'I should search first<|channel|>analysis to=browser.search code<|message|>{"query": "Etna volcano height"}<|call|>'
)
ANSWER = "<|channel|>final<|message|>Etna is about 3,357 m tall.<|return|>"
WEB_SEARCH = {"type": "web_search"}
ETNA = "# Mount Etna\n\nEtna stands about 3,357 metres tall.\n"


@pytest.fixture
def docs() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="kb", dir="/tmp"))
    (root / "etna.md").write_text(ETNA)
    yield root
    shutil.rmtree(root)


class Servers:
    """Starts servers for a test (``start``) and stops them at its end."""

    def __init__(self, tmp_path: Path) -> None:
        self._tmp = tmp_path
        self._started: list[Live] = []

    def start(self, lines: list[str | dict[str, Any]] | None = None, **config: Any) -> Live:
        config.setdefault("models", (MODEL,))
        config.setdefault("current_date", "2025-06-01")
        config.setdefault("store", f"sqlite:{self._tmp / 'responses.sqlite3'}")
        if lines is not None:
            config["engine"] = write_script(self._tmp / f"script-{len(self._started)}.jsonl", list(lines))
        live = start_live(create_app(Config(**config)))
        self._started.append(live)
        return live

    def stop(self) -> None:
        for live in self._started:
            live.stop()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    started = Servers(tmp_path)
    yield started
    started.stop()


def trace_json(live: Live, response_id: str, **headers: str) -> httpx.Response:
    return httpx.get(f"{live.base_url}/responses/{response_id}/trace?format=json", headers=headers, timeout=20)
