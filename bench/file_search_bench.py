"""What file_search costs: ingestion throughput (chunks/s, MB/s) and search latency p50/p99 at 10k and 100k chunks.

Run: ``python bench/file_search_bench.py`` (``--chunks 10000,100000``, ``--stores sqlite,postgresql,pgvector``);
PostgreSQL from ``HARMONY_TEST_POSTGRES_URL`` or ``scripts/postgres``, a fresh schema each run, and skipped (said
so) when neither gives one. ``pgvector``: hybrid retrieval (``--embeddings``) on the PostgreSQL with pgvector
(``HARMONY_TEST_PGVECTOR_URL``, or the pgserver wheel's binaries run by ``scripts/postgres pgvector``, skipped
saying why when it cannot start), its embeddings from the state tests' server (tests/state/embeddings_server.py:
48 dimensions of hashed words, answered in microseconds, so what is measured is the store's exact cosine scan
over every chunk's ``REAL[]`` cast to ``vector``, beside the full-text search, and one HTTP round trip a query).

For each store a server runs as a subprocess. Synthetic text — words made of syllables, drawn with Zipf
frequencies from a 20,000-word vocabulary (seeded, so every run ingests the same bytes) — goes up as ``.txt``
files of about 160 chunks each with the openai client, attached with ``file_batches`` under a static
strategy of 200-token chunks without overlap (so that 100k chunks is 20M tokens, not the 40M of ``auto``'s
800/400), until the vector store holds each size in turn. Ingestion is timed from the first batch's
creation to the last file's ``completed`` (extracting, tokenizing, chunking and writing chunks and the
full-text index; uploads are timed apart). At each size, QUERIES searches of 2–4 words (mid-frequency
words, as people search) run one at a time for 10 results, after WARMUP unmeasured ones.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import itertools
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

from _postgres import pgvector_url, postgres_url, run_sql
from engine_bench import spawn, stderr_of
from harmony_responses.tools.file_search import chunk_text
from server_bench import BIN, free_port

ROOT = Path(__file__).resolve().parents[1]
STRATEGY = {"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 0}}
WORDS_PER_FILE = 12_000  # about 160 chunks of 200 tokens (the syllable words are 2-3 tokens)
QUERIES = 300
WARMUP = 20
SYLLABLES = "ka to ri mu sen lo va pe di ro na el or an is qu th ch st ba".split()


def vocabulary(rng: random.Random) -> list[str]:
    words = {"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(30_000)}
    return sorted(words)[:20_000]


def synthetic_file(rng: random.Random, words: list[str], weights: list[float]) -> bytes:
    """One file's text: paragraphs of 120 words, drawn with the cumulative Zipf ``weights``."""
    paragraphs = (" ".join(rng.choices(words, cum_weights=weights, k=120)) + "." for _ in range(WORDS_PER_FILE // 120))
    return "\n\n".join(paragraphs).encode()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def serve(store: str, embeddings: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [str(BIN / "harmony-responses"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    if embeddings is not None:
        argv += ["--embeddings", embeddings]
    proc = spawn([*argv, "--store", store, "--log-level", "warning"], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {stderr_of(proc)}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.TransportError:
            time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("server did not become healthy")


def run_store(store: str, sizes: list[int], embeddings: Any = None) -> list[dict[str, float]]:
    """Ingest and search on ``store``; with ``embeddings`` (an ``EmbeddingsServer``), ranking hybrid."""
    rng = random.Random(27)
    words = vocabulary(rng)
    weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(words))))
    proc, base_url = serve(store, embeddings.url if embeddings is not None else None)
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
    results: list[dict[str, float]] = []
    try:
        vector_store = client.vector_stores.create(name="file-search-bench").id
        held = 0
        for size in sizes:
            texts: list[bytes] = []
            chunks = 0
            while held + chunks < size:
                text = synthetic_file(rng, words, weights)
                texts.append(text)
                chunks += len(chunk_text(text.decode(), STRATEGY))
            started = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                ids = list(
                    pool.map(
                        lambda t: client.files.create(file=("synthetic.txt", t, "text/plain"), purpose="assistants").id,
                        texts,
                    )
                )
            uploaded = time.monotonic() - started
            started = time.monotonic()
            batch_ids = [
                client.vector_stores.file_batches.create(
                    vector_store_id=vector_store, file_ids=ids[i : i + 500], chunking_strategy=STRATEGY
                ).id
                for i in range(0, len(ids), 500)
            ]
            for batch_id in batch_ids:
                while True:
                    batch = client.vector_stores.file_batches.retrieve(batch_id, vector_store_id=vector_store)
                    if batch.status != "in_progress":
                        break
                    time.sleep(0.2)
                if batch.file_counts.completed != batch.file_counts.total:
                    raise RuntimeError(f"ingestion: {batch.file_counts}")
            ingested = time.monotonic() - started
            held += chunks
            if embeddings is not None and len(embeddings.inputs()) < held:
                # A store without vectors embeds nothing: this would measure full text only.
                raise RuntimeError(f"{len(embeddings.inputs())} chunks embedded of {held}: vectors are off")
            megabytes = sum(map(len, texts)) / 1e6
            middle = words[200:5000]  # neither stop-word frequent nor seen once
            latencies = []
            for i in range(WARMUP + QUERIES):
                query = " ".join(rng.sample(middle, rng.randint(2, 4)))
                t0 = time.perf_counter()
                page = client.vector_stores.search(vector_store, query=query, max_num_results=10)
                elapsed = time.perf_counter() - t0
                if not page.data:
                    raise RuntimeError(f"no result for {query!r}")
                if i >= WARMUP:
                    latencies.append(elapsed * 1000)
            results.append(
                {
                    "chunks": held,
                    "added": chunks,
                    "mb": megabytes,
                    "upload_mb_s": megabytes / uploaded,
                    "chunks_s": chunks / ingested,
                    "mb_s": megabytes / ingested,
                    "p50": percentile(latencies, 0.5),
                    "p99": percentile(latencies, 0.99),
                }
            )
            row = results[-1]
            print(
                f"  {held:>7} chunks (+{chunks} in {len(texts)} files, {megabytes:.1f} MB): upload "
                f"{row['upload_mb_s']:.1f} MB/s; ingest {row['chunks_s']:.0f} chunks/s, {row['mb_s']:.2f} MB/s; "
                f"search p50 {row['p50']:.1f} ms, p99 {row['p99']:.1f} ms",
                flush=True,
            )
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)
    return results


def run_postgres(url: str, title: str, sizes: list[int], embeddings: Any = None) -> None:
    schema = f"bench_{secrets.token_hex(4)}"
    run_sql(url, f"CREATE SCHEMA {schema}")
    try:
        print(title, flush=True)
        run_store(f"{url}?search_path={schema}", sizes, embeddings)
    finally:
        run_sql(url, f"DROP SCHEMA {schema} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="10000,100000", help="store sizes, comma-separated (default: %(default)s)")
    parser.add_argument("--stores", default="sqlite,postgresql,pgvector", help="default: %(default)s")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.chunks.split(","))
    for kind in args.stores.split(","):
        if kind == "sqlite":
            with tempfile.TemporaryDirectory(prefix="file-search-bench-") as workdir:
                print(f"sqlite ({os.cpu_count()} cores):", flush=True)
                run_store(f"sqlite:{Path(workdir) / 'store.sqlite3'}", sizes)
        elif kind == "postgresql":
            try:
                url = postgres_url()
            except RuntimeError as exc:
                print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
                continue
            run_postgres(url, "postgresql:", sizes)
        elif kind == "pgvector":
            sys.path.insert(0, str(ROOT / "tests"))
            from state.embeddings_server import EmbeddingsServer

            with contextlib.ExitStack() as stack:
                try:
                    url = stack.enter_context(pgvector_url())
                except RuntimeError as exc:
                    print(f"pgvector skipped: {exc}", file=sys.stderr)
                    continue
                embeddings = EmbeddingsServer()
                stack.callback(embeddings.close)
                run_postgres(url, "postgresql with pgvector (hybrid, --embeddings):", sizes, embeddings)
        else:
            sys.exit(f"unknown store {kind!r}: sqlite, postgresql or pgvector")


if __name__ == "__main__":
    main()
