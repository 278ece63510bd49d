"""The Files API: uploads, listings, retrieval, deletion and content (shapes of ``openai.types.FileObject``).

Routes::

    POST   /v1/files                  multipart: file, purpose, expires_after[anchor], expires_after[seconds]
    GET    /v1/files                  list; ?purpose, ?after, ?limit 1..10000 (10000), ?order asc|desc (desc)
    GET    /v1/files/{id}             FileObject
    DELETE /v1/files/{id}             {"id", "object": "file", "deleted": true}
    GET    /v1/files/{id}/content     the file's bytes

Files belong to the caller's API key (``auth.owner_of``), as responses do: another key's file is a 404, the
same as one that does not exist. Uploads are bounded by ``--max-file-bytes`` (413 beyond it; a declared
``Content-Length`` beyond it is refused before a byte is read).

Why python-multipart's parser driven here rather than Starlette's ``request.form()``: form() spools each
file part into a temporary file with no bound on its size (Starlette bounds only the other fields), so the
bound would have to be wrapped around it and the bytes copied twice. Fed from ``request.stream()`` directly,
the same parser hands over each chunk as it arrives; every MiB goes to the store then (``store/_files.py``),
so an upload is never whole in memory nor on local disk (a PostgreSQL store is shared by every gateway), and
the size is checked at every chunk. A client that stops sending for ``--body-timeout`` seconds gets 408.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from typing import Any

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..errors import APIError
from ..ids import random_id
from ..run.files import FILE_PART_BYTES, FileRecord, FileStore, server_files
from ..run.vector_stores import vector_store_service
from .auth import owner_of
from .errors import json_response
from .stored import _int_query, _list

__all__ = ["DEFAULT_MAX_FILE_BYTES", "file_object", "file_store", "routes"]

DEFAULT_MAX_FILE_BYTES = 512 * 1024 * 1024  # OpenAI's own limit per file
UPLOAD_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
LIST_MAX = 10_000
MAX_FIELD_BYTES = 64 * 1024  # a form field other than the file (purpose, expires_after[…])
FORM_SLACK = 64 * 1024  # what the multipart framing and the other fields may add to the file's size
EXPIRY_MIN, EXPIRY_MAX = 3600, 30 * 86400
BATCH_EXPIRY = 30 * 86400  # the API's default for purpose=batch; other files are kept until deleted


def file_store(request: Request) -> tuple[FileStore, str]:
    return server_files(request.app.state.server), owner_of(request)


def file_object(record: FileRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.bytes,
        "created_at": record.created_at,
        "expires_at": record.expires_at,
        "filename": record.filename,
        "purpose": record.purpose,
        "status": "processed",
        "status_details": None,
    }


def no_such_file(file_id: str) -> APIError:
    return APIError(f"No such File object: {file_id}", status=404, param="id")


def _too_large(limit: int) -> APIError:
    return APIError(
        f"The file is larger than this server's limit of {limit} bytes (--max-file-bytes).",
        status=413,
        param="file",
        code="file_too_large",
    )


class _Form:
    """python-multipart's callbacks: small fields kept, the file's bytes queued for the store as they come."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.fields: dict[str, bytearray] = {}
        self.filename: str | None = None
        self.content_type: str | None = None
        self.size = 0
        self.pending = bytearray()  # file bytes parsed but not yet stored
        self._target: bytearray | None = None  # the field whose bytes are coming; None: the file's or skipped
        self._in_file = False
        self._headers: dict[bytes, bytes] = {}
        self._field = bytearray()
        self._value = bytearray()

    def callbacks(self) -> dict[str, Any]:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda data, start, end: self._field.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self._value.extend(data[start:end]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
        }

    def _part_begin(self) -> None:
        self._headers = {}
        self._target = None
        self._in_file = False

    def _header_end(self) -> None:
        self._headers[bytes(self._field).lower()] = bytes(self._value)
        self._field.clear()
        self._value.clear()

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if name == "file":
            if self.filename is not None:
                raise APIError("Only one 'file' may be uploaded per request.", param="file")
            raw = options.get(b"filename", b"")
            self.filename = raw.decode("utf-8", "replace") or "file"
            kind = self._headers.get(b"content-type")
            self.content_type = kind.decode("latin-1").strip() if kind else None
            self._in_file = True
        else:
            self._target = self.fields.setdefault(name, bytearray())

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file:
            self.size += end - start
            if self.size > self.limit:
                raise _too_large(self.limit)
            self.pending.extend(data[start:end])
        elif self._target is not None:
            self._target.extend(data[start:end])
            if len(self._target) > MAX_FIELD_BYTES:
                raise APIError(f"A form field is larger than {MAX_FIELD_BYTES} bytes.", status=413)

    def text(self, name: str) -> str | None:
        value = self.fields.get(name)
        return None if value is None else value.decode("utf-8", "replace")


def _boundary(request: Request) -> bytes:
    kind, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise APIError(
            "Uploads are multipart/form-data with a 'file' and a 'purpose' field.",
            status=415,
            code="unsupported_content_type",
        )
    return boundary


def _expires_at(form: _Form, purpose: str, created_at: int) -> int | None:
    anchor, seconds = form.text("expires_after[anchor]"), form.text("expires_after[seconds]")
    if anchor is None and seconds is None:
        return created_at + BATCH_EXPIRY if purpose == "batch" else None
    if anchor != "created_at":
        raise APIError(
            f"Invalid value for 'expires_after.anchor': {anchor!r}. Supported values are: 'created_at'.",
            param="expires_after.anchor",
            code="invalid_value",
        )
    try:
        value = int(seconds or "")
    except ValueError:
        raise APIError(
            "Invalid type for 'expires_after.seconds': expected an integer.",
            param="expires_after.seconds",
            code="invalid_type",
        ) from None
    if not EXPIRY_MIN <= value <= EXPIRY_MAX:
        raise APIError(
            f"Invalid 'expires_after.seconds': expected a value between {EXPIRY_MIN} and {EXPIRY_MAX}, got {value}.",
            param="expires_after.seconds",
            code="invalid_value",
        )
    return created_at + value


