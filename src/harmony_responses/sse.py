"""Server-sent events framing for Responses stream events (responses-protocol.md §1).

``event:`` equal to the JSON ``type``, one single-line ``data:`` line, a blank line; LF only; no ``id:``
lines (openai-python keeps ``last_event_id`` and a stray blank line then dispatches an empty event).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from . import _compiled

__all__ = ["FRAMES", "describe_frames", "encode_event", "encode_events", "ends_response", "frame"]

# The compiled framing of a batch (_sse_frames.c, built at install where a C compiler is), None where it is not
# used: encode_events' Python loop then frames every batch, to the same bytes (tests/api/test_sse.py).
_Frames = Callable[[list[dict[str, Any]], dict[str, bytes], Callable[[Any], bytes]], "bytes | None"]
FRAMES: _Frames | None
FRAMES, _frames_why_not = _compiled.load(f"{__package__}._sse_frames", "frames", "framing")


def describe_frames() -> str:
    """What start-up says of how events are framed."""
    return _compiled.describe(FRAMES, _frames_why_not, "events framed", "framing")


_EVENT_PREFIX: dict[str, bytes] = {}
_TERMINAL_FRAMES = (b"event: response.completed\n", b"event: response.incomplete\n", b"event: response.failed\n")


def encode_event(event: dict[str, Any]) -> bytes:
    # frame() inline: this runs once per event, a delta per token.
    prefix = _EVENT_PREFIX.get(event["type"])
    if prefix is None:
        return frame(event["type"], orjson.dumps(event))
    return b"".join((prefix, orjson.dumps(event), b"\n\n"))


def encode_events(events: list[dict[str, Any]]) -> bytes:
    """The SSE frames of ``events``, one after another: the body of one write."""
    # A batch of one event (a paced engine's every token) without the list and the join: 0.14 µs of the
    # 1.06 µs per token that translating and framing one token at a time cost (bench/translate_bench.py).
    if len(events) == 1:
        return encode_event(events[0])
    frames = FRAMES
    if frames is not None:
        body = frames(events, _EVENT_PREFIX, orjson.dumps)
        if body is not None:
            return body  # else a type's first event, or not a dict: framed below, its prefix kept
    # One join for the whole batch rather than one per event and another of those: 0.27 → 0.21 µs per
    # event of a 16-event batch.
    parts: list[bytes] = []
    append = parts.append
    prefixes = _EVENT_PREFIX
    dumps = orjson.dumps
    for event in events:
        prefix = prefixes.get(event["type"])
        if prefix is None:
            append(encode_event(event))  # a type's first event: its prefix made and kept
        else:
            append(prefix)
            append(dumps(event))
            append(b"\n\n")
    return b"".join(parts)


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
