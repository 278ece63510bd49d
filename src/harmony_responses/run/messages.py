"""vLLM's ``enable_response_messages``: the Harmony messages of a response's prompt and of its output.

Asked for (the request field ``enable_response_messages: true``), the Response carries ``input_messages``
(every message the prompt was rendered from: system, developer, the conversation) and ``output_messages``
(the messages the model wrote, and the built-in tools' results fed back to it in the tool loop, in order), each
as ``openai_harmony.Message.to_dict()``: ``{"role", "name", "content": [...], "channel"?, "recipient"?,
"content_type"?}``. ``input_messages`` is there from ``response.created`` on; ``output_messages`` is ``[]``
until the terminal event. Not asked for, neither key is there: the Response stays the API's.

The model's messages are parsed from the very tokens it generated in each engine call (with the prompt's
prefill before the first), up to the tool call where the loop cut it; a last message cut short (a length cut)
is kept as far as it was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from openai_harmony import HarmonyError, Message, Role, StreamableParser

from ..vocab import load_encoding

__all__ = ["ResponseMessages", "wants_messages"]


def wants_messages(body: Any) -> bool:
    return isinstance(body, dict) and body.get("enable_response_messages") is True


def _plain(message: Message) -> dict[str, Any]:
    # JSON-ready (roles as their strings): what the Response carries and the store keeps.
    return orjson.loads(orjson.dumps(message.to_dict()))


class ResponseMessages:
    """The messages of one response: its prompt's (given) and its output's (collected as the run goes)."""

    def __init__(self, prompt: Sequence[Message], prefill: Sequence[int] = ()) -> None:
        self.input = [_plain(message) for message in prompt]
        self._prefill = list(prefill)
        self._output: list[dict[str, Any]] = []

    def fields(self) -> dict[str, Any]:
        """The Response keys from ``response.created`` on (``output_messages`` filled at the end)."""
        return {"input_messages": self.input, "output_messages": []}

    def generated(self, tokens: Iterable[int]) -> None:
        """One engine call's tokens as the model wrote them (up to its tool call): its messages, in order."""
        ids, self._prefill = [*self._prefill, *tokens], []
        parser = StreamableParser(load_encoding(), role=Role.ASSISTANT)
        try:
            for token in ids:
                parser.process(token)
        except HarmonyError:
            pass  # output that is not valid Harmony: the messages up to it (the translator says what went wrong)
        self._output += [_plain(message) for message in parser.messages]
        text = parser.current_content
        if text:
            # Cut short (a length cut, a stop inside a message): the message as far as it was written.
            partial = Message.from_role_and_content(Role.ASSISTANT, text)
            if parser.current_channel is not None:
                partial = partial.with_channel(parser.current_channel)
            if parser.current_recipient is not None:
                partial = partial.with_recipient(parser.current_recipient)
            if parser.current_content_type is not None:
                partial = partial.with_content_type(parser.current_content_type)
            self._output.append(_plain(partial))

    def tool_result(self, message: Message) -> None:
        """A built-in tool's result, fed back to the model."""
        self._output.append(_plain(message))

    def output(self) -> list[dict[str, Any]]:
        return list(self._output)
