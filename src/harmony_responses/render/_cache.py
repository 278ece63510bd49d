"""Rendered messages, remembered: a Harmony message → its prompt tokens, computed once.

Clients resend the same messages with every request: the system message (the same for every request of
a day and a tool set), the developer message (Codex's instructions and tool declarations, tens of
thousands of tokens), and each turn of the conversation so far. openai-harmony renders a message in
about 100 µs plus its tokenization (a Codex-sized prompt takes ~60 ms), holding the GIL throughout. A
conversation renders to the concatenation of its messages (with ``auto_drop_analysis`` off, which is how
we render; a test checks the equality against harmony's own conversation rendering), so each message is
rendered on its own and looked up first.

The key is the message's JSON (harmony's own serialisation, which is what its renderer reads) with the
render options that apply to it; for a message of plain text (every turn of a conversation), the same fields
as a tuple, which takes a tenth of the time (harmony's ``to_json`` goes through pydantic and ``json``, ~4 µs a
message, for each message of every request). Entries are bounded by their total tokens and evicted least recently
used first. Rendering happens on the event loop and in worker threads, hence the lock.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from typing import Any

from openai_harmony import Conversation, HarmonyEncoding, Message, RenderOptions, Role, TextContent

from .. import text_tokens
from ._errors import RenderError

__all__ = ["MessageCache"]


def _key(message: Message) -> tuple[Any, ...] | str:
    """What tells ``message`` from every other: every field ``Message.to_json`` writes."""
    contents = message.content
    if all(type(content) is TextContent for content in contents):
        author = message.author
        texts = tuple(content.text for content in contents)  # type: ignore[attr-defined]
        return (author.role, author.name, message.channel, message.recipient, message.content_type, texts)
    return message.to_json()


class MessageCache:
    """An LRU map from (the message's key, function-tools flag) to the message's tokens, at most ``max_tokens``."""

    def __init__(self, max_tokens: int = 2_000_000) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[str, bool], array[int]] = OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()
        self._suffix: dict[Role, list[int]] = {}
        self.hits = 0
        self.misses = 0

    def render(self, encoding: HarmonyEncoding, message: Message, *, function_tools: bool = False) -> list[int]:
        """``encoding.render(message, …)``, from the cache when this message was rendered before."""
        key = (_key(message), function_tools)
        with self._lock:
            tokens = self._entries.get(key)
            if tokens is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return tokens.tolist()
        options = RenderOptions(conversation_has_function_tools=function_tools)
        try:
            rendered = text_tokens.render(encoding, message, options)  # linear in a long run of one character
        except text_tokens.LongRunError as exc:
            raise RenderError(
                f"A message of this request has a run of {text_tokens.LONG_RUN} or more characters without a break "
                f"that cannot be tokenized in reasonable time where it is: {exc}.",
                param=None,
                code="invalid_value",
            ) from None
        with self._lock:
            self.misses += 1
            if key not in self._entries and len(rendered) <= self.max_tokens:
                self._entries[key] = array("I", rendered)
                self._tokens += len(rendered)
                while self._tokens > self.max_tokens:
                    _, evicted = self._entries.popitem(last=False)
                    self._tokens -= len(evicted)
        return rendered

    def completion_suffix(self, encoding: HarmonyEncoding, role: Role) -> list[int]:
        """What ``render_conversation_for_completion`` appends after the messages (``<|start|>assistant``)."""
        suffix = self._suffix.get(role)
        if suffix is None:
            suffix = self._suffix[role] = encoding.render_conversation_for_completion(
                Conversation.from_messages([]), role
            )
        return list(suffix)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._tokens = 0
