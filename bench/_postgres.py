"""The PostgreSQL the benches measure on: ``HARMONY_TEST_POSTGRES_URL``, else the one ``scripts/postgres``
starts (as the state tests find it); the one with pgvector (``pgvector_url``: ``HARMONY_TEST_PGVECTOR_URL``,
else a cluster of the pgserver wheel's binaries, as tests/state/conftest.py starts it); and SQL run on either
outside any bench's own connections."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def postgres_url() -> str:
    """The server's URL; RuntimeError (saying why) when ``scripts/postgres`` cannot start one."""
    url = os.environ.get("HARMONY_TEST_POSTGRES_URL")
    if url:
        return url
    result = subprocess.run([str(ROOT / "scripts" / "postgres")], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"scripts/postgres failed: {result.stderr.strip()[-300:]}")
    return result.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def pgvector_url() -> Iterator[str]:
    """A PostgreSQL with pgvector, stopped (when started here) at the end; RuntimeError (saying why) when
    ``scripts/postgres pgvector`` cannot start one (pgserver not installed: no wheel for this Python)."""
    url = os.environ.get("HARMONY_TEST_PGVECTOR_URL")
    if url:
        yield url
        return
    where = tempfile.mkdtemp(prefix="harmony-responses-pgvector-")
    env = {**os.environ, "HARMONY_TEST_PG_DIR": where, "PYTHON": sys.executable}
    script = str(ROOT / "scripts" / "postgres")
    try:
        result = subprocess.run([script, "pgvector"], capture_output=True, text=True, timeout=600, env=env)
        if result.returncode != 0:
            raise RuntimeError(f"scripts/postgres pgvector failed: {result.stderr.strip()[-300:]}")
        yield result.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([script, "pgvector", "stop"], capture_output=True, timeout=120, env=env)
        shutil.rmtree(where, ignore_errors=True)


def run_sql(url: str, sql: str) -> None:
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())
