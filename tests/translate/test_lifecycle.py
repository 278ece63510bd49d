"""Background lifecycle (queued → in_progress) and cancellation (``Translator.begin`` / ``Translator.cancel``)."""

from __future__ import annotations

import pytest

from harmony_responses.translate import LocalProtocolError, Translator

from .helpers import CALL, RETURN, VOCAB, Clock, id_factory, tokens
from .invariants import check_stream

WEB_SEARCH = [{"type": "web_search"}]


def queued_translator(**kwargs: object) -> Translator:
    return Translator(vocab=VOCAB, new_id=id_factory(), clock=Clock(), queued=True, **kwargs)  # type: ignore[arg-type]


def test_Translator_queued_starts_with_created_and_queued() -> None:
    t = queued_translator()
    events = t.events()
    assert [e["type"] for e in events] == ["response.created", "response.queued"]
    assert [e["response"]["status"] for e in events] == ["queued", "queued"]
    assert t.response["status"] == "queued"
    t.begin()
    (started,) = t.events()
    assert started["type"] == "response.in_progress" and started["sequence_number"] == 2
    assert started["response"]["status"] == "in_progress"
    t.receive_tokens(tokens("<|channel|>final<|message|>Hi<|return|>"))
    t.receive_end("stop")
    check_stream(events + [started] + t.events())


def test_Translator_queued_refuses_tokens_before_begin() -> None:
    t = queued_translator()
    with pytest.raises(LocalProtocolError):
        t.receive_tokens(tokens("<|channel|>final<|message|>Hi"))
    t.begin()
    with pytest.raises(LocalProtocolError):
        t.begin()


def test_Translator_begin_is_only_for_queued_responses() -> None:
    t = Translator(vocab=VOCAB, new_id=id_factory(), clock=Clock())
    with pytest.raises(LocalProtocolError):
        t.begin()


def test_Translator_cancel_while_queued() -> None:
    t = queued_translator()
    t.cancel()
    events = t.events()
    assert [e["type"] for e in events] == ["response.created", "response.queued", "response.incomplete"]
    assert events[-1]["response"]["status"] == "cancelled"
    check_stream(events)
    t.begin()  # the runner may still call it: nothing starts
    assert t.events() == []


@pytest.mark.parametrize(
    "generated",
    [
        "",
        "<|channel|>analysis<|message|>Thinking about",
        "<|channel|>analysis<|message|>Done.<|end|><|start|>assistant<|channel|>final<|message|>Half an ans",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a":',
        "<|channel|>analysis<|message|>Done.<|end|><|start|>assistant<|channel|>fin",
        "Text without a header",
    ],
)
def test_Translator_cancel_closes_the_open_item_incomplete(generated: str) -> None:
    t = Translator(vocab=VOCAB, new_id=id_factory(), clock=Clock())
    t.receive_tokens(tokens(generated))
    events = t.events()
    t.cancel()
    events += t.events()
    check_stream(events)
    last = events[-1]
    assert last["type"] == "response.incomplete"
    response = last["response"]
    assert response["status"] == "cancelled" and response["incomplete_details"] is None
    assert response["usage"]["output_tokens"] == len(tokens(generated))
    if response["output"]:
        assert response["output"][-1]["status"] in ("incomplete", "completed")
    assert t.closed
    t.cancel()  # idempotent
    assert t.events() == []


def test_Translator_cancel_while_a_builtin_call_waits_for_its_result() -> None:
    t = Translator(vocab=VOCAB, new_id=id_factory(), clock=Clock(), recipients=_web_search())
    t.receive_tokens(tokens('<|channel|>analysis to=browser.search code<|message|>{"query": "x"}') + [CALL])
    events = t.events()
    assert t.pending_tool_call is not None
    t.cancel()
    events += t.events()
    check_stream(events)
    assert events[-1]["response"]["output"][-1]["status"] == "incomplete"


def test_Translator_cancel_after_the_end_changes_nothing() -> None:
    t = Translator(vocab=VOCAB, new_id=id_factory(), clock=Clock())
    t.receive_tokens(tokens("<|channel|>final<|message|>Hi") + [RETURN])
    t.receive_end("stop")
    events = t.events()
    t.cancel()
    assert t.events() == []
    assert events[-1]["type"] == "response.completed"


def _web_search():  # type: ignore[no-untyped-def]
    from harmony_responses.translate import RecipientMap

    return RecipientMap.from_tools(WEB_SEARCH)


def test_Translator_fail_ends_failed_with_the_message() -> None:
    t = Translator(vocab=VOCAB, new_id=id_factory(), clock=Clock())
    t.receive_tokens(tokens("<|channel|>final<|message|>Half"))
    events = t.events()
    t.fail("The server shut down.")
    events += t.events()
    check_stream(events)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "The server shut down."}
    assert events[-1]["response"]["output"][-1]["status"] == "incomplete"
    t.fail("again")
    assert t.events() == []
