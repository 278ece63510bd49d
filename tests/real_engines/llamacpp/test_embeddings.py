"""Hybrid retrieval (issue 27 item 3) with a real embedding server: ``llama-server --embedding`` serving
``/v1/embeddings`` from the tiny random gpt-oss GGUF, behind ``harmony-responses serve --embeddings``.

The random model's vectors mean nothing, so what is checked is the wiring: each chunk's stored vector is the
one llama.cpp gives for that chunk's text (of its dimension), the tokens llama.cpp embedded are those of the
chunks and then of the query (its ``/metrics``), the start-up line says hybrid with sqlite-vec, and a search
whose query is a chunk's own text finds that chunk first by its vector (distance 0) and with score 1 when both
rankings agree. One file is long enough for ``auto`` chunking's full 800-token chunks, which llama.cpp embeds
whole with the batch sizes the guide's recipe gives (its default 512-token batch refuses them). The chat
engine is ``echo``: only retrieval is under test.
"""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..gateway import EngineProcess, start_engine, start_gateway
from .conftest import llama_server_argv

WORDS = "river stone cloud lantern meadow copper whistle harbor orchard velvet".split()
DOCS = {
    "otters.md": b"Sea otters hold hands while they sleep.",
    "volcano.txt": b"Mount Etna is an active volcano on Sicily.",
    "long.txt": " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(1500)).encode(),
}
BATCH = 2048  # -b and -ub: a whole 800-token chunk (and more) in one batch, as pooled embeddings need


@pytest.fixture(scope="module")
def embedder(random_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    # gpt-oss has no pooling of its own: mean pooling makes one vector per input.
    argv = llama_server_argv(
        random_gguf, "--embedding", "--pooling", "mean", "-b", str(BATCH), "-ub", str(BATCH), "--metrics", ctx=BATCH
    )
    engine = start_engine(argv, timeout=120, log_dir=tmp_path_factory.mktemp("embed"), name="llama-embed")
    yield engine
    engine.stop()


def _metric(engine: EngineProcess, name: str) -> float:
    for line in httpx.get(engine.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(f"llamacpp:{name} "):
            return float(line.split()[1])
    raise AssertionError(f"llama-server reports no {name}")


def _embed(engine: EngineProcess, texts: list[str]) -> tuple[list[list[float]], int]:
    """llama.cpp's own vectors for ``texts`` and how many tokens it embedded."""
    answer = httpx.post(engine.url + "/v1/embeddings", json={"input": texts}, timeout=60).json()
    vectors = [d["embedding"] for d in sorted(answer["data"], key=lambda d: d["index"])]
    return vectors, int(answer["usage"]["prompt_tokens"])


def test_chunks_and_queries_are_embedded_by_llama_cpp(embedder: EngineProcess, tmp_path: Path) -> None:
    query = DOCS["otters.md"].decode()
    _, query_tokens = _embed(embedder, [query])
    database = tmp_path / "store.sqlite3"
    gateway = start_gateway("echo", args=["--embeddings", embedder.url, "--store", f"sqlite:{database}"])
    try:
        said = [line for line in gateway.output().splitlines() if "file_search:" in line]
        assert len(said) == 1 and "hybrid retrieval" in said[0] and "sqlite-vec" in said[0], said
        client = gateway.client()
        store = client.vector_stores.create(name="notes")
        before = _metric(embedder, "prompt_tokens_total")
        ids = {}
        for name, data in DOCS.items():
            done = client.vector_stores.files.upload_and_poll(
                vector_store_id=store.id, file=(name, data), poll_interval_ms=50
            )
            assert done.status == "completed", done.last_error
            ids[name] = done.id
        ingested_tokens = _metric(embedder, "prompt_tokens_total") - before

        before = _metric(embedder, "prompt_tokens_total")
        vector_only = {"hybrid_search": {"embedding_weight": 1, "text_weight": 0}}
        alone = list(client.vector_stores.search(store.id, query=query, extra_body={"ranking_options": vector_only}))
        assert _metric(embedder, "prompt_tokens_total") - before == query_tokens
        assert alone[0].file_id == ids["otters.md"] and alone[0].score == pytest.approx(1.0)
        assert set(ids.values()) <= {r.file_id for r in alone}  # every chunk has a vector to rank
        # Hybrid: the chunk both rankings put first scores 1.
        both = list(client.vector_stores.search(store.id, query=query))
        assert both[0].file_id == ids["otters.md"] and both[0].score == pytest.approx(1.0)
    finally:
        gateway.stop()

    with sqlite3.connect(database) as conn:
        rows = conn.execute(
            "SELECT c.file_id, c.text, v.dims, v.model, v.data FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id "
            "ORDER BY c.id"
        ).fetchall()
        (chunks,) = conn.execute("SELECT count(*) FROM chunks").fetchone()
    assert len(rows) == chunks
    long_chunks = [r for r in rows if r[0] == ids["long.txt"]]
    assert len(long_chunks) >= 3  # 1,500 tokens: 800-token chunks overlapping by 400
    # llama.cpp embedded the chunks' tokens, no more, and each stored vector is its own for its chunk's text.
    expected, chunk_tokens = _embed(embedder, [r[1] for r in rows])
    assert ingested_tokens == chunk_tokens
    dimension = len(expected[0])
    for (_, _, dims, model, data), want in zip(rows, expected, strict=True):
        assert dims == dimension and len(data) == 4 * dimension and model  # the name llama.cpp lists
        got = struct.unpack(f"<{dims}f", data)
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-3
