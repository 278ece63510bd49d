"""Text and messages with long runs of one character: the tokens harmony gives them, without its quadratic time."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from openai_harmony import (
    Author,
    DeveloperContent,
    Message,
    RenderOptions,
    Role,
    SystemContent,
    TextContent,
    ToolNamespaceConfig,
)

from harmony_responses import text_tokens
from harmony_responses.render._developer import build_developer_message
from harmony_responses.render._schema_ts import namespace_body
from harmony_responses.render._tools import ToolSpec, parse_tools
from harmony_responses.text_tokens import LONG_RUN, LongRunError, encode_text, has_long_run
from harmony_responses.vocab import load_encoding

ENCODING = load_encoding()

# Runs just past LONG_RUN and a few times it: long enough to be cut out, short enough for harmony's own
# (quadratic) encoding to compare against. The characters are the classes the pre-tokenizer tells apart.
RUNS = st.builds(
    lambda char, length: char * length,
    st.sampled_from(
        ["a", "é", "Z", "的", " ", "\t", "\n", "\r\n", "=", "/", "'s", " a", "😀", "\u0301", "Ab", "\x1c-"]
    ),
    st.integers(LONG_RUN // 2, 3 * LONG_RUN),
)
BITS = st.text(alphabet=st.sampled_from(list("abXY09 \t\n\r.,'!?-_/éÉ的😀\u0301<|>\x1c\x85\u3000")), max_size=40)
TEXTS = st.lists(st.one_of(RUNS, BITS), min_size=1, max_size=6).map("".join)


def _harmony(text: str) -> list[int]:
    return ENCODING.encode(text, disallowed_special=())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_text_with_long_runs_gets_harmonys_tokens(text: str) -> None:
    assert encode_text(text) == _harmony(text)


@pytest.mark.parametrize("unit", ["a", " ", "\n", "=", "\x1c----", "\x1f=", "é\u0301", "Ab", "的"])
def test_every_long_pre_token_is_found(unit: str) -> None:
    """Whatever a long pre-token is made of, it is found (the separators \x1c-\x1f are whitespace to Python
    and punctuation to the pre-tokenizer), and the text gets harmony's tokens."""
    text = "Look: " + unit * (3 * LONG_RUN // len(unit)) + " done"
    assert has_long_run(text)
    assert encode_text(text) == _harmony(text)
    assert not has_long_run("Look: " + unit * (LONG_RUN // 4 // len(unit)) + " done")


def test_special_tokens_text_is_ordinary_text() -> None:
    text = "<|end|>" + "a" * (2 * LONG_RUN) + "<|call|>"
    assert encode_text(text) == _harmony(text)
    assert max(encode_text(text)) < 199998


def test_a_long_run_takes_linear_time() -> None:
    """Harmony alone: 60,000 'é' took 3.9 s, and 300 kB of 'a' 34 s, holding the GIL. Here half a million go to
    the linear encoder, and come out as harmony tokenizes a shorter run of them (each 'é' a token)."""
    short = _harmony("say " + "é" * 1000 + " done")
    head, each, tail = short[:2], short[2], short[-1]
    assert short == [*head, *[each] * 999, tail]
    tokens = encode_text("say " + "é" * 500_000 + " done")
    assert tokens == [*head, *[each] * 499_999, tail]


def _messages(text: str) -> list[Message]:
    developer = DeveloperContent.new().with_instructions(f"Be brief.\n{text}\nThanks.")
    tools = developer.with_tools(
        ToolNamespaceConfig(name="functions", description=f"// {text}\ntype f = () => any;", tools=[])
    )
    return [
        Message.from_role_and_content(Role.USER, text),
        Message.from_role_and_content(Role.ASSISTANT, text).with_channel("final"),
        Message.from_role_and_content(Role.ASSISTANT, text).with_channel("analysis"),
        Message.from_role_and_content(Role.ASSISTANT, f'{{"q": "{text}"}}')
        .with_channel("commentary")
        .with_recipient("functions.lookup")
        .with_content_type("<|constrain|>json"),
        Message.from_author_and_content(Author.new(Role.TOOL, "functions.lookup"), text).with_channel("commentary"),
        Message(author=Author(role=Role.DEVELOPER), content=[developer]),
        Message(
            author=Author(role=Role.DEVELOPER), content=[tools, TextContent(text=f"\n\n# Response Formats\n\n{text}")]
        ),
        # One string twice: harmony prints the instructions as they are and rewrites the description's CRLFs.
        Message(
            author=Author(role=Role.DEVELOPER),
            content=[
                DeveloperContent.new()
                .with_instructions(text)
                .with_tools(ToolNamespaceConfig(name="functions", description=text, tools=[]))
            ],
        ),
    ]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
# A CRLF run inside one long pre-token (the emoji's punctuation, whose line ends and slashes follow it): a cut
# to its ends took the CRLFs out, so harmony's rewrite of them in a namespace's description did not show.
@example("😀" * 128 + "\r\n" * 128 + "/" * 128)
@example("=" * 300 + "\r\n" + "/" * 300)
def test_every_kind_of_message_renders_to_harmonys_tokens(text: str) -> None:
    for message in _messages(text):
        for tools in (False, True):
            options = RenderOptions(conversation_has_function_tools=tools)
            try:
                rendered = text_tokens.render(ENCODING, message, options)
            except LongRunError:
                # Never a message of one text. A developer message may be refused: harmony encodes its two
                # contents apart (a pre-token that would span both, ";" and the "\n\n" after it, cannot be had
                # from one encoding of the text), and it rewrites some strings (a run of "\r\n" in them).
                assert message.author.role == Role.DEVELOPER
                continue
            assert rendered == ENCODING.render(message, options)


def test_a_developer_message_as_requests_make_it_renders_to_harmonys_tokens() -> None:
    run = "─" * 3000  # a rule drawn in the instructions, a tool's description and the response format's
    tools = parse_tools(
        [{"type": "function", "name": "lookup", "description": f"Find it.\n{run}", "parameters": {}}],
        listed_mcp_tools={},
    )
    text = {"format": {"type": "json_schema", "name": "answer", "description": run, "schema": {"type": "object"}}}
    message = build_developer_message(instructions=f"Be brief.\n{run}\nThanks.", tools=tools, text=text)
    assert message is not None and len(message.content) == 2
    assert text_tokens.render(ENCODING, message) == ENCODING.render(message)


def test_a_message_without_a_long_run_is_harmonys_own() -> None:
    for message in _messages("Hello there, how are you?"):
        assert not has_long_run(message.to_json())
        assert text_tokens.render(ENCODING, message) == ENCODING.render(message)


def test_a_long_run_outside_the_body_is_refused() -> None:
    message = (
        Message.from_role_and_content(Role.ASSISTANT, "{}")
        .with_channel("commentary")
        .with_recipient("functions." + "a" * 5000)
    )
    with pytest.raises(LongRunError):
        text_tokens.render(ENCODING, message)


@pytest.mark.parametrize("run", ["─" * 2000, "=" * 600, "a" * 1000, " " * 800 + "x", "\n" * 400])
def test_a_system_message_with_an_mcp_servers_tools_renders_to_harmonys_tokens(run: str) -> None:
    """An MCP server's descriptions are the client's (or the server's) text: pre-rendered as our system message
    carries them (render/_system.py), a long run in them gets harmony's tokens."""
    tool = ToolSpec(
        "search", f"Search {run} it", {"type": "object", "properties": {"q": {"type": "string", "description": run}}}
    )
    body = namespace_body("mcp_docs", f"Docs server.\n{run}", [tool])
    content = (
        SystemContent.new()
        .with_conversation_start_date("2025-06-01")
        .with_tools(ToolNamespaceConfig(name="mcp_docs", description=body, tools=[]))
    )
    message = Message.from_role_and_content(Role.SYSTEM, content)
    assert text_tokens.render(ENCODING, message) == ENCODING.render(message)
