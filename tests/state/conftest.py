"""Fixtures for the state tests: every test runs against SQLite and against a real PostgreSQL.

PostgreSQL comes from ``scripts/postgres`` (a private cluster on 127.0.0.1, installed and started by the
project's own setup), or from ``HARMONY_TEST_POSTGRES_URL`` when ``scripts/test`` has started it already.
Each test gets its own schema (``?search_path=``), so tests never see each other's rows.

Debian's PostgreSQL has no pgvector (its apt has no package of it), so the tests that rank by vectors also
ask for ``store_spec`` ``"pgvector"``: a cluster of the PostgreSQL the ``pgserver`` wheel ships, which has it
(``scripts/postgres pgvector``, in a directory of its own, started once per session and stopped at its
end), or ``HARMONY_TEST_PGVECTOR_URL``. Only its binaries run, never pgserver's Python.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import tomllib
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


def _pgserver_requirement() -> str:
    """The test extra's pgserver requirement, its marker saying where the wheel exists."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    [requirement] = [r for r in extra if r.startswith("pgserver")]
    return requirement


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    url = os.environ.get("HARMONY_TEST_PGVECTOR_URL")
    if url:
        yield url
        return
    if importlib.util.find_spec("pgserver") is None:
        from packaging.requirements import Requirement

        requirement = Requirement(_pgserver_requirement())
        if requirement.marker is not None and not requirement.marker.evaluate():
            pytest.skip(
                f"no pgserver wheel (PostgreSQL with pgvector) for Python {sys.version_info.major}."
                f"{sys.version_info.minor} on {sys.platform}/{platform.machine()}: {requirement}"
            )
        pytest.fail("pgserver (the test extra's PostgreSQL with pgvector) is not installed: scripts/install")
    # Not under pytest's tmp_path: its parents are the runner's alone, and as root the cluster is the
    # 'postgres' user's (scripts/postgres).
    where = tempfile.mkdtemp(prefix="harmony-responses-pgvector-")
    env = {**os.environ, "HARMONY_TEST_PG_DIR": where, "PYTHON": sys.executable}
    script = str(ROOT / "scripts" / "postgres")
    try:
        result = subprocess.run([script, "pgvector"], capture_output=True, text=True, timeout=600, env=env)
        if result.returncode != 0:
            pytest.fail(f"scripts/postgres pgvector could not start PostgreSQL:\n{result.stderr}")
        yield result.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([script, "pgvector", "stop"], capture_output=True, timeout=120, env=env)
        shutil.rmtree(where, ignore_errors=True)


async def _schema(url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store: a SQLite file, or a PostgreSQL schema of its own (``"pgvector"``, asked for by
    name: on the PostgreSQL with pgvector)."""
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'responses.sqlite3'}"
        return
    url = request.getfixturevalue("pgvector_url" if request.param == "pgvector" else "postgres_url")
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
