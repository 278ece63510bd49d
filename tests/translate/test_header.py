"""parse_header: reading a Harmony header's intent, including the malformed headers of harmony.md §9."""

from __future__ import annotations

import pytest

from harmony_responses.translate import RecipientMap
from harmony_responses.translate._header import Header, normalise_channel, parse_header

TOOLS = RecipientMap.from_tools(
    [
        {"type": "function", "name": "get_weather"},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "web_search"},
        {"type": "mcp", "server_label": "deepwiki"},
    ]
)


def header(
    channel: str | None = None,
    recipient: str | None = None,
    content_type: str | None = None,
    role: str | None = None,
    to_assistant: bool = False,
) -> Header:
    return Header(channel, recipient, content_type, role, to_assistant)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Well-formed headers, as the model generates them (harmony.md §2).
        ("<|channel|>final", header("final")),
        ("<|channel|>analysis", header("analysis")),
        ("assistant<|channel|>analysis", header("analysis")),
        (
            "<|channel|>commentary to=functions.get_weather <|constrain|>json",
            header("commentary", "functions.get_weather", "json"),
        ),
        ("<|channel|>analysis to=python code", header("analysis", "python", "code")),
        ("<|channel|>analysis to=browser.search code", header("analysis", "browser.search", "code")),
        # The recipient in the role position, as Harmony renders history (§6.1, §9.2).
        ("assistant to=python<|channel|>analysis code", header("analysis", "python", "code")),
        (
            "assistant to=functions.f<|channel|>commentary <|constrain|>json",
            header("commentary", "functions.f", "json"),
        ),
        ("assistant:bob<|channel|>final", header("final")),
        # <|constrain|> glued to the recipient or the channel.
        ("<|channel|>commentary to=functions.f<|constrain|>json", header("commentary", "functions.f", "json")),
        ("<|channel|>final<|constrain|>json", header("final", None, "json")),
        # §9.2: `final json` is a content type, not a recipient `json`.
        ("<|channel|>final json", header("final", None, "json")),
        ("<|channel|>final <|constrain|>json", header("final", None, "json")),
        # §9.2: a doubled <|channel|>: the last channel wins, a recipient before it is kept.
        ("<|channel|>analysis<|channel|>final", header("final")),
        (
            "<|channel|>commentary to=functions.f<|channel|>commentary <|constrain|>json",
            header("commentary", "functions.f", "json"),
        ),
        # §9.2: `commentaryto=functions.f`.
        ("<|channel|>commentaryto=functions.f", header("commentary", "functions.f")),
        ("<|channel|>commentaryto=functions.f <|constrain|>json", header("commentary", "functions.f", "json")),
        # §9.1: duplicated to=, and trailing words: the first recipient and the first content type win.
        ("<|channel|>commentary to=functions.f to=functions.f", header("commentary", "functions.f")),
        ("<|channel|>commentary to=functions.f to=functions.g", header("commentary", "functions.f")),
        ("<|channel|>commentary to=functions.f json extra", header("commentary", "functions.f", "json")),
        # A bare word naming a declared tool is a recipient (the model dropped `to=`).
        ("<|channel|>commentary functions.get_weather json", header("commentary", "functions.get_weather", "json")),
        ("<|channel|>analysis python code", header("analysis", "python", "code")),
        ("<|channel|>analysis browser.open", header("analysis", "browser.open")),
        ("<|channel|>commentary deepwiki.ask_question", header("commentary", "deepwiki.ask_question")),
        # …but not one that names no declared tool.
        ("<|channel|>analysis browser.click", header("analysis", None, "browser.click")),
        # Back-to-the-assistant recipients are not tools.
        ("<|channel|>final to=assistant", header("final", to_assistant=True)),
        ("<|channel|>final to=user", header("final", to_assistant=True)),
        ("<|channel|>final to=all", header("final", to_assistant=True)),
        ("<|channel|>commentary to=", header("commentary", to_assistant=True)),
        # A tool result written by the model: the role slot holds the tool's name (§5.1).
        ("functions.f to=assistant<|channel|>commentary", header("commentary", None, None, "functions.f", True)),
        ("python to=assistant<|channel|>analysis", header("analysis", None, None, "python", True)),
        ("browser.search to=assistant<|channel|>analysis", header("analysis", None, None, "browser.search", True)),
        # A bare tool name in the role part of a header without a channel is a recipient, not a role.
        ("functions.get_weather", header(None, "functions.get_weather")),
        ("user", header(None, None, None, "user")),
        # Empty and channel-less headers.
        ("", header()),
        ("assistant", header()),
        ("<|channel|>", header()),
        ("<|channel|> to=functions.f", header(None, "functions.f")),
        ("<|channel|>final\n", header("final")),
        # Channels are kept as written; the translator normalises them.
        ("<|channel|>commentary?", header("commentary?")),
        ("<|channel|>foo", header("foo")),
    ],
)
def test_parse_header(text: str, expected: Header) -> None:
    assert parse_header(text, TOOLS.is_tool_name) == expected


def test_constrain_before_the_channel_does_not_hide_the_channel() -> None:
    """A header begun by a stray ``<|constrain|>`` (BETWEEN/CONSTRAIN) still reads as a final message."""
    parsed = parse_header("<|constrain|>json<|channel|>final", TOOLS.is_tool_name)
    assert (parsed.channel, parsed.recipient, parsed.addressed_to_assistant) == ("final", None, False)


def test_bare_words_are_recipients_only_when_the_predicate_says_so() -> None:
    never = parse_header("<|channel|>analysis python code", lambda word: False)
    assert never == header("analysis", None, "python")


@pytest.mark.parametrize(
    ("channel", "normalised"),
    [
        (None, None),
        ("analysis", "analysis"),
        ("commentary", "commentary"),
        ("final", "final"),
        ("commentary?", "commentary"),
        ("Final", "final"),
        ("finalx", "final"),
        ("ANALYSIS.", "analysis"),
        ("foo", "foo"),
        ("", ""),
    ],
)
def test_normalise_channel(channel: str | None, normalised: str | None) -> None:
    assert normalise_channel(channel) == normalised
