"""Hybrid retrieval (``--embeddings``) through the real server and the ``openai`` client, with a real HTTP
embeddings server (``embeddings_server.py``: concept vectors, so a paraphrase sharing no word is near its text).

On SQLite the vectors are kept and compared by sqlite-vec; on PostgreSQL by pgvector when the database has it,
and otherwise the server says at start-up that it ranks by full text only, and does (no embedding asked for).
The tests that rank by vectors run on the three (``EVERY_STORE``): SQLite, the suite's PostgreSQL (Debian's,
without pgvector: the fallback) and the one with pgvector (``store_spec`` ``"pgvector"``, see conftest.py).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import logging
import shlex
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import openai
import pytest

from api.helpers import ANSWER, MODEL, openai_client
from guide import ROOT, blocks
from harmony_responses.serve.cli import add_serve_arguments, config_from_args
from harmony_responses.store import _sqlite_vec, store_from_spec, vector_stores_of
from harmony_responses.store._vector_stores import VectorStores
from harmony_responses.tools.file_search import Embeddings, _embeddings

from .conftest import Serve
from .embeddings_server import DIMENSIONS, EmbeddingsServer
from .embeddings_server import MODEL as EMBEDDING_MODEL

DOCS = {
    "car.txt": b"Changing the oil of a car every 5000 miles keeps its motor healthy for years.",
    "otters.md": b"# Otters\n\nSea otters hold hands while they sleep so that they do not drift apart.",
    "volcano.txt": b"Mount Etna is an active stratovolcano on the east coast of Sicily.",
}
PARAPHRASE = "automobile lubricant"  # no word of car.txt (nor of its stems): only its vector is near
EVERY_STORE = pytest.mark.parametrize("store_spec", ["sqlite", "postgresql", "pgvector"], indirect=True)
WITH_VECTORS = pytest.mark.parametrize("store_spec", ["sqlite", "pgvector"], indirect=True)
T = TypeVar("T")


@pytest.fixture
def embeddings() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer()
    yield server
    server.close()


def _upload(client: openai.OpenAI, docs: dict[str, bytes]) -> tuple[str, dict[str, str]]:
    store = client.vector_stores.create(name="notes")
    ids = {}
    for name, data in docs.items():
        done = client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=(name, data), poll_interval_ms=20
        )
        assert done.status == "completed", (name, done.last_error)
        ids[name] = done.id
    return store.id, ids


def _search(client: openai.OpenAI, store_id: str, query: str | list[str], **options: Any) -> list[Any]:
    return list(client.vector_stores.search(store_id, query=query, **options))


def _vectors(live: Any) -> str | None:
    return live.app.state.server.stored.store.vectors


def _full_text_only(live: Any, request: pytest.FixtureRequest) -> bool:
    """Whether a server started with ``--embeddings`` got no vectors: only ever on the PostgreSQL without
    pgvector (the one with it, and SQLite with sqlite-vec, must have them)."""
    if _vectors(live) is not None:
        return False
    assert request.node.callspec.params["store_spec"] == "postgresql", live.app.state.server.stored.store.no_vectors
    return True


def _read(store_spec: str, read: Callable[[VectorStores], Awaitable[T]]) -> T:
    """``read`` of the vector stores, through a store of its own on the same database."""

    async def run() -> T:
        store = store_from_spec(store_spec)
        await store.open()
        try:
            return await read(vector_stores_of(store))
        finally:
            await store.aclose()

    return asyncio.run(run())


def _counts(store_spec: str, store_id: str) -> dict[int, int]:
    """The store's vectors by dimension."""
    return _read(store_spec, lambda stores: stores.vector_counts(store_id))


def _every_vector(store_spec: str) -> int:
    """How many vectors the database keeps, of any store or none (a chunk gone must take its vector)."""

    async def count(stores: VectorStores) -> int:
        return int((await stores.db.fetch("SELECT count(*) FROM chunk_vectors"))[0][0])

    return _read(store_spec, count)


