"""Vector stores with the ``openai`` client, on SQLite and a real PostgreSQL: ingestion (text, Markdown, HTML,
JSON, PDF, non-UTF-8 text, unsupported files), chunking strategies, batches, search with filters and
thresholds, a file deleted from every store, another key's stores and files invisible, and an ingestion a
dead process left behind resumed by the next one."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import zlib
from typing import Any

import openai
import pytest

from api.helpers import ANSWER, openai_client

from .conftest import Serve
from .pdf import assemble

KEYS = ("key-one-1234567890", "key-two-1234567890")

DOCS = {
    "otters.md": b"# Otters\n\nSea otters hold hands while they sleep so that they do not drift apart.",
    "volcano.txt": b"Mount Etna is an active stratovolcano on the east coast of Sicily.",
    "page.html": b"<html><head><style>.x{}</style></head><body><p>The aurora borealis glows green.</p>"
    b"<script>var hidden = 'penguin';</script></body></html>",
    "data.json": b'{"fact": "Honey never spoils; jars from Egyptian tombs were still edible."}',
}


def _pdf(text: str, *, bomb: bool = False) -> bytes:
    """A one-page PDF showing ``text`` (built here so that no binary fixture is checked in); ``bomb``: its page's
    content a Flate stream of ~100 KB that inflates to 200 MB."""
    stream = f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode()
    codec = b""
    if bomb:
        packer = zlib.compressobj(9)
        zeros = b" " * (1 << 20)
        stream = b"".join(packer.compress(zeros) for _ in range(200)) + packer.flush()
        codec = b" /Filter /FlateDecode"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + codec + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return assemble(objects)


def _store_with_docs(client: openai.OpenAI) -> tuple[Any, dict[str, str]]:
    store = client.vector_stores.create(name="facts", metadata={"team": "zoo"})
    ids = {}
    for name, data in DOCS.items():
        done = client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=(name, data), poll_interval_ms=20
        )
        assert done.status == "completed", (name, done.last_error)
        assert done.usage_bytes > 0
        ids[name] = done.id
    return store, ids


def test_ingest_and_search(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    store, ids = _store_with_docs(client)
    again = client.vector_stores.retrieve(store.id)
    assert again.status == "completed" and again.name == "facts" and again.metadata == {"team": "zoo"}
    assert again.file_counts.completed == 4 and again.file_counts.total == 4 and again.usage_bytes > 0
    found = client.vector_stores.search(store.id, query="why do otters hold hands?")
    results = list(found)
    assert results[0].file_id == ids["otters.md"] and results[0].filename == "otters.md"
    assert "hold hands" in results[0].content[0].text and 0 < results[0].score < 1
    # HTML loses its scripts; JSON and HTML are searchable text.
    assert [r.file_id for r in client.vector_stores.search(store.id, query="aurora")] == [ids["page.html"]]
    assert list(client.vector_stores.search(store.id, query="penguin")) == []
    assert [r.file_id for r in client.vector_stores.search(store.id, query="Egyptian honey")] == [ids["data.json"]]
    # A list of queries: the best results of each, together.
    both = {r.file_id for r in client.vector_stores.search(store.id, query=["Sicily volcano", "otters"])}
    assert both == {ids["volcano.txt"], ids["otters.md"]}
    assert len(list(client.vector_stores.search(store.id, query=["Sicily", "otters"], max_num_results=1))) == 1
    high = client.vector_stores.search(store.id, query="otters", ranking_options={"score_threshold": 0.999})
    assert list(high) == []
    listed = [f.id for f in client.vector_stores.files.list(store.id, order="asc")]
    assert listed == list(ids.values())
    with pytest.raises(openai.BadRequestError):
        client.vector_stores.search(store.id, query="x", max_num_results=51)


def test_attributes_and_filters(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    store = client.vector_stores.create(name="reports")
    for year, region in ((2023, "eu"), (2024, "us"), (2025, "eu")):
        uploaded = client.files.create(
            file=(f"r{year}.txt", f"Quarterly revenue report {year}".encode()), purpose="assistants"
        )
        client.vector_stores.files.create_and_poll(
            vector_store_id=store.id,
            file_id=uploaded.id,
            attributes={"year": year, "region": region},
            poll_interval_ms=20,
        )

    def years(filters: dict[str, Any]) -> set[int]:
        return {
            int(r.attributes["year"])
            for r in client.vector_stores.search(store.id, query="revenue report", filters=filters)
        }  # type: ignore[index, arg-type]

    assert years({"type": "eq", "key": "region", "value": "eu"}) == {2023, 2025}
    assert years({"type": "gte", "key": "year", "value": 2024}) == {2024, 2025}
    assert years(
        {
            "type": "and",
            "filters": [{"type": "eq", "key": "region", "value": "eu"}, {"type": "lt", "key": "year", "value": 2025}],
        }
    ) == {2023}
    assert years(
        {
            "type": "or",
            "filters": [{"type": "eq", "key": "year", "value": 2023}, {"type": "in", "key": "region", "value": ["us"]}],
        }
    ) == {2023, 2024}
    assert years({"type": "nin", "key": "region", "value": ["eu", "us"]}) == set()
    with pytest.raises(openai.BadRequestError):
        client.vector_stores.search(store.id, query="x", filters={"type": "near", "key": "a", "value": 1})  # type: ignore[arg-type, typeddict-item]


def test_failures_chunking_and_batches(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    store = client.vector_stores.create(name="mixed")
    image = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("photo.png", b"\x89PNG\r\n\x1a\n\x00\x00"), poll_interval_ms=20
    )
    assert image.status == "failed" and image.last_error is not None
    assert image.last_error.code == "unsupported_file"
    # Not UTF-8 (Windows-1252): read as such, not refused.
    latin = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("cafe.txt", "Le café crème de Zoë".encode("cp1252")), poll_interval_ms=20
    )
    assert latin.status == "completed"
    assert "café" in list(client.vector_stores.search(store.id, query="crème"))[0].content[0].text
    pdf = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("scan.pdf", _pdf("Narwhal tusks are teeth")), poll_interval_ms=20
    )
    assert pdf.status == "completed", pdf.last_error
    assert [r.filename for r in client.vector_stores.search(store.id, query="narwhal")] == ["scan.pdf"]
    broken = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("bad.pdf", b"%PDF-1.4 not really"), poll_interval_ms=20
    )
    assert broken.status == "failed" and broken.last_error is not None and broken.last_error.code == "invalid_file"
    bomb = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("bomb.pdf", _pdf("x", bomb=True)), poll_interval_ms=20
    )
    assert bomb.status == "failed" and bomb.last_error is not None and bomb.last_error.code == "invalid_file"
    counts = client.vector_stores.retrieve(store.id).file_counts
    assert (counts.completed, counts.failed) == (2, 3)

    long_text = ("word " * 3000).encode()
    uploaded = client.files.create(file=("long.txt", long_text), purpose="assistants")
    for bad in (
        {"max_chunk_size_tokens": 50, "chunk_overlap_tokens": 0},
        {"max_chunk_size_tokens": 400, "chunk_overlap_tokens": 300},
    ):
        with pytest.raises(openai.BadRequestError):
            client.vector_stores.files.create(
                vector_store_id=store.id,
                file_id=uploaded.id,
                chunking_strategy={"type": "static", "static": bad},  # type: ignore[typeddict-item]
            )
    static = client.vector_stores.files.create_and_poll(
        vector_store_id=store.id,
        file_id=uploaded.id,
        chunking_strategy={"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}},
        poll_interval_ms=20,
    )
    assert static.chunking_strategy is not None and static.chunking_strategy.static.max_chunk_size_tokens == 100  # type: ignore[union-attr]
    assert len(list(client.vector_stores.search(store.id, query="word", max_num_results=50))) == 30

    a, b = (client.files.create(file=(f"{n}.txt", f"batch note {n}".encode()), purpose="assistants") for n in "ab")
    batch = client.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id, file_ids=[a.id, b.id], poll_interval_ms=20
    )
    assert batch.status == "completed" and batch.file_counts.completed == 2 and batch.file_counts.total == 2
    in_batch = {f.id for f in client.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id)}
    assert in_batch == {a.id, b.id}


def test_deleting_a_file_removes_it_from_every_store(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    shared = client.files.create(
        file=("kiwi.txt", b"The kiwi is a flightless bird of New Zealand."), purpose="assistants"
    )
    stores = [client.vector_stores.create(name=f"s{i}") for i in range(2)]
    for store in stores:
        client.vector_stores.files.create_and_poll(vector_store_id=store.id, file_id=shared.id, poll_interval_ms=20)
        assert len(list(client.vector_stores.search(store.id, query="kiwi"))) == 1
    client.files.delete(shared.id)
    for store in stores:
        assert list(client.vector_stores.search(store.id, query="kiwi")) == []
        assert client.vector_stores.retrieve(store.id).file_counts.total == 0
    detached = client.files.create(file=("emu.txt", b"The emu is a large bird."), purpose="assistants")
    client.vector_stores.files.create_and_poll(vector_store_id=stores[0].id, file_id=detached.id, poll_interval_ms=20)
    client.vector_stores.files.delete(detached.id, vector_store_id=stores[0].id)
    assert list(client.vector_stores.search(stores[0].id, query="emu")) == []
    assert client.files.retrieve(detached.id).id == detached.id  # detaching keeps the file
    # Deleted right after it was attached, its ingestion perhaps still running: it ends in no store either way.
    brief = client.files.create(file=("moa.txt", b"The moa was a giant bird."), purpose="assistants")
    client.vector_stores.files.create(vector_store_id=stores[0].id, file_id=brief.id)
    client.files.delete(brief.id)
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.files.retrieve(brief.id, vector_store_id=stores[0].id)
    assert list(client.vector_stores.search(stores[0].id, query="moa")) == []
    assert client.vector_stores.delete(stores[1].id).deleted
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.retrieve(stores[1].id)


def test_another_keys_stores_and_files_are_invisible(serve: Serve) -> None:
    live = serve([ANSWER], api_keys=KEYS)
    one, two = (openai_client(live, api_key=key) for key in KEYS)
    store = one.vector_stores.create(name="private")
    mine = one.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("s.txt", b"secret plans"), poll_interval_ms=20
    )
    with pytest.raises(openai.NotFoundError):
        two.vector_stores.retrieve(store.id)
    with pytest.raises(openai.NotFoundError):
        two.vector_stores.search(store.id, query="secret")
    with pytest.raises(openai.NotFoundError):
        two.vector_stores.files.retrieve(mine.id, vector_store_id=store.id)
    assert list(two.vector_stores.list()) == []
    theirs = two.vector_stores.create(name="theirs")
    with pytest.raises(openai.NotFoundError):  # attaching another key's file
        two.vector_stores.files.create(vector_store_id=theirs.id, file_id=mine.id)
    with pytest.raises(openai.NotFoundError):
        two.vector_stores.create(name="sneaky", file_ids=[mine.id])
    assert [s.id for s in one.vector_stores.list()] == [store.id]


async def _mark_in_progress(store_spec: str, process_id: str) -> None:
    sql = "UPDATE vector_store_files SET status = 'in_progress', usage_bytes = 0, process_id = '{}'"
    if store_spec.startswith("sqlite:"):
        with sqlite3.connect(store_spec.removeprefix("sqlite:")) as conn:
            conn.execute(sql.format(process_id))
            conn.execute("DELETE FROM chunks")
        return
    import asyncpg

    base, _, schema = store_spec.partition("?search_path=")
    conn = await asyncpg.connect(base, server_settings={"search_path": schema})
    try:
        await conn.execute(sql.format(process_id))
        await conn.execute("DELETE FROM chunks")
    finally:
        await conn.close()


def test_an_ingestion_left_by_a_dead_process_is_resumed(serve: Serve, store_spec: str) -> None:
    first = serve([ANSWER])
    client = openai_client(first)
    store = client.vector_stores.create(name="resumed")
    done = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("owl.txt", b"Owls can rotate their heads 270 degrees."), poll_interval_ms=20
    )
    assert done.status == "completed"
    first.stop()
    # As a process killed mid-ingestion leaves it: in progress, its chunks not stored, under a process that is gone.
    asyncio.run(_mark_in_progress(store_spec, "proc_killed"))
    second = serve([ANSWER])
    client = openai_client(second)
    assert client.vector_stores.retrieve(store.id).status in ("in_progress", "completed")
    deadline = time.monotonic() + 60  # a bound on a wait for a condition, not a timing assertion
    while (resumed := client.vector_stores.files.retrieve(done.id, vector_store_id=store.id)).status == "in_progress":
        assert time.monotonic() < deadline, "the ingestion left in progress was never resumed"
        time.sleep(0.02)
    assert resumed.status == "completed" and resumed.usage_bytes == done.usage_bytes
    assert [r.file_id for r in client.vector_stores.search(store.id, query="owls")] == [done.id]


def test_files_too_long_to_ingest_fail_with_a_reason(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    # The bounds lowered (the server runs in this process) so that small files cross them.
    monkeypatch.setattr("harmony_responses.tools.file_search._chunking.MAX_FILE_TOKENS", 50)
    monkeypatch.setattr("harmony_responses.run.vector_stores.MAX_INGEST_BYTES", 2000)
    live = serve([ANSWER])
    client = openai_client(live)
    store = client.vector_stores.create(name="bounded")
    cases = {"tokens.txt": b"word " * 100, "bytes.txt": b"w" * 2001, "fits.txt": b"word " * 40}
    done = {
        name: client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=(name, data), poll_interval_ms=20
        )
        for name, data in cases.items()
    }
    assert done["fits.txt"].status == "completed"
    for name in ("tokens.txt", "bytes.txt"):
        error = done[name].last_error
        assert done[name].status == "failed" and error is not None and error.code == "invalid_file", name
    assert "tokens" in done["tokens.txt"].last_error.message  # type: ignore[union-attr]


def test_retention_deletes_old_files_and_idle_vector_stores(serve: Serve) -> None:
    # Whole seconds: a file is older than 4 s at least 3 s after its upload, ample for its ingestion to end first.
    live = serve([ANSWER], retention=4.0)
    client = openai_client(live)
    store = client.vector_stores.create(name="short-lived")
    done = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("tern.txt", b"Arctic terns migrate pole to pole."), poll_interval_ms=20
    )
    assert done.status == "completed"
    deadline = time.monotonic() + 60  # a bound on a wait for the purge, not a timing assertion
    while True:
        gone = []
        for call in (lambda: client.files.retrieve(done.id), lambda: client.vector_stores.retrieve(store.id)):
            try:
                call()
            except openai.NotFoundError:
                gone.append(True)
        if len(gone) == 2:
            break
        assert time.monotonic() < deadline, f"retention deleted {len(gone)} of the file and the vector store"
        time.sleep(0.05)


def test_attaching_again_ingests_with_the_new_strategy(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    store = client.vector_stores.create(name="again")
    uploaded = client.files.create(file=("long.txt", ("word " * 3000).encode()), purpose="assistants")
    client.vector_stores.files.create(vector_store_id=store.id, file_id=uploaded.id)  # auto: 800-token chunks
    small = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}}
    again = client.vector_stores.files.create_and_poll(
        vector_store_id=store.id,
        file_id=uploaded.id,
        chunking_strategy=small,  # type: ignore[arg-type]
        poll_interval_ms=20,
    )
    assert again.status == "completed"
    assert again.chunking_strategy.static.max_chunk_size_tokens == 100  # type: ignore[union-attr]
    # The first ingestion, stopped or finished before, left none of its chunks: 3000 tokens in chunks of 100.
    assert len(list(client.vector_stores.search(store.id, query="word", max_num_results=50))) == 30
    assert client.vector_stores.retrieve(store.id).file_counts.total == 1
