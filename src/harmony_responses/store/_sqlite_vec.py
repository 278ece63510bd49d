"""sqlite-vec (PyPI ``sqlite-vec``, the ``file-search`` extra) loaded into the SQLite store's connections.

The package ships the extension as a shared library (``sqlite_vec.loadable_path()``); its scalar functions
(``vec_distance_cosine`` over float32 BLOBs) rank a vector store's chunks by similarity to a query.

Two ways in, tried in order. The standard one, ``Connection.load_extension``, exists only when Python was
built with ``--enable-loadable-sqlite-extensions``; pyenv's builds (and macOS's) are not. Otherwise, when the
``sqlite3`` module is linked to a shared ``libsqlite3`` (Debian's, a distribution's), the extension's entry
point is registered with that library's ``sqlite3_auto_extension``, through ctypes, so every connection opened
afterwards has it. Whether either worked is checked on a fresh connection (``vec_version()``); when none did,
``load`` says why and the store ranks by full text only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sqlite3
import threading
from collections.abc import Callable

__all__ = ["Loader", "sqlite_vec_loader"]

Loader = Callable[[sqlite3.Connection], None]

_lock = threading.Lock()
_found: tuple[Loader | None, str] | None = None
_libraries: list[ctypes.CDLL] = []  # the registered entry point's library, held for the process's life


def _by_load_extension(path: str) -> Loader:
    def load(conn: sqlite3.Connection) -> None:
        conn.enable_load_extension(True)
        try:
            conn.load_extension(path)
        finally:
            conn.enable_load_extension(False)

    return load


def _by_auto_extension(path: str) -> Loader:
    name = ctypes.util.find_library("sqlite3") or "libsqlite3.so.0"
    library = ctypes.CDLL(name)
    # loadable_path() leaves the suffix out, as load_extension takes it; dlopen needs the file's whole name.
    files = [path + suffix for suffix in ("", ".so", ".dylib", ".dll") if os.path.isfile(path + suffix)]
    if not files:
        raise OSError(f"no sqlite-vec library at {path}")
    extension = ctypes.CDLL(files[0])
    library.sqlite3_auto_extension.argtypes = [ctypes.c_void_p]
    library.sqlite3_auto_extension.restype = ctypes.c_int
    code = library.sqlite3_auto_extension(ctypes.cast(extension.sqlite3_vec_init, ctypes.c_void_p))
    if code != 0:
        raise OSError(f"sqlite3_auto_extension returned {code}")
    _libraries.append(extension)
    return lambda conn: None  # every new connection has it already


def sqlite_vec_loader() -> tuple[Loader | None, str]:
    """``(loader, version)`` when sqlite-vec can be loaded (the loader runs on each new connection), else
    ``(None, why not)``. Found once per process."""
    global _found
    with _lock:
        if _found is None:
            _found = _find()
        return _found


def _find() -> tuple[Loader | None, str]:
    try:
        import sqlite_vec
    except ImportError:
        return None, "the sqlite-vec package is not installed (pip install 'harmony-responses[file-search]')"
    path = sqlite_vec.loadable_path()
    tried: list[str] = []
    ways: list[Callable[[str], Loader]] = []
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        ways.append(_by_load_extension)
    ways.append(_by_auto_extension)
    for way in ways:
        try:
            loader = way(path)
            conn = sqlite3.connect(":memory:")
            try:
                loader(conn)
                (version,) = conn.execute("SELECT vec_version()").fetchone()
            finally:
                conn.close()
            return loader, f"sqlite-vec {version}"
        except (OSError, AttributeError, sqlite3.Error) as exc:
            tried.append(f"{way.__name__.strip('_').replace('_', ' ')}: {exc}")
    return None, "sqlite-vec could not be loaded into Python's sqlite3 (" + "; ".join(tried) + ")"