@EVERY_STORE
def test_a_paraphrase_is_found_by_its_vector(
    serve: Serve,
    embeddings: EmbeddingsServer,
    caplog: pytest.LogCaptureFixture,
    store_spec: str,
    request: pytest.FixtureRequest,
) -> None:
    with caplog.at_level(logging.INFO, logger="harmony_responses.run"):
        live = serve([ANSWER], embeddings=embeddings.url)
    said = [r.getMessage() for r in caplog.records if "file_search:" in r.getMessage()]
    client = openai_client(live)
    store_id, ids = _upload(client, DOCS)
    if _full_text_only(live, request):
        # PostgreSQL without pgvector: said once at start-up, and full text only (nothing embedded).
        assert len(said) == 1 and "full-text retrieval only" in said[0] and "pgvector" in said[0], said
        assert _search(client, store_id, PARAPHRASE) == []
        assert [r.file_id for r in _search(client, store_id, "engine oil")] == [ids["car.txt"]]
        assert embeddings.requests == []
        return
    assert len(said) == 1 and "hybrid retrieval" in said[0] and embeddings.url in said[0], said
    assert ("sqlite-vec" if store_spec.startswith("sqlite") else "pgvector") in said[0]
    # Ingestion embedded each file's chunk, with the model the server lists; the query was embedded alone.
    ingested = embeddings.inputs()
    assert sorted(ingested) == sorted(d.decode() for d in DOCS.values())
    assert {body.get("model") for body in embeddings.requests} == {EMBEDDING_MODEL}
    found = _search(client, store_id, PARAPHRASE)
    assert embeddings.requests[-1]["input"] == [PARAPHRASE]
    assert found[0].file_id == ids["car.txt"] and "oil" in found[0].content[0].text
    assert 0 < found[0].score <= 1
    # Its vector's rank alone (first of the vector ranking, nowhere in the full-text one): half the best score.
    assert found[0].score == pytest.approx(0.5, abs=1e-6)
    # Full text alone (the embedding weighed 0) does not find it; the embedding alone does, first.
    text_only = {"hybrid_search": {"embedding_weight": 0, "text_weight": 1}}
    assert _search(client, store_id, PARAPHRASE, extra_body={"ranking_options": text_only}) == []
    vector_only = {"hybrid_search": {"embedding_weight": 1, "text_weight": 0}}
    alone = _search(client, store_id, PARAPHRASE, extra_body={"ranking_options": vector_only})
    assert alone[0].file_id == ids["car.txt"] and alone[0].score == pytest.approx(1.0)
    # A chunk first by both rankings scores 1; score_threshold keeps only such.
    both = _search(client, store_id, "otters", ranking_options={"score_threshold": 0.6})
    assert [r.file_id for r in both] == [ids["otters.md"]] and both[0].score == pytest.approx(1.0)
    # Every chunk has its vector, of the server's dimension.
    assert _counts(store_spec, store_id) == {DIMENSIONS: 3}
    # A file detached takes its vectors with it.
    client.vector_stores.files.delete(ids["car.txt"], vector_store_id=store_id)
    assert _counts(store_spec, store_id) == {DIMENSIONS: 2}
    assert [r.file_id for r in _search(client, store_id, PARAPHRASE)] != [ids["car.txt"]]


@pytest.mark.parametrize("store_spec", ["sqlite"], indirect=True)
def test_an_embedding_server_down_fails_the_file_and_searches_by_text(
    serve: Serve, embeddings: EmbeddingsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_embeddings, "RETRY_DELAYS", (0.01,))
    live = serve([ANSWER], embeddings=embeddings.url)
    client = openai_client(live)
    store_id, ids = _upload(client, {"otters.md": DOCS["otters.md"]})
    embeddings.fail = True
    before = len(embeddings.requests)
    failed = client.vector_stores.files.upload_and_poll(
        vector_store_id=store_id, file=("car.txt", DOCS["car.txt"]), poll_interval_ms=20
    )
    assert failed.status == "failed" and failed.last_error is not None
    assert failed.last_error.code == "server_error"
    assert "embedding server failed" in failed.last_error.message and "500" in failed.last_error.message
    assert len(embeddings.requests) == before + 2  # tried, then once again after RETRY_DELAYS[0]
    # A search while it is down ranks by full text (a 200, not a 5xx).
    found = _search(client, store_id, "otters sleep")
    assert [r.file_id for r in found] == [ids["otters.md"]]
    assert embeddings.requests[-1]["input"] == ["otters sleep"]
    # Back up: the file attached again is ingested with its vectors.
    embeddings.fail = False
    again = client.vector_stores.files.create_and_poll(vector_store_id=store_id, file_id=failed.id, poll_interval_ms=20)
    assert again.status == "completed"
    assert _search(client, store_id, PARAPHRASE)[0].file_id == failed.id


