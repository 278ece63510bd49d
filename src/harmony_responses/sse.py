"""Server-sent events framing for Responses stream events (responses-protocol.md §1).

``event:`` equal to the JSON ``type``, one single-line ``data:`` line, a blank line; LF only; no ``id:``
lines (openai-python keeps ``last_event_id`` and a stray blank line then dispatches an empty event).
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["encode_event", "ends_response", "frame"]

_EVENT_PREFIX: dict[str, bytes] = {}
_TERMINAL_FRAMES = (b"event: response.completed\n", b"event: response.incomplete\n", b"event: response.failed\n")


def encode_event(event: dict[str, Any]) -> bytes:
    # frame() inline: this runs once per event, a delta per token.
    prefix = _EVENT_PREFIX.get(event["type"])
    if prefix is None:
        return frame(event["type"], orjson.dumps(event))
    return b"".join((prefix, orjson.dumps(event), b"\n\n"))


def frame(type_: str, data: bytes) -> bytes:
    """The SSE frame of an event of type ``type_`` whose JSON is ``data``."""
    prefix = _EVENT_PREFIX.get(type_)
    if prefix is None:
        prefix = _EVENT_PREFIX[type_] = b"event: " + type_.encode() + b"\ndata: "
    return prefix + data + b"\n\n"


def ends_response(body: bytes) -> bool:
    """Whether the last event framed in ``body`` is a terminal one (completed, incomplete, failed).

    A frame starts at the body's start or after a newline; inside ``data:`` JSON a newline is escaped.
    """
    return body.startswith(_TERMINAL_FRAMES, body.rfind(b"\nevent: ") + 1)
