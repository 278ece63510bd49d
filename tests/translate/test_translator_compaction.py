"""The translator's ``compaction`` item: ``open_compaction`` → added + ``response.compaction.compacting``,
``close_compaction`` → done with the sealed summary; a response that ends while it is open closes it with
``encrypted_content: ""`` first, so every added item has its done (random chunkings: test_translator_properties).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harmony_responses.translate import LocalProtocolError, Translator

from .helpers import make_translator, tokens
from .invariants import check_stream

ANSWER = "<|channel|>final<|message|>Done.<|return|>"


def test_compaction_item_then_the_answer() -> None:
    t = make_translator()
    events = t.events()
    item_id = t.open_compaction()
    events += t.events()
    assert [e["type"] for e in events[-2:]] == ["response.output_item.added", "response.compaction.compacting"]
    assert events[-1] == {
        "type": "response.compaction.compacting",
        "sequence_number": 3,
        "item_id": item_id,
        "output_index": 0,
    }
    with pytest.raises(LocalProtocolError):
        t.open_compaction()  # one at a time, and nothing else while it is open
    with pytest.raises(LocalProtocolError):
        t.add_mcp_list_tools("x", tools=[])
    t.close_compaction("sealed")
    t.count_output(output_tokens=7, reasoning_tokens=2)
    t.receive_tokens(tokens(ANSWER))
    t.receive_end("stop")
    events += t.events()
    check_stream(events)
    output = events[-1]["response"]["output"]
    assert output[0] == {"id": item_id, "type": "compaction", "encrypted_content": "sealed"}
    assert [item["type"] for item in output] == ["compaction", "message"]
    usage = events[-1]["response"]["usage"]
    assert usage["output_tokens"] == 7 + len(tokens(ANSWER)) and usage["output_tokens_details"]["reasoning_tokens"] == 2


def _fail(t: Translator) -> None:
    t.fail("The server shut down.")


def _cancel(t: Translator) -> None:
    t.cancel()


def _engine_error(t: Translator) -> None:
    t.receive_end("error", "GPU on fire")


@pytest.mark.parametrize("end", [_fail, _cancel, _engine_error])
def test_an_end_while_compacting_closes_the_item_empty(end: Callable[[Translator], None]) -> None:
    t = make_translator()
    events: list[dict[str, Any]] = t.events()
    item_id = t.open_compaction()
    end(t)
    events += t.events()
    check_stream(events)
    assert events[-1]["response"]["output"] == [{"id": item_id, "type": "compaction", "encrypted_content": ""}]
    assert events[-1]["type"] in ("response.failed", "response.incomplete")
