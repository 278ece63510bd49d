"""Log lines: the request id each one carries, and the two formats (``--log-format text|json``).

The request id lives in a context variable that the HTTP layer sets for the whole of a request
(``http/observe.py``), so that every line logged while handling it, in any layer and in the tasks it starts
(a background response's producer too), names it. ``RequestIdFilter`` puts it on each record as
``request_id`` (``-`` outside a request); ``configure`` installs the filter and the format on the root
logger and on uvicorn's loggers (its access log included), once per process.

JSON lines are one object per line: ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``,
``message``, ``request_id``, and ``exception`` (the formatted traceback) when there is one; an access log
line adds ``client``, ``method``, ``path`` and ``status``.
"""

from __future__ import annotations

import contextvars
import datetime
import logging
import logging.config
import time
from typing import Any

import orjson

from .ids import random_id

__all__ = [
    "LOG_FORMATS",
    "MAX_REQUEST_ID_LENGTH",
    "JsonFormatter",
    "RequestIdFilter",
    "accepted_request_id",
    "configure",
    "current_request_id",
    "logging_config",
    "request_arrived",
    "request_scope",
]

LOG_FORMATS = ("text", "json")
MAX_REQUEST_ID_LENGTH = 512
# Text lines as before request ids, which follow the message in brackets on lines logged during a request.
TEXT_FORMAT = "%(levelname)s:     %(name)s: %(message)s%(request_tag)s"

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("harmony_responses_request_id", default=None)
_arrived: contextvars.ContextVar[float | None] = contextvars.ContextVar("harmony_responses_arrived", default=None)


def accepted_request_id(value: str | None) -> str:
    """The client's ``x-request-id`` when it is usable (1..512 printable ASCII characters), else a new one.

    A proxy in front usually sets one, and the client then finds it in our logs; anything else (control
    characters that would forge log lines, a megabyte of text) is replaced rather than refused.
    """
    if value and len(value) <= MAX_REQUEST_ID_LENGTH and value.isascii() and value.isprintable():
        return value
    return random_id("req")


def current_request_id() -> str | None:
    """The id of the request being handled in this context (None outside one)."""
    return _request_id.get()


def request_arrived() -> float | None:
    """``time.monotonic()`` when the request being handled arrived (None outside one)."""
    return _arrived.get()


class request_scope:
    """``with request_scope(request_id):`` sets the request id (and its arrival time) for the block."""

    __slots__ = ("_arrived", "_id", "_tokens")

    def __init__(self, request_id: str, arrived: float | None = None) -> None:
        self._id = request_id
        self._arrived = time.monotonic() if arrived is None else arrived
        self._tokens: tuple[contextvars.Token[Any], contextvars.Token[Any]] | None = None

    def __enter__(self) -> str:
        self._tokens = (_request_id.set(self._id), _arrived.set(self._arrived))
        return self._id

    def __exit__(self, *exc: object) -> None:
        assert self._tokens is not None
        _request_id.reset(self._tokens[0])
        _arrived.reset(self._tokens[1])


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every record (None outside a request) and ``request_tag`` (`` [id]`` or nothing,
    for text lines); never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = _request_id.get()
        record.request_tag = f" [{record.request_id}]" if record.request_id else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or _request_id.get(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            # uvicorn's access line: (client, method, path, http version, status).
            client, method, path, _, status = record.args
            line.update(client=client, method=method, path=path, status=status)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


def logging_config(level: str, log_format: str = "text") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for our loggers and uvicorn's, in ``log_format`` (also uvicorn's
    ``log_config``, so that it does not install its own handlers over these)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    level = "DEBUG" if level.lower() == "trace" else level.upper()
    if log_format == "json":
        formatters: dict[str, Any] = {name: {"()": JsonFormatter} for name in ("default", "uvicorn", "access")}
    else:
        # uvicorn's own formats (its level prefix, its access line), with the request id after the message.
        formatters = {
            "default": {"format": TEXT_FORMAT},
            "uvicorn": {"()": "uvicorn.logging.DefaultFormatter", "fmt": "%(levelprefix)s %(message)s%(request_tag)s"},
            "access": {
                "()": "uvicorn.logging.AccessFormatter",
                "fmt": '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s%(request_tag)s',
            },
        }
    handler = {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "filters": ["request_id"]}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": formatters,
        "handlers": {name: {**handler, "formatter": name} for name in ("default", "uvicorn", "access")},
        "root": {"handlers": ["default"], "level": level},
        "loggers": {
            "uvicorn": {"handlers": ["uvicorn"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": ["access"], "level": level, "propagate": False},
        },
    }


def configure(level: str, log_format: str = "text") -> dict[str, Any]:
    """Install ``logging_config(level, log_format)``; returns it (for uvicorn's ``log_config``)."""
    config = logging_config(level, log_format)
    logging.config.dictConfig(config)
    return config
