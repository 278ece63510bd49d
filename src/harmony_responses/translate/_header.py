"""Reading a Harmony message header, leniently.

A header is everything between ``<|start|>`` (or the start of the completion, whose prompt ended with
``<|start|>assistant``) and ``<|message|>``: ``assistant<|channel|>commentary to=functions.f <|constrain|>json``.
openai-harmony's header parser rejects or silently misreads many headers real models write
(harmony.md §9: a duplicated ``to=``, ``final json`` read as a recipient ``json``, ``commentaryto=…``,
a doubled ``<|channel|>``). We read the intent instead:

- the channel is the first word after the last ``<|channel|>`` (``analysis<|channel|>final`` is final);
  a ``to=`` glued to it (``commentaryto=functions.f``) is split off;
- the recipient is the first ``to=X`` anywhere in the header, or a bare word that names a declared tool;
  ``to=assistant`` means no recipient;
- ``<|constrain|>X`` or any other bare word after the channel is the content type;
- words before the first ``<|channel|>`` other than ``assistant`` are a role: a header like
  ``functions.f to=assistant`` is a tool *result* the model wrote itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Header", "normalise_channel", "parse_header"]

CHANNEL = "<|channel|>"
CONSTRAIN = "<|constrain|>"
KNOWN_CHANNELS = ("analysis", "commentary", "final")


@dataclass(frozen=True, slots=True)
class Header:
    channel: str | None  # as written (None when the header has no channel)
    recipient: str | None
    content_type: str | None
    role: str | None  # a role other than assistant, e.g. "functions.f" when the model wrote a tool result
    addressed_to_assistant: bool  # the header said to=assistant


def normalise_channel(channel: str | None) -> str | None:
    """``analysis``/``commentary``/``final`` for those channels and near-misses (``commentary?``)."""
    if channel is None:
        return None
    lowered = channel.lower()
    for known in KNOWN_CHANNELS:
        if lowered.startswith(known):
            return known
    return channel


def parse_header(text: str, is_tool_name: Callable[[str], bool]) -> Header:
    role_part, *segments = text.replace(CONSTRAIN, " " + CONSTRAIN + " ").split(CHANNEL)
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None
    role: str | None = None
    to_assistant = False
    words_after_channel: list[str] = []

    for index, segment in enumerate(segments):
        words = segment.split()
        if words and not words[0].startswith(("to=", "<|")):
            word = words.pop(0)
            name, glued, target = word.partition("to=")
            if index == len(segments) - 1:
                channel = name
            if glued:
                words.insert(0, "to=" + target)
        elif index == len(segments) - 1:
            channel = ""
        words_after_channel.extend(words)

    def take_recipient(word: str) -> None:
        nonlocal recipient, to_assistant
        target = word[3:]
        if target in ("", "assistant", "all", "user"):
            to_assistant = True
        elif recipient is None:
            recipient = target

    for word in role_part.split():
        if word.startswith("to="):
            take_recipient(word)
        elif word == "assistant" or word.startswith("assistant:") or word.startswith("<|"):
            continue
        elif is_tool_name(word) and recipient is None and not segments:
            recipient = word
        elif role is None:
            role = word

    constrain_next = False
    for word in words_after_channel:
        if constrain_next:
            constrain_next = False
            content_type = content_type or word
        elif word == CONSTRAIN:
            constrain_next = True
        elif word.startswith("to="):
            take_recipient(word)
        elif word.startswith("<|"):
            continue
        elif recipient is None and is_tool_name(word):
            recipient = word
        elif content_type is None:
            content_type = word

    return Header(
        channel=channel or None,
        recipient=recipient,
        content_type=content_type,
        role=role,
        addressed_to_assistant=to_assistant,
    )
