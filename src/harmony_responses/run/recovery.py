"""Ending a response from its event log alone: for responses whose process died mid-generation.

When a server process crashes (or is killed) its running responses stay ``queued``/``in_progress`` in
the store, and their logs stop mid-stream. Another process (or the same one, restarted) ends them:
``closing_events(log, response, …)`` reads the log as a client would — which item is open, which content
part, the text its deltas added up to — and returns the events that close the open item ``incomplete``
and end the response, continuing the log's sequence numbers. The result is a stream that satisfies every
invariant a live one does (each ``added`` has its ``done``, the final ``output`` is the streamed items), so
a client resuming it terminates normally (pitfalls.md #44).

Crashed responses end ``failed`` with a reason (``error`` + ``response.failed``, responses-protocol.md
§5.3); a cancel of an orphaned background response ends it ``cancelled`` as ``Translator.cancel`` does.
Usage is unknown after a crash: the terminal Response reports zeros.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Literal

from ..translate import usage_object

__all__ = ["CRASH_MESSAGE", "closing_events"]

Event = dict[str, Any]

CRASH_MESSAGE = (
    "The server process that was generating this response stopped before it finished (it crashed or was "
    "killed); the output streamed until then is kept."
)
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_LIFECYCLE = frozenset({"response.created", "response.queued", "response.in_progress", *_TERMINAL})
# The event that completes an item's code or arguments, per item type (responses-protocol.md §4).
_ARGUMENTS_DONE = {
    "function_call": "response.function_call_arguments.done",
    "custom_tool_call": "response.custom_tool_call_input.done",
    "mcp_call": "response.mcp_call_arguments.done",
    "code_interpreter_call": "response.code_interpreter_call_code.done",
}


class _Open:
    """The item the log left open."""

    def __init__(self, index: int, item: dict[str, Any]) -> None:
        self.index = index
        self.item = copy.deepcopy(item)
        self.deltas: list[str] = []
        self.part: dict[str, Any] | None = None  # the open content part (added, not done)
        self.done_part: dict[str, Any] | None = None  # a content part already done
        self.annotations: list[dict[str, Any]] = []
        self.arguments_done = False
        # A summarised reasoning item's summary part, streamed beside its reasoning_text part: open, and its text.
        self.summary_open = False
        self.summary: list[str] = []


def closing_events(
    log: Sequence[Event],
    response: dict[str, Any],
    *,
    status: Literal["failed", "cancelled"],
    message: str = CRASH_MESSAGE,
) -> tuple[list[Event], dict[str, Any]]:
    """The events that end ``log`` with ``status``, and the final Response.

    Args:
        log: the response's logged events, in order (possibly none).
        response: the stored Response object, used when the log has no lifecycle event.
        status: ``failed`` (with ``message``) or ``cancelled``.

    Returns:
        ``([], response)`` when the log already ends with a terminal event (only the row needs fixing).
    """
    if log and log[-1]["type"] in _TERMINAL:
        return [], log[-1]["response"]
    out: list[Event] = []
    seq = log[-1]["sequence_number"] + 1 if log else 0

    def emit(event: Event) -> None:
        nonlocal seq
        out.append({"type": event["type"], "sequence_number": seq, **event})
        seq += 1

    snapshot = copy.deepcopy(response)
    output: list[dict[str, Any]] = []
    opened: _Open | None = None
    if not log:
        snapshot.update(output=[], usage=None, error=None, incomplete_details=None, completed_at=None)
        emit({"type": "response.created", "response": copy.deepcopy(snapshot)})
    for event in log:
        kind = event["type"]
        if kind in _LIFECYCLE:
            snapshot = copy.deepcopy(event["response"])
        elif kind == "response.output_item.added":
            opened = _Open(event["output_index"], event["item"])
        elif kind == "response.output_item.done":
            output.append(event["item"])
            opened = None
        elif opened is None:
            continue
        elif kind == "response.content_part.added":
            opened.part, opened.deltas, opened.annotations = copy.deepcopy(event["part"]), [], []
        elif kind == "response.content_part.done":
            opened.part, opened.done_part = None, event["part"]
        elif kind == "response.output_text.annotation.added":
            opened.annotations.append(event["annotation"])
        elif kind == "response.reasoning_summary_part.added":
            opened.summary_open, opened.summary = True, []
        elif kind == "response.reasoning_summary_part.done":
            opened.summary_open = False
            opened.item["summary"] = [event["part"]]
        elif kind == "response.reasoning_summary_text.delta":
            opened.summary.append(event["delta"])
        elif kind.endswith(".delta") and isinstance(event.get("delta"), str):
            opened.deltas.append(event["delta"])
        elif kind == _ARGUMENTS_DONE.get(opened.item["type"]):
            opened.arguments_done = True
    if opened is not None:
        output.append(_close(opened, emit))

    final = dict(snapshot, output=output, completed_at=None, incomplete_details=None)
    if final.get("usage") is None:
        # The token counts died with the process; zeros keep the object's shape (integers, as clients need).
        final["usage"] = usage_object(input_tokens=0, cached_tokens=0, output_tokens=0, reasoning_tokens=0)
    if status == "failed":
        final.update(status="failed", error={"code": "server_error", "message": message})
        error = {"type": "server_error", "code": "server_error", "message": message, "param": None}
        emit({"type": "error", "code": "server_error", "message": message, "param": None, "error": error})
        emit({"type": "response.failed", "response": final})
    else:
        final.update(status="cancelled", error=None)
        emit({"type": "response.incomplete", "response": final})
    return out, final


def _close(opened: _Open, emit: Any) -> dict[str, Any]:
    """Emit what closes the open item (as a length cut would have) and return the done item."""
    item, index = opened.item, opened.index
    text = "".join(opened.deltas)
    kind = item["type"]
    if opened.summary_open:
        # The summary part ends first, as a cut-short translator ends it (translate/_translator.py).
        summary = "".join(opened.summary)
        ref = {"item_id": item["id"], "output_index": index, "summary_index": 0}
        emit({"type": "response.reasoning_summary_text.done", **ref, "text": summary})
        part = {"type": "summary_text", "text": summary}
        emit({"type": "response.reasoning_summary_part.done", **ref, "part": part, "status": "incomplete"})
        item["summary"] = [part]
    if kind in ("message", "reasoning") and opened.part is not None:
        text_done = "response.output_text.done" if kind == "message" else "response.reasoning_text.done"
        done: Event = {"type": text_done, "item_id": item["id"], "output_index": index, "content_index": 0}
        done["text"] = text
        part = dict(opened.part, text=text)
        if kind == "message":
            done["logprobs"] = []
            part.update(annotations=opened.annotations, logprobs=[])
        emit(done)
        emit(
            {
                "type": "response.content_part.done",
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "part": part,
            }
        )
        item["content"] = [part]
    elif kind in ("message", "reasoning") and opened.done_part is not None:
        item["content"] = [opened.done_part]
    elif kind in _ARGUMENTS_DONE:
        field = {"code_interpreter_call": "code", "custom_tool_call": "input"}.get(kind, "arguments")
        if not opened.arguments_done:
            done = {"type": _ARGUMENTS_DONE[kind], "item_id": item["id"], "output_index": index, field: text}
            if kind == "function_call":
                done["name"] = item.get("name")
            emit(done)
        item[field] = text
    if "status" in item:
        item["status"] = "incomplete"
    emit({"type": "response.output_item.done", "output_index": index, "item": item})
    return item
