"""The renderer renders message by message through a cache; the prompt must be what harmony renders whole.

``render_request`` concatenates each message's cached tokens instead of asking harmony to render the
conversation. These tests generate conversations (every input item kind the renderer turns into
messages, with and without function tools) and compare the prompt, on a cold and on a warm cache, with
harmony's own rendering of the same messages: the system message with its options, then the rest as one
conversation for completion, then the prefill.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai_harmony import Author, Conversation, Message, RenderConversationConfig, RenderOptions, Role, TextContent

from harmony_responses.render import render_request
from harmony_responses.render._cache import MessageCache
from harmony_responses.render._request import MESSAGES
from harmony_responses.vocab import load_encoding

TEXT = st.lists(
    st.one_of(st.text(st.characters(codec="utf-8"), max_size=8), st.sampled_from(["<|end|>", "<|start|>", " ", "\n"])),
    max_size=6,
).map("".join)
FUNCTION = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}


@st.composite
def turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Input items: user and assistant messages, reasoning, and function calls with their outputs."""
    items: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 4))):
        items.append({"type": "message", "role": "user", "content": draw(TEXT)})
        if draw(st.booleans()):
            items.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{n}",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": draw(TEXT)}],
                }
            )
        if draw(st.booleans()):
            call = f"call_{n}"
            items.append({"type": "function_call", "call_id": call, "name": "lookup", "arguments": "{}"})
            items.append({"type": "function_call_output", "call_id": call, "output": draw(TEXT)})
        if draw(st.booleans()):
            items.append(
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": draw(TEXT)}]}
            )
    return items


def harmony_whole(prompt: Any, *, function_tools: bool) -> list[int]:
    encoding = load_encoding()
    system, *rest = prompt.conversation.messages
    tokens = encoding.render(system, RenderOptions(conversation_has_function_tools=function_tools))
    tokens += encoding.render_conversation_for_completion(
        Conversation.from_messages(rest), Role.ASSISTANT, RenderConversationConfig(auto_drop_analysis=False)
    )
    return tokens + prompt.prefill_ids


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=turns(),
    instructions=st.one_of(st.none(), TEXT),
    functions=st.booleans(),
    choice=st.sampled_from(["auto", "required"]),
)
def test_cached_rendering_equals_harmonys_whole_conversation(
    items: list[dict[str, Any]], instructions: str | None, functions: bool, choice: str
) -> None:
    request: dict[str, Any] = {"input": items, "instructions": instructions}
    if functions:
        request |= {"tools": [FUNCTION], "tool_choice": choice}
    MESSAGES.clear()
    cold = render_request(request, current_date="2025-06-01")
    warm = render_request(request, current_date="2025-06-01")
    assert cold.token_ids == warm.token_ids == harmony_whole(cold, function_tools=functions)


def test_the_cache_stays_within_its_token_budget_and_keeps_recent_messages() -> None:
    cache = MessageCache(max_tokens=200)
    encoding = load_encoding()
    prompts = [render_request({"input": f"message number {n} " * 5}, current_date="2025-06-01") for n in range(40)]
    for prompt in prompts:
        for message in prompt.conversation.messages:
            cache.render(encoding, message)
    assert cache._tokens <= 200
    last = prompts[-1].conversation.messages[-1]
    hits = cache.hits
    assert cache.render(encoding, last) == encoding.render(last)
    assert cache.hits == hits + 1  # the most recent message is still there


def test_messages_that_differ_in_one_field_each_get_their_own_tokens() -> None:
    """The cache's key for a text message is its fields, not its JSON: each field must tell messages apart."""

    def text(role: Role = Role.ASSISTANT, name: str | None = None) -> Message:
        return Message.from_author_and_content(Author(role=role, name=name), "same words")

    variants = [
        text(),
        text(Role.USER),
        text(Role.TOOL, name="functions.lookup"),
        text(Role.TOOL, name="browser.search"),
        text().with_channel("analysis"),
        text().with_channel("final"),
        text().with_channel("commentary").with_recipient("functions.lookup"),
        text().with_channel("commentary").with_recipient("functions.lookup").with_content_type("<|constrain|>json"),
        Message.from_role_and_contents(Role.ASSISTANT, [TextContent(text="same "), TextContent(text="words")]),
    ]
    cache = MessageCache()
    encoding = load_encoding()
    for message in variants + variants:  # the second round from the cache
        assert cache.render(encoding, message) == encoding.render(message)
    assert cache.hits == len(variants)
