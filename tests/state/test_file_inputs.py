"""Bad input to the Files and vector-store APIs at the real boundary (a live server, the ``openai`` client), on
SQLite and a real PostgreSQL: an upload of unknown length over the bound, text that is not UTF-8, PDFs whose
pages share one inflating stream or are too many, a file deleted, detached or its store deleted while it is
being ingested, and another key's ids on every vector-store route. Each ends in a clear 4xx or ``failed``
with a reason, and nothing of another key is seen or changed.

(Covered elsewhere: a declared-length upload over the bound, a single-stream zip bomb, a broken PDF,
Windows-1252 text and unsupported types in test_vector_stores.py and test_files.py.)
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from api.helpers import ANSWER, openai_client

from .conftest import Serve
from .pdf import assemble

KEYS = ("key-one-1234567890", "key-two-1234567890")
WAIT = 30  # seconds: a bound on waiting for a condition, never a timing assertion


def _pdf(pages: int, text: str, padding: int) -> bytes:
    """A PDF of ``pages`` pages that all show one content stream: ``text``, then ``padding`` spaces, Flate-packed
    (so ``padding`` bytes of content per page for a few KB of file)."""
    packer = zlib.compressobj(9)
    stream = packer.compress(f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode() + b" " * padding) + packer.flush()
    kids = " ".join(f"{5 + i} 0 R" for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
    page += b"/Resources << /Font << /F1 3 0 R >> >> >>"
    objects += [page] * pages
    return assemble(objects)


def _ingested(client: openai.OpenAI, store_id: str, name: str, data: bytes) -> Any:
    return client.vector_stores.files.upload_and_poll(vector_store_id=store_id, file=(name, data), poll_interval_ms=20)


def test_an_upload_of_unknown_length_over_the_bound_is_refused_while_it_streams(serve: Serve) -> None:
    live = serve([ANSWER], max_file_bytes=1000)
    client = openai_client(live)
    boundary = "bound4ry"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nassistants\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()

    def body(size: int) -> Iterator[bytes]:  # a generator: httpx sends it chunked, with no Content-Length
        yield head
        for _ in range(size // 500):
            yield b"x" * 500
        yield f"\r\n--{boundary}--\r\n".encode()

    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    refused = httpx.post(f"{live.base_url}/files", content=body(100_000), headers=headers, timeout=WAIT)
    assert refused.status_code == 413
    assert "1000" in refused.json()["error"]["message"]
    assert list(client.files.list()) == []
    fits = httpx.post(f"{live.base_url}/files", content=body(1000), headers=headers, timeout=WAIT)
    assert fits.status_code == 200 and fits.json()["bytes"] == 1000


def test_text_that_is_not_utf8_is_read_or_fails_with_a_reason(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    store = client.vector_stores.create(name="encodings")
    utf16 = _ingested(client, store.id, "notes.txt", "Le hérisson dort l'hiver.".encode("utf-16"))  # with its BOM
    assert utf16.status == "completed", utf16.last_error
    assert "hérisson" in list(client.vector_stores.search(store.id, query="hérisson"))[0].content[0].text
    # Without its BOM (NUL bytes: valid UTF-8, yet not text), told by where its NULs are.
    bare = _ingested(client, store.id, "bare.txt", "Hedgehogs hibernate in winter.".encode("utf-16-be"))
    assert bare.status == "completed", bare.last_error
    assert [r.filename for r in client.vector_stores.search(store.id, query="hedgehogs")] == ["bare.txt"]
    cases = {
        "cut.txt": "\ufeffa dangling surrogate".encode("utf-16-le") + b"\x00\xd8",  # a BOM, then not UTF-16
        "nul.txt": "\ufeffUTF-16 spelling NUL \x00".encode("utf-16-le"),
        "stray.md": b"# Title\n\nA NUL\x00 in the middle.\n",
        "binary.py": bytes(range(256)) * 4,
    }
    for name, data in cases.items():
        failed = _ingested(client, store.id, name, data)
        assert failed.status == "failed" and failed.last_error is not None, name
        assert failed.last_error.code == "invalid_file" and failed.last_error.message, name
    counts = client.vector_stores.retrieve(store.id).file_counts
    assert (counts.completed, counts.failed, counts.in_progress) == (2, 4, 0)


def test_pdf_pages_sharing_one_inflating_stream_are_bounded(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    # The bounds lowered (the server runs in this process) so that a few small pages cross them.
    monkeypatch.setattr("harmony_responses.tools.file_search._extract.MAX_PDF_CONTENT_BYTES", 3_000_000)
    monkeypatch.setattr("harmony_responses.tools.file_search._extract.MAX_PDF_PAGES", 8)
    live = serve([ANSWER])
    client = openai_client(live)
    store = client.vector_stores.create(name="pdfs")
    fits = _ingested(client, store.id, "two.pdf", _pdf(2, "Narwhals", 1_000_000))
    assert fits.status == "completed", fits.last_error
    assert [r.filename for r in client.vector_stores.search(store.id, query="narwhals")] == ["two.pdf"]
    # A few KB of file whose five pages each show the same 1 MB stream: 5 MB of content to read.
    shared = _pdf(5, "Walruses", 1_000_000)
    assert len(shared) < 10_000
    bomb = _ingested(client, store.id, "shared.pdf", shared)
    assert bomb.status == "failed" and bomb.last_error is not None and bomb.last_error.code == "invalid_file"
    assert "content" in bomb.last_error.message
    many = _ingested(client, store.id, "many.pdf", _pdf(9, "Dugongs", 0))
    assert many.status == "failed" and many.last_error is not None and many.last_error.code == "invalid_file"
    assert "9 pages" in many.last_error.message
    assert list(client.vector_stores.search(store.id, query="walruses dugongs")) == []


class _Held:
    """Text extraction held at its start until ``release``: an ingestion caught in the middle."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from harmony_responses.tools.file_search import _extract

        self.entered = threading.Event()
        self._release = threading.Event()
        self.returned = threading.Event()
        decode = _extract._decode

        def held(data: bytes) -> str:
            if b"HOLD" in data:
                self.entered.set()
                assert self._release.wait(WAIT), "never released"
                try:
                    return decode(data)
                finally:
                    self.returned.set()
            return decode(data)

        monkeypatch.setattr(_extract, "_decode", held)

    def release(self) -> None:
        self._release.set()
        assert self.returned.wait(WAIT), "the held ingestion never went on"


