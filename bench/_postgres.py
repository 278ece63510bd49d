"""The PostgreSQL the benches measure on: ``HARMONY_TEST_POSTGRES_URL``, else the one ``scripts/postgres``
starts (as the state tests find it), and SQL run on it outside any bench's own connections."""

from __future__ import annotations

import asyncio
import os
import subprocess
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


def run_sql(url: str, sql: str) -> None:
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())
