"""Fixtures: live servers for the api tests (see helpers.py for what a ``Live`` server is).

- ``serve(lines_or_engine, http=…, **config)`` starts a server and returns a ``Live`` (its ``base_url`` ends in
  ``/v1``). ``lines`` are replay-script lines (dicts, or strings taken as ``{"harmony": s}``), written to
  ``tmp_path`` and served through the ``replay:PATH`` engine spec; an engine spec string is used as the
  config's engine; an ``Engine`` instance is used as is. Servers stop when the test ends; starting one
  costs a few tens of milliseconds once the vocabulary is loaded.
- ``shared_server``: one module-wide server (echo engine) for tests that never reach an engine or don't
  care which it is (validation, routing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harmony_responses.engine import Engine
from harmony_responses.serve import Config, create_app

from .helpers import MODEL, Live, start_live, write_script

Serve = Callable[..., Live]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    started: list[Live] = []
    counter = iter(range(1000))

    def _serve(source: list[dict[str, Any] | str] | Engine | str, *, http: Any = "auto", **config: Any) -> Live:
        config.setdefault("models", (MODEL, "other-model"))
        config.setdefault("current_date", "2025-06-01")
        engine: Engine | None = None
        if isinstance(source, Engine):
            engine = source
        elif isinstance(source, str):
            config["engine"] = source
        else:
            config["engine"] = write_script(tmp_path / f"script-{next(counter)}.jsonl", source)
        live = start_live(create_app(Config(**config), engine=engine), http=http)
        started.append(live)
        return live

    yield _serve
    for live in started:
        live.stop()


@pytest.fixture(scope="module")
def shared_server() -> Iterator[Live]:
    live = start_live(create_app(Config(models=(MODEL, "other-model"), current_date="2025-06-01")))
    yield live
    live.stop()