@pytest.mark.parametrize("store_spec", ["sqlite"], indirect=True)
def test_hybrid_weights_are_checked(serve: Serve, embeddings: EmbeddingsServer) -> None:
    live = serve([ANSWER], embeddings=embeddings.url)
    client = openai_client(live)
    store_id, _ = _upload(client, {"otters.md": DOCS["otters.md"]})
    for weights, param in (
        ({"embedding_weight": -1, "text_weight": 1}, "ranking_options.hybrid_search.embedding_weight"),
        ({"embedding_weight": 0, "text_weight": 0}, "ranking_options.hybrid_search"),
        ({"embedding_weight": 1}, "ranking_options.hybrid_search.text_weight"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            _search(client, store_id, "otters", extra_body={"ranking_options": {"hybrid_search": weights}})
        assert caught.value.body["param"] == param  # type: ignore[index]
    tool = {
        "type": "file_search",
        "vector_store_ids": [store_id],
        "ranking_options": {"hybrid_search": {"embedding_weight": "a lot", "text_weight": 1}},
    }
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="otters?", tools=[tool])  # type: ignore[list-item]
    assert caught.value.body["param"] == "tools[0].ranking_options.hybrid_search.embedding_weight"  # type: ignore[index]


def test_without_embeddings_nothing_is_embedded_or_vectored(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    store_id, ids = _upload(client, DOCS)
    assert _vectors(live) is None
    assert _search(client, store_id, PARAPHRASE) == []
    assert [r.file_id for r in _search(client, store_id, "otters")] == [ids["otters.md"]]


def test_the_guide_s_embedding_server_recipe_is_what_the_tier_runs() -> None:
    [recipe] = [text for _, text, mark in blocks("tools/file-search.md") if mark == "embeddings_server"]
    engine_line, ours_line = recipe.strip().splitlines()
    engine, ours = shlex.split(engine_line), shlex.split(ours_line)
    assert engine[0] == "llama-server" and ours[0] == "scripts/serve"
    # Every flag of the llama-server command is one the real-engine tier runs it with (its conftest's or its
    # embedding test's), with the same value.
    tier = (ROOT / "tests/real_engines/llamacpp/conftest.py").read_text()
    test = (ROOT / "tests/real_engines/llamacpp/test_embeddings.py").read_text()
    assert '"--embedding", "--pooling", "mean"' in test
    flags = {word for word in engine if word.startswith("-")}
    assert all(f'"{flag}"' in tier + test for flag in flags), flags
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    config = config_from_args(parser.parse_args(ours[1:]))
    port = engine[engine.index("--port") + 1]
    assert config.embeddings == f"http://127.0.0.1:{port}" and config.embeddings_model is None
    assert Embeddings(config.embeddings).url == f"http://127.0.0.1:{port}/v1/embeddings"


@EVERY_STORE
def test_a_response_s_file_search_ranks_hybrid_with_the_tool_s_weights(
    serve: Serve, embeddings: EmbeddingsServer, request: pytest.FixtureRequest
) -> None:
    search = (
        "<|channel|>analysis<|message|>Search.<|end|><|start|>assistant<|channel|>analysis to=file_search.msearch "
        f'code<|message|>{{"queries": ["{PARAPHRASE}"]}}<|call|>'
    )
    answer = "<|channel|>final<|message|>Every 5000 miles【0:0†car.txt】.<|return|>"
    live = serve([search, answer], embeddings=embeddings.url)
    client = openai_client(live)
    store_id, ids = _upload(client, DOCS)
    vectors_only = {"hybrid_search": {"embedding_weight": 1, "text_weight": 0}}
    response = client.responses.create(
        model=MODEL,
        input="How often should the automobile get new lubricant?",
        tools=[{"type": "file_search", "vector_store_ids": [store_id], "ranking_options": vectors_only}],
        include=["file_search_call.results"],
    )
    assert response.status == "completed", response.error
    call = next(item for item in response.output if item.type == "file_search_call")
    assert call.queries == [PARAPHRASE] and call.results is not None
    if _full_text_only(live, request):  # full text, which finds nothing here
        assert call.results == []
        return
    assert call.results[0].file_id == ids["car.txt"] and call.results[0].score == pytest.approx(1.0)
    message = response.output[-1]
    assert message.type == "message"
    assert [(a.type, a.file_id) for a in message.content[0].annotations] == [("file_citation", ids["car.txt"])]


@WITH_VECTORS
def test_a_store_from_before_vectors_opens_with_embeddings_and_fills_them_in(
    serve: Serve, embeddings: EmbeddingsServer, store_spec: str
) -> None:
    # A store as schema version 8 left it (no chunk_vectors), its file ingested without embeddings.
    before = serve([ANSWER])
    client = openai_client(before)
    store_id, ids = _upload(client, {"car.txt": DOCS["car.txt"]})
    before.stop()
    if store_spec.startswith("sqlite"):
        with sqlite3.connect(store_spec.partition(":")[2]) as conn:
            conn.execute("DROP TRIGGER chunk_vectors_removed")
            conn.execute("DROP TABLE chunk_vectors")
            conn.execute("DELETE FROM schema_migrations WHERE version = 9")
    else:
        undo = [("DROP TABLE chunk_vectors", ()), ("DELETE FROM schema_migrations WHERE version = 9", ())]
        _read(store_spec, lambda stores: stores.db.transaction(undo))
    after = serve([ANSWER], embeddings=embeddings.url)
    client = openai_client(after)
    assert _vectors(after) is not None
    # The old file is found by its words meanwhile; its chunk gets its vector in the background
    # (run/backfill.py), after which a paraphrase finds it too.
    assert [r.file_id for r in _search(client, store_id, "car oil")] == [ids["car.txt"]]
    deadline = time.monotonic() + 30
    while _counts(store_spec, store_id) != {DIMENSIONS: 1}:
        assert time.monotonic() < deadline, "the old chunk got no vector"
        time.sleep(0.05)
    assert DOCS["car.txt"].decode() in embeddings.inputs()
    assert [r.file_id for r in _search(client, store_id, PARAPHRASE)] == [ids["car.txt"]]
    done = client.vector_stores.files.upload_and_poll(
        vector_store_id=store_id, file=("car2.txt", DOCS["car.txt"]), poll_interval_ms=20
    )
    assert done.status == "completed"
    assert {r.file_id for r in _search(client, store_id, PARAPHRASE)} == {ids["car.txt"], done.id}
    assert _counts(store_spec, store_id) == {DIMENSIONS: 2}
    # Nothing is embedded twice: the old chunk once (backfilled), the new once (ingested), and the queries.
    chunk = DOCS["car.txt"].decode()
    assert embeddings.inputs().count(chunk) == 2


@pytest.mark.parametrize("store_spec", ["sqlite"], indirect=True)
def test_the_embedding_server_s_key_is_sent_as_a_bearer_token(
    serve: Serve, embeddings: EmbeddingsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARMONY_RESPONSES_EMBEDDINGS_API_KEY", "emb-secret")
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    config = config_from_args(parser.parse_args(["--embeddings", embeddings.url, "--embeddings-model", "e5"]))
    assert (config.embeddings, config.embeddings_model, config.embeddings_api_key) == (
        embeddings.url,
        "e5",
        "emb-secret",
    )
    assert "emb-secret" not in repr(config)
    live = serve([ANSWER], embeddings=embeddings.url, embeddings_model="e5", embeddings_api_key="emb-secret")
    _upload(openai_client(live), {"otters.md": DOCS["otters.md"]})
    assert embeddings.authorizations == ["Bearer emb-secret"]
    assert [body["model"] for body in embeddings.requests] == ["e5"]


@pytest.mark.parametrize("store_spec", ["sqlite"], indirect=True)
def test_sqlite_without_sqlite_vec_says_so_and_ranks_by_full_text(
    serve: Serve, embeddings: EmbeddingsServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "sqlite_vec", None)  # the package not installed: importing it fails
    monkeypatch.setattr(_sqlite_vec, "_found", None)
    with caplog.at_level(logging.INFO, logger="harmony_responses.run"):
        live = serve([ANSWER], embeddings=embeddings.url)
    said = [r.getMessage() for r in caplog.records if "file_search:" in r.getMessage()]
    assert len(said) == 1 and "full-text retrieval only" in said[0] and "sqlite-vec package is not installed" in said[0]
    client = openai_client(live)
    store_id, ids = _upload(client, DOCS)
    assert _search(client, store_id, PARAPHRASE) == []
    assert [r.file_id for r in _search(client, store_id, "otters")] == [ids["otters.md"]]
    assert embeddings.requests == []


@EVERY_STORE
def test_files_ingested_before_embeddings_get_their_vectors_in_the_background(
    serve: Serve, embeddings: EmbeddingsServer, store_spec: str, request: pytest.FixtureRequest
) -> None:
    before = serve([ANSWER])
    store_id, ids = _upload(openai_client(before), DOCS)
    before.stop()
    after = serve([ANSWER], embeddings=embeddings.url)
    client = openai_client(after)
    if _full_text_only(after, request):  # nothing to fill in
        assert embeddings.requests == []
        return
    deadline = time.monotonic() + 30
    while _counts(store_spec, store_id) != {DIMENSIONS: 3}:
        assert time.monotonic() < deadline, "the chunks got no vectors"
        time.sleep(0.05)
    assert sorted(embeddings.inputs()) == sorted(d.decode() for d in DOCS.values())
    assert _search(client, store_id, PARAPHRASE)[0].file_id == ids["car.txt"]


@pytest.mark.parametrize("store_spec", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"data": []}, "answered 0 embeddings for 1 inputs"),
        ({"data": [{"index": 0, "embedding": []}]}, "no single dimension"),
        ({"data": [{"index": 0, "embedding": ["x"]}]}, "answered no embeddings"),
        ({"object": "list"}, "answered no embeddings"),
    ],
)
def test_an_embedding_server_answering_no_vectors_fails_the_file(
    serve: Serve,
    embeddings: EmbeddingsServer,
    monkeypatch: pytest.MonkeyPatch,
    answer: dict[str, Any],
    said: str,
) -> None:
    monkeypatch.setattr(_embeddings, "RETRY_DELAYS", ())
    live = serve([ANSWER], embeddings=embeddings.url)
    client = openai_client(live)
    store = client.vector_stores.create(name="notes")
    embeddings.answer = answer
    done = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("otters.md", DOCS["otters.md"]), poll_interval_ms=20
    )
    assert done.status == "failed" and done.last_error is not None and done.last_error.code == "server_error"
    assert said in done.last_error.message, done.last_error.message


