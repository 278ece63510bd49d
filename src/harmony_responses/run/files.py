"""The server's uploaded files (the Files API, ``http/files.py``): the ``FileStore`` of the server's store.

The HTTP layer reaches the store through ``run/`` only (tests/test_layout.py); what a file is and how its
bytes are kept is ``store/_files.py``'s.
"""

from __future__ import annotations

from ..store import FILE_PART_BYTES, FileRecord, FileStore, files_of
from .server import Server

__all__ = ["FILE_PART_BYTES", "FileRecord", "FileStore", "server_files"]


def server_files(server: Server) -> FileStore:
    """The files of ``server``'s store (opened with the server)."""
    return files_of(server.stored.store)
