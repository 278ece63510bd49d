"""Compaction: the model summarises the conversation so far, and the summary is sealed into a ``compaction`` item.

Three ways in, one way of summarising:

- ``POST /v1/responses/compact`` (``compact``, through ``Server.compact``): a ``CompactedResponse``
  (``object: "response.compaction"``) whose ``output`` is the conversation's user messages followed by one
  ``compaction`` item, and the summary's ``usage``. Nothing is stored.
- A create whose input ends with a ``compaction_trigger`` item (what Codex's built-in provider sends for
  auto-compaction, as ``responses_compaction_v2``): the response *is* the compaction, its ``output`` the
  one ``compaction`` item. Codex keeps the user and developer messages itself and resends them with it.
- ``context_management: [{"type": "compaction", "compact_threshold": N}]`` on a create whose rendered prompt
  is longer than N tokens: the response compacts first (the ``compaction`` item is ``output[0]``), then
  answers from the compacted conversation (the prompt as if the client had sent the kept messages and the
  item), in the same response; ``usage`` counts both engine calls.

In every mode the item is announced at once (``response.output_item.added``, then
``response.compaction.compacting``), and its ``output_item.done`` carries the sealed summary; the summary's
own tokens are never streamed (the API's item is opaque). A response that ends before the summary is sealed
(engine failure, cancel, shutdown) closes the item with an empty ``encrypted_content``, which no request can
send back.

The summary is an ordinary run through the normal path: the conversation rendered with ``summarize=True``
(render/_compaction.py: the same prompt the answer would have, plus a user message asking for the summary and
the final channel prefilled) → the engine → a translator of its own, whose events nobody sees; its final
answer's text is the summary. It is sealed with the reasoning key under its own kind (request/sealed.py), so
only this server opens it, and a reasoning blob is not a compaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..engine import GenerateRequest
from ..request.sealed import COMPACTION, ReasoningSealer
from ..translate import Translator, usage_object

if TYPE_CHECKING:
    from .loop import ResponseRun

__all__ = ["Compaction", "Summary", "compacted_output", "record_summary", "write_summary"]


@dataclasses.dataclass(frozen=True, slots=True)
class Summary:
    """What the summary run produced: its text (None: it failed, ``problem`` says why) and its token counts."""

    text: str | None
    problem: str
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int

    def usage(self) -> dict[str, Any]:
        return usage_object(
            input_tokens=self.input_tokens,
            cached_tokens=self.cached_tokens,
            output_tokens=self.output_tokens,
            reasoning_tokens=self.reasoning_tokens,
        )


# The answer after a compaction: given the compaction item (its summary opened), the engine call to make and
# the prefill the translator receives first. Raises APIError when the compacted conversation cannot be rendered.
AnswerPrompt = Callable[[dict[str, Any]], Awaitable[tuple[GenerateRequest, list[int]]]]


@dataclasses.dataclass(slots=True)
class Compaction:
    """A response's compaction step (``ResponseRun(compaction=…)``).

    Args:
        summary: the run that writes the summary (its events are not shown).
        sealer: seals the summary into the item's ``encrypted_content``.
        answer: the answer's prompt from the compacted conversation; None for a ``compaction_trigger``
            response, which ends when the item is done.
    """

    summary: ResponseRun
    sealer: ReasoningSealer
    answer: AnswerPrompt | None = None

    def seal(self, text: str) -> str:
        return self.sealer.seal(text, COMPACTION)


def _answer_text(response: dict[str, Any]) -> str:
    texts = [
        part.get("text", "")
        for item in response.get("output") or ()
        if item.get("type") == "message"
        for part in item.get("content") or ()
        if part.get("type") == "output_text"
    ]
    return "\n".join(texts).strip()


async def write_summary(run: ResponseRun) -> Summary:
    """Run the summary run (started) to its end, its events dropped, and read the summary from its final answer."""
    try:
        async for _ in run.batches():
            pass
    finally:
        await run.aclose()
    t = run.translator
    response = run.final or t.response
    text = _answer_text(response)
    problem = ""
    if response.get("status") != "completed":
        error = response.get("error") or {}
        reason = (response.get("incomplete_details") or {}).get("reason")
        why = error.get("message") or (f"it was cut short ({reason})" if reason else response.get("status"))
        problem = f"The conversation could not be compacted: writing its summary failed: {why}"
    elif not text:
        problem = "The conversation could not be compacted: the model wrote no summary."
    return Summary(
        text=text if not problem else None,
        problem=problem,
        input_tokens=t.input_tokens,
        cached_tokens=t.cached_tokens,
        output_tokens=t.output_tokens,
        reasoning_tokens=t.reasoning_tokens,
    )


def compacted_output(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user messages a ``/v1/responses/compact`` output keeps, as they were sent (summaries are never kept:
    the new compaction item replaces them)."""
    kept = []
    for item in items:
        if item.get("type", "message") == "message" and item.get("role") == "user":
            kept.append({k: v for k, v in item.items() if k != "summary"})
    return kept


def record_summary(translator: Translator, summary: Summary) -> None:
    """Count the summary's engine call in the response's usage."""
    translator.receive_usage(prompt_tokens=summary.input_tokens, cached_tokens=summary.cached_tokens)
    translator.count_output(output_tokens=summary.output_tokens, reasoning_tokens=summary.reasoning_tokens)
