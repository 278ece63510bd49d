"""The Files API with the ``openai`` client, on SQLite and a real PostgreSQL: upload, list in pages, retrieve,
content, delete, expiry, the size bound, and files of one key invisible to another."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from api.helpers import ANSWER, openai_client

from .conftest import Serve

KEYS = ("key-one-1234567890", "key-two-1234567890")


def test_upload_retrieve_content_delete(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    # Larger than one stored part (1 MiB), and not UTF-8: bytes come back exactly as sent.
    data = bytes(range(256)) * 5000 + b"\xff\xfe tail"
    created = client.files.create(file=("notes.bin", data, "application/octet-stream"), purpose="assistants")
    assert created.id.startswith("file") and created.object == "file"
    assert (created.bytes, created.filename, created.purpose, created.expires_at) == (
        len(data),
        "notes.bin",
        "assistants",
        None,
    )
    assert client.files.retrieve(created.id) == created
    assert client.files.content(created.id).read() == data
    deleted = client.files.delete(created.id)
    assert (deleted.id, deleted.deleted) == (created.id, True)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.files.content(created.id)
    with pytest.raises(openai.NotFoundError):
        client.files.delete(created.id)


def test_list_pages_purpose_and_order(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    ids = [
        client.files.create(file=(f"f{i}.txt", f"file {i}".encode()), purpose="user_data" if i % 2 else "assistants").id
        for i in range(5)
    ]
    newest_first = [f.id for f in client.files.list(limit=2)]  # the SDK follows the cursor over pages of 2
    assert newest_first == ids[::-1]
    first_page = client.files.list(limit=2, order="asc")
    assert [f.id for f in first_page.data] == ids[:2] and first_page.has_more
    assert [f.id for f in client.files.list(order="asc", after=ids[1])] == ids[2:]
    assert [f.id for f in client.files.list(purpose="user_data", order="asc")] == [ids[1], ids[3]]
    with pytest.raises(openai.BadRequestError):
        client.files.list(limit=0)


def test_expires_after_and_batch_default(serve: Serve) -> None:
    live = serve([ANSWER])
    client = openai_client(live)
    before = int(time.time())
    kept = client.files.create(
        file=("a.txt", b"a"), purpose="assistants", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    assert kept.expires_at is not None and before + 3600 <= kept.expires_at <= int(time.time()) + 3600
    batch = client.files.create(file=("b.jsonl", b"{}\n"), purpose="batch")
    assert batch.expires_at == batch.created_at + 30 * 86400
    with pytest.raises(openai.BadRequestError) as bad:
        client.files.create(
            file=("c.txt", b"c"), purpose="assistants", expires_after={"anchor": "created_at", "seconds": 5}
        )
    assert bad.value.body["param"] == "expires_after.seconds"  # type: ignore[index]


def test_bad_uploads_are_4xx_and_store_nothing(serve: Serve) -> None:
    live = serve([ANSWER], max_file_bytes=1000)
    client = openai_client(live)
    with pytest.raises(openai.APIStatusError) as too_large:
        client.files.create(file=("big.bin", b"x" * 5000), purpose="assistants")
    assert too_large.value.status_code == 413
    # Within the framing slack of the declared length, so refused while it streams, not up front.
    with pytest.raises(openai.APIStatusError) as streamed:
        client.files.create(file=("big.bin", b"x" * 1001), purpose="assistants")
    assert streamed.value.status_code == 413
    with pytest.raises(openai.BadRequestError) as purpose:
        client.files.create(file=("a.txt", b"a"), purpose="nonsense")  # type: ignore[arg-type]
    assert purpose.value.body["param"] == "purpose"  # type: ignore[index]
    no_file = httpx.post(f"{live.base_url}/files", data={"purpose": "assistants"}, files={"other": ("x", b"1")})
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
    json_body = httpx.post(f"{live.base_url}/files", json={"purpose": "assistants"})
    assert json_body.status_code == 415
    assert list(client.files.list()) == []
    assert client.files.create(file=("ok.bin", b"x" * 1000), purpose="assistants").bytes == 1000


def test_another_keys_files_are_invisible(serve: Serve) -> None:
    live = serve([ANSWER], api_keys=KEYS)
    one, two = (openai_client(live, api_key=key) for key in KEYS)
    mine = one.files.create(file=("mine.txt", b"secret"), purpose="assistants")
    for call in (two.files.retrieve, two.files.content, two.files.delete):
        with pytest.raises(openai.NotFoundError):
            call(mine.id)
    assert list(two.files.list()) == []
    with pytest.raises(openai.BadRequestError):
        two.files.list(after=mine.id)
    assert one.files.content(mine.id).read() == b"secret"