@WITH_VECTORS
def test_what_deletes_a_chunk_deletes_its_vector(serve: Serve, embeddings: EmbeddingsServer, store_spec: str) -> None:
    live = serve([ANSWER], embeddings=embeddings.url)
    client = openai_client(live)
    store_id, ids = _upload(client, DOCS)
    other_id, _ = _upload(client, {"otters.md": DOCS["otters.md"]})
    assert _every_vector(store_spec) == 4
    # The file deleted (from every store it is in), then a store deleted: their vectors go with their chunks.
    client.files.delete(ids["car.txt"])
    assert _every_vector(store_spec) == 3
    assert [r.file_id for r in _search(client, store_id, PARAPHRASE)] != [ids["car.txt"]]
    client.vector_stores.delete(store_id)
    deadline = time.monotonic() + 30  # a store's chunks may go with the maintenance's purge
    while _every_vector(store_spec) != 1:
        assert time.monotonic() < deadline, f"{_every_vector(store_spec)} vectors left of the deleted store's 2"
        time.sleep(0.05)
    assert [r.file_id for r in _search(client, other_id, "otters sleeping")]
    live.stop()
    # --retention: the files and stores it deletes take their vectors too.
    short = serve([ANSWER], embeddings=embeddings.url, retention=4.0)
    _upload(openai_client(short), {"volcano.txt": DOCS["volcano.txt"]})
    assert _every_vector(store_spec) == 2
    deadline = time.monotonic() + 60  # a bound on a wait for the purge, not a timing assertion
    while _every_vector(store_spec) != 0:
        assert time.monotonic() < deadline, f"retention left {_every_vector(store_spec)} vectors"
        time.sleep(0.1)


