"""Fixtures for the state tests: every test runs against SQLite and against a real PostgreSQL.

PostgreSQL comes from ``scripts/postgres`` (a private cluster on 127.0.0.1, installed and started by the
project's own setup), or from ``HARMONY_TEST_POSTGRES_URL`` when ``scripts/test`` has started it already.
Each test gets its own schema (``?search_path=``), so tests never see each other's rows.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from api.helpers import MODEL, Live, start_live, write_script
from harmony_responses.engine import Engine
from harmony_responses.serve import Config, create_app

ROOT = Path(__file__).resolve().parents[2]
Serve = Callable[..., Live]


@pytest.fixture(scope="session")
def postgres_url() -> str:
    url = os.environ.get("HARMONY_TEST_POSTGRES_URL")
    if url:
        return url
    result = subprocess.run([str(ROOT / "scripts" / "postgres")], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        pytest.fail(f"scripts/postgres could not start PostgreSQL:\n{result.stderr}")
    return result.stdout.strip().splitlines()[-1]


async def _schema(url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store: a SQLite file, or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'responses.sqlite3'}"
        return
    url = request.getfixturevalue("postgres_url")
    schema = f"t_{secrets.token_hex(6)}"
    asyncio.run(_schema(url, f"CREATE SCHEMA {schema}"))
    yield f"{url}?search_path={schema}"
    asyncio.run(_schema(url, f"DROP SCHEMA {schema} CASCADE"))


@pytest.fixture
def serve(store_spec: str, tmp_path: Path) -> Iterator[Serve]:
    """``serve(lines_or_engine, **config)``: a live server on the test's store (see tests/api/conftest.py)."""
    started: list[Live] = []
    counter = iter(range(1000))

    def _serve(source: list[dict[str, Any] | str] | Engine, **config: Any) -> Live:
        config.setdefault("models", (MODEL,))
        config.setdefault("current_date", "2025-06-01")
        config.setdefault("store", store_spec)
        engine: Engine | None = None
        if isinstance(source, Engine):
            engine = source
        else:
            config["engine"] = write_script(tmp_path / f"script-{next(counter)}.jsonl", source)
        live = start_live(create_app(Config(**config), engine=engine))
        started.append(live)
        return live

    yield _serve
    for live in started:
        live.stop()