async def _read_form(request: Request, files: FileStore, owner: str, file_id: str, created_at: int) -> _Form:
    """Parse the upload, storing the file's bytes a part at a time; the row is begun at its first byte."""
    limit: int = request.app.state.max_file_bytes
    form = _Form(limit)
    parser = MultipartParser(_boundary(request), form.callbacks())
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit + FORM_SLACK:
        raise _too_large(limit)
    begun = False
    part = 0
    stream = request.stream()
    timeout: float = request.app.state.body_timeout
    while True:
        try:
            # The timeout is per chunk (a stalled client), not for the whole upload (a large file is slow).
            async with asyncio.timeout(timeout):
                chunk = await anext(stream)
        except StopAsyncIteration:
            break
        except TimeoutError:
            raise APIError(
                f"No part of the upload arrived for {timeout:g} seconds.", status=408, code="timeout"
            ) from None
        except ClientDisconnect:
            raise APIError("The client disconnected before sending the whole upload.") from None
        try:
            parser.write(chunk)
        except MultipartParseError as exc:
            raise APIError(f"The multipart body could not be parsed: {exc}") from None
        if form.filename is not None and not begun:
            await files.begin(file_id, owner, created_at)
            begun = True
        while len(form.pending) >= FILE_PART_BYTES:
            await files.put_part(file_id, part, bytes(form.pending[:FILE_PART_BYTES]))
            del form.pending[:FILE_PART_BYTES]
            part += 1
    try:
        parser.finalize()
    except MultipartParseError as exc:
        raise APIError(f"The multipart body could not be parsed: {exc}") from None
    if form.pending:
        await files.put_part(file_id, part, bytes(form.pending))
        form.pending.clear()
    return form


async def upload_file(request: Request) -> Response:
    files, owner = file_store(request)
    await files.tidy()
    file_id = random_id("file")
    created_at = int(time.time())
    try:
        form = await _read_form(request, files, owner, file_id, created_at)
        if form.filename is None:
            raise APIError("Missing required parameter: 'file'.", param="file", code="missing_required_parameter")
        purpose = form.text("purpose")
        if purpose is None:
            raise APIError("Missing required parameter: 'purpose'.", param="purpose", code="missing_required_parameter")
        if purpose not in UPLOAD_PURPOSES:
            raise APIError(
                f"Invalid value for 'purpose': '{purpose}'. Supported values are: "
                + ", ".join(f"'{p}'" for p in UPLOAD_PURPOSES)
                + ".",
                param="purpose",
                code="invalid_value",
            )
        record = FileRecord(
            id=file_id,
            owner=owner,
            created_at=created_at,
            bytes=form.size,
            filename=form.filename,
            purpose=purpose,
            content_type=form.content_type,
            expires_at=_expires_at(form, purpose, created_at),
        )
        await files.finish(record)
    except BaseException:
        await asyncio.shield(files.discard(file_id))
        raise
    return json_response(file_object(record))


async def list_files(request: Request) -> Response:
    files, owner = file_store(request)
    await files.tidy()
    limit = _int_query(request, "limit", LIST_MAX, minimum=1, maximum=LIST_MAX)
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise APIError(
            f"Invalid value: '{order}'. Supported values are: 'asc' and 'desc'.", param="order", code="invalid_value"
        )
    after = request.query_params.get("after") or None
    page = await files.list(
        owner, purpose=request.query_params.get("purpose") or None, after=after, limit=limit, order=order
    )
    if page is None:
        raise APIError(f"Invalid 'after': no file '{after}'.", param="after", code="invalid_value")
    records, has_more = page
    return _list([file_object(r) for r in records], has_more)


async def _record(request: Request) -> tuple[FileStore, FileRecord]:
    files, owner = file_store(request)
    file_id = request.path_params["file_id"]
    record = await files.get(file_id, owner)
    if record is None:
        raise no_such_file(file_id)
    return files, record


async def retrieve_file(request: Request) -> Response:
    _, record = await _record(request)
    return json_response(file_object(record))


async def delete_file(request: Request) -> Response:
    files, owner = file_store(request)
    file_id = request.path_params["file_id"]
    if not await files.delete(file_id, owner):
        raise no_such_file(file_id)
    # Its chunks leave every vector store (an ingestion still running for it then stores nothing).
    await vector_store_service(request.app.state.server).forget_file(file_id, owner)
    return json_response({"id": file_id, "object": "file", "deleted": True})


async def file_content(request: Request) -> Response:
    files, record = await _record(request)
    # The name quoted (RFC 5987): a client's file name must not be able to end the header or add one.
    disposition = f"attachment; filename*=UTF-8''{urllib.parse.quote(record.filename, safe='')}"
    return StreamingResponse(
        files.content(record),
        media_type="application/octet-stream",
        headers={"content-disposition": disposition, "content-length": str(record.bytes)},
    )


routes = [
    Route("/v1/files", upload_file, methods=["POST"]),
    Route("/v1/files", list_files, methods=["GET"]),
    Route("/v1/files/{file_id}", retrieve_file, methods=["GET"]),
    Route("/v1/files/{file_id}", delete_file, methods=["DELETE"]),
    Route("/v1/files/{file_id}/content", file_content, methods=["GET"]),
]