@pytest.mark.parametrize("store_spec", ["pgvector"], indirect=True)
def test_two_gateways_creating_pgvector_together_both_rank_by_it(
    serve: Serve, embeddings: EmbeddingsServer, store_spec: str
) -> None:
    import asyncpg

    # Another session's CREATE EXTENSION, not yet committed, holds both gateways' own (each of which runs its
    # migrations first): when it commits, both find theirs refused as a duplicate, and must find it made.
    loop = asyncio.new_event_loop()
    holder = loop.run_until_complete(asyncpg.connect(store_spec))
    watcher = loop.run_until_complete(asyncpg.connect(store_spec))
    try:
        held = holder.transaction()
        loop.run_until_complete(held.start())
        loop.run_until_complete(holder.execute("CREATE EXTENSION vector"))
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            starting = [pool.submit(serve, [ANSWER], embeddings=embeddings.url) for _ in range(2)]
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query ILIKE 'CREATE EXTENSION%'"
            )
            deadline = time.monotonic() + 30
            while loop.run_until_complete(watcher.fetchval(waiting)) != 2:
                assert time.monotonic() < deadline, "the gateways never waited on the extension"
                assert not any(f.done() for f in starting), [f.exception() for f in starting if f.done()]
                time.sleep(0.02)
            loop.run_until_complete(held.commit())
            first, second = (f.result(timeout=60) for f in starting)
    finally:
        for conn in (holder, watcher):
            loop.run_until_complete(conn.close())
        loop.close()
    assert _vectors(first) is not None and _vectors(first) == _vectors(second)
    assert _vectors(first).startswith("pgvector")  # type: ignore[union-attr]
    # One database: what one ingested, the other finds by its vector.
    store_id, ids = _upload(openai_client(first), DOCS)
    assert _search(openai_client(second), store_id, PARAPHRASE)[0].file_id == ids["car.txt"]


@WITH_VECTORS
def test_a_vector_of_zeros_is_near_nothing(serve: Serve, embeddings: EmbeddingsServer) -> None:
    # The embeddings server's vector of a text with no word is all zeros: no direction, so no cosine distance.
    live = serve([ANSWER], embeddings=embeddings.url)
    client = openai_client(live)
    store_id, ids = _upload(client, {**DOCS, "marks.txt": b"?! -- ... ?!"})
    assert _search(client, store_id, "?!?") == []  # a 200, not a 500
    assert embeddings.requests[-1]["input"] == ["?!?"]
    # The chunk without a direction is near no query: the paraphrase still finds its file first, by its vector.
    vector_only = {"hybrid_search": {"embedding_weight": 1, "text_weight": 0}}
    found = _search(client, store_id, PARAPHRASE, extra_body={"ranking_options": vector_only})
    assert found[0].file_id == ids["car.txt"] and ids["marks.txt"] not in {r.file_id for r in found}
