"""``truncation``: making the rendered prompt fit the context window, or saying it does not.

``disabled`` (the default): a prompt that leaves less than ``MIN_OUTPUT_TOKENS`` of the window gets 400
``context_length_exceeded``, as the API does. ``auto``: the oldest *turns* are dropped — a turn starts at
a user message and runs to the next one, so a function call always leaves together with its output and
the renderer never sees an orphaned ``function_call_output``. System and developer messages, and
``compaction`` items (each stands for the whole history before it), are kept wherever they stand, and the
last turn always stays. The prompt is re-rendered for each candidate cut,
found by binary search over turn boundaries (O(log turns) renders, since fewer turns never render longer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from ..errors import APIError

__all__ = ["MIN_OUTPUT_TOKENS", "render_to_fit"]

# The smallest ``max_output_tokens`` the API accepts: a prompt must leave at least that much room.
MIN_OUTPUT_TOKENS = 16


class _Rendered(Protocol):
    @property
    def token_ids(self) -> list[int]: ...


R = TypeVar("R", bound=_Rendered)


def _is_message(item: Mapping[str, Any], roles: tuple[str, ...]) -> bool:
    return item.get("type", "message") == "message" and item.get("role") in roles


def _kept_anyway(item: Mapping[str, Any]) -> bool:
    # A compaction item stands for the history before it: dropping it would drop all of that at once.
    return _is_message(item, ("system", "developer")) or item.get("type") == "compaction"


def _overflow(tokens: int, window: int) -> APIError:
    return APIError(
        f"Your input exceeds the context window of this model ({tokens} prompt tokens; the context window is "
        f"{window} tokens, and at least {MIN_OUTPUT_TOKENS} must be left for the output). Please adjust your "
        "input and try again, or set 'truncation' to 'auto' to drop the oldest turns.",
        param="input",
        code="context_length_exceeded",
    )


def render_to_fit(
    body: Mapping[str, Any], render: Callable[[dict[str, Any]], R], *, context_window: int, truncation: str
) -> R:
    """Render ``body``, dropping its oldest turns first when ``truncation`` is ``auto`` and it must.

    Raises:
        APIError: 400 ``context_length_exceeded`` when even the shortest allowed prompt does not fit.
        RenderError: from ``render``.
    """
    limit = context_window - MIN_OUTPUT_TOKENS
    rendered = render(dict(body))
    if len(rendered.token_ids) <= limit:
        return rendered
    items = body.get("input")
    if truncation != "auto" or not isinstance(items, list):
        raise _overflow(len(rendered.token_ids), context_window)

    starts = [i for i, item in enumerate(items) if _is_message(item, ("user",))]
    # Dropping k turns keeps items from starts[k] on; k = len(starts) - 1 keeps only the last turn.
    candidates = list(range(1, len(starts)))
    if starts and starts[0] > 0:
        candidates.insert(0, 0)  # items before the first user message (an assistant greeting) go first

    def cut(k: int) -> dict[str, Any]:
        start = starts[k]
        kept = [item for item in items[:start] if _kept_anyway(item)] + items[start:]
        return {**body, "input": kept}

    best: R | None = None
    shortest = len(rendered.token_ids)
    lo, hi = 0, len(candidates) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        attempt = render(cut(candidates[mid]))
        if len(attempt.token_ids) <= limit:
            best, hi = attempt, mid - 1
        else:
            shortest = min(shortest, len(attempt.token_ids))
            lo = mid + 1
    if best is None:
        raise _overflow(shortest, context_window)
    return best
