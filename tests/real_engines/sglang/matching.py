"""What SGLang's xgrammar matcher made of a scripted generation: the scripted scheduler (no sampler runs)
replays the script's ids through the matcher SGLang compiled from our grammar and reports the first id it
refused (tests/real_engines/sglang/scripted_scheduler.py)."""

from __future__ import annotations

from typing import Any

import openai

from harmony_responses.vocab import load_encoding

from ..gateway import Gateway
from .conftest import SGLang

MODEL = "gpt-oss-20b"
Stack = tuple[SGLang, Gateway]


def matcher(stack: Stack, key: str, text: str, tools: list[dict[str, Any]], **create: Any) -> tuple[Any, Any]:
    """(the response, or the error it ended with, and what SGLang's xgrammar matcher made of the scripted ids)."""
    sglang, gateway = stack
    sglang.script.say(key, text)
    with gateway.client(max_retries=0) as client:
        try:
            response: Any = client.responses.create(
                model=MODEL, input=key, tools=tools, max_output_tokens=256, **create
            )
        except openai.InternalServerError as exc:  # a failed response, unstreamed
            response = exc
    received = sglang.request_for(key)
    assert received["sampling"] and received["sampling"].get("structural_tag"), received["sampling"]
    return response, received["grammar"]


def refused_where(text: str, grammar: dict[str, Any], violation: str, *, in_header: bool = False) -> None:
    """The matcher refused the id that crosses where the text leaves the grammar: just after ``violation``,
    its valid beginning, in the arguments (after the header) or, ``in_header``, in the call's header. Token
    boundaries need not fall there: ' "' is one id."""
    assert grammar["accepted_all"] is False, grammar
    encoding = load_encoding()
    ids = encoding.encode(text, allowed_special="all")
    accepted = encoding.decode(ids[: grammar["rejected_at"]])
    with_refused = encoding.decode(ids[: grammar["rejected_at"] + 1])
    header_end = text.rfind("<|message|>")  # none when the prompt wrote the header (a forced call)
    body = header_end + len("<|message|>") if header_end >= 0 and not in_header else 0
    point = text.index(violation, body) + len(violation)
    assert len(accepted) <= point < len(with_refused), (accepted, with_refused, violation)