def _caught(client: openai.OpenAI, store_id: str, name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, _Held]:
    held = _Held(monkeypatch)
    uploaded = client.files.create(file=(name, b"HOLD the narwhal file"), purpose="assistants")
    attached = client.vector_stores.files.create(vector_store_id=store_id, file_id=uploaded.id)
    assert attached.status == "in_progress"
    assert held.entered.wait(WAIT), "the ingestion never started"
    return uploaded.id, held


def _settled(client: openai.OpenAI, store_id: str) -> None:
    """Another file ingested into the store after the held one went on: its end is the condition waited for."""
    done = _ingested(client, store_id, "after.txt", b"an unrelated walrus")
    assert done.status == "completed"


@pytest.mark.parametrize("what", ["file deleted", "file detached", "store deleted"])
def test_a_file_removed_mid_ingestion_leaves_nothing_behind(
    serve: Serve, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    store = client.vector_stores.create(name="caught")
    file_id, held = _caught(client, store.id, "caught.txt", monkeypatch)
    if what == "file deleted":
        assert client.files.delete(file_id).deleted
    elif what == "file detached":
        assert client.vector_stores.files.delete(file_id, vector_store_id=store.id).deleted
    else:
        assert client.vector_stores.delete(store.id).deleted
    held.release()
    if what == "store deleted":
        with pytest.raises(openai.NotFoundError):
            client.vector_stores.retrieve(store.id)
        # The file is intact and ingests anew into another store; nothing of the old one comes back.
        other = client.vector_stores.create(name="other")
        again = client.vector_stores.files.create_and_poll(
            vector_store_id=other.id, file_id=file_id, poll_interval_ms=20
        )
        assert again.status == "completed"
        assert [r.file_id for r in client.vector_stores.search(other.id, query="narwhal")] == [file_id]
        return
    _settled(client, store.id)
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.files.retrieve(file_id, vector_store_id=store.id)
    assert file_id not in {f.id for f in client.vector_stores.files.list(vector_store_id=store.id)}
    assert list(client.vector_stores.search(store.id, query="narwhal")) == []
    record = client.vector_stores.retrieve(store.id)
    assert (record.file_counts.total, record.file_counts.in_progress, record.status) == (1, 0, "completed")
    if what == "file detached":
        assert client.files.retrieve(file_id).id == file_id  # detaching keeps the file
    else:
        with pytest.raises(openai.NotFoundError):
            client.files.retrieve(file_id)


def test_another_keys_ids_are_404_everywhere_and_change_nothing(serve: Serve) -> None:
    live = serve([ANSWER], api_keys=KEYS)
    one, two = (openai_client(live, api_key=key) for key in KEYS)
    store = one.vector_stores.create(name="private", metadata={"team": "one"})
    mine = _ingested(one, store.id, "plans.txt", b"secret walrus plans")
    spare = one.files.create(file=("spare.txt", b"secret spare"), purpose="assistants")
    batch = one.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id, file_ids=[spare.id], poll_interval_ms=20
    )
    theirs = two.vector_stores.create(name="theirs")
    _ingested(two, theirs.id, "own.txt", b"an ordinary walrus")
    refused = {
        "modify": lambda: two.vector_stores.update(store.id, name="taken"),
        "delete": lambda: two.vector_stores.delete(store.id),
        "list files": lambda: two.vector_stores.files.list(vector_store_id=store.id),
        "attach own file to it": lambda: two.vector_stores.files.create(
            vector_store_id=store.id, file_id=two.files.create(file=("x.txt", b"x"), purpose="assistants").id
        ),
        "update attributes": lambda: two.vector_stores.files.update(
            mine.id, vector_store_id=store.id, attributes={"owner": "two"}
        ),
        "detach": lambda: two.vector_stores.files.delete(mine.id, vector_store_id=store.id),
        "batch into it": lambda: two.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=[spare.id]),
        "batch its files": lambda: two.vector_stores.file_batches.create(
            vector_store_id=theirs.id, file_ids=[spare.id]
        ),
        "retrieve batch": lambda: two.vector_stores.file_batches.retrieve(batch.id, vector_store_id=store.id),
        "batch files": lambda: two.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id),
        "cancel batch": lambda: two.vector_stores.file_batches.cancel(batch.id, vector_store_id=store.id),
        "batch under own store": lambda: two.vector_stores.file_batches.retrieve(batch.id, vector_store_id=theirs.id),
        "file under own store": lambda: two.vector_stores.files.retrieve(mine.id, vector_store_id=theirs.id),
        "search": lambda: two.vector_stores.search(store.id, query="secret"),
    }
    for call in refused.values():
        with pytest.raises(openai.NotFoundError):
            call()
    # Their own store's search never reaches key one's chunks.
    assert [r.filename for r in two.vector_stores.search(theirs.id, query="secret walrus plans")] == ["own.txt"]
    assert [s.id for s in two.vector_stores.list()] == [theirs.id]
    kept = one.vector_stores.retrieve(store.id)
    assert (kept.name, kept.metadata, kept.file_counts.completed) == ("private", {"team": "one"}, 2)
    assert one.vector_stores.files.retrieve(mine.id, vector_store_id=store.id).attributes in (None, {})
    assert {r.file_id for r in one.vector_stores.search(store.id, query="secret")} == {mine.id, spare.id}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"name": "notes\x00"}, "name"),  # PostgreSQL stores no NUL in text: a 503 once, now a 400
        ({"name": "n" * 257}, "name"),
        ({"name": 7}, "name"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"k": 1}}, "metadata.k"),
    ],
)
def test_a_vector_stores_bad_name_or_metadata_is_a_400(serve: Serve, fields: dict[str, Any], param: str) -> None:
    client = openai_client(serve([ANSWER]))
    with pytest.raises(openai.BadRequestError) as created:
        client.vector_stores.create(**fields)
    assert created.value.body["param"] == param, created.value.body  # type: ignore[index]
    store = client.vector_stores.create(name="fine", metadata={"k": "v"})
    with pytest.raises(openai.BadRequestError) as updated:
        client.vector_stores.update(store.id, **fields)
    assert updated.value.body["param"] == param, updated.value.body  # type: ignore[index]
    kept = client.vector_stores.retrieve(store.id)
    assert (kept.name, kept.metadata) == ("fine", {"k": "v"})
    assert [s.name for s in client.vector_stores.list()] == ["fine"]  # the refused one was not made


def test_chunks_the_store_refuses_fail_the_file_instead_of_leaving_it_in_progress(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harmony_responses.store import VectorStores

    original = VectorStores.finish_file

    async def refusing(self: Any, *args: Any, **kwargs: Any) -> bool:
        if kwargs["chunks"]:  # as a database refusing one of their values would
            raise ValueError("a value the store cannot hold")
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(VectorStores, "finish_file", refusing)
    client = openai_client(serve([ANSWER]))
    store = client.vector_stores.create(name="refused")
    done = _ingested(client, store.id, "notes.txt", b"Otters hold hands.")
    assert done.status == "failed" and done.last_error is not None, done
    assert done.last_error.code == "server_error" and "could not be stored" in done.last_error.message
