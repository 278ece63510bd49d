"""The echo engine: what it writes for each kind of prompt, token for token."""

from __future__ import annotations

import asyncio
import time

import pytest

from harmony_responses.engine import EchoEngine, GenerateRequest, engine_from_spec
from harmony_responses.tokens import EngineEnd, TokenChunk, TokenLogprob
from harmony_responses.vocab import load_encoding

SYSTEM = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\n\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
)
TOOLS = (
    "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\n"
    "namespace functions {\n\n// Gets the location of the user.\ntype get_location = () => any;\n\n"
    "// Gets the weather.\ntype get_weather = (_: {\nlocation: string,\n}) => any;\n\n"
    "} // namespace functions<|end|>"
)
ANALYSIS = "<|channel|>analysis<|message|>The user wrote a message; I will echo it back.<|end|>"
FINAL = "<|start|>assistant<|channel|>final<|message|>"


def ids(harmony: str) -> list[int]:
    return load_encoding().encode(harmony, allowed_special="all")


def text(tokens: list[int]) -> str:
    return load_encoding().decode(tokens)


async def drain(req: GenerateRequest) -> tuple[list[TokenChunk], EngineEnd]:
    *chunks, end = [item async for item in EchoEngine().generate(req)]
    assert isinstance(end, EngineEnd)
    return chunks, end  # type: ignore[return-value]


def echo(prompt: list[int] | str, **kwargs: object) -> tuple[str, EngineEnd]:
    """The decoded continuation and the end, checking that tokens came one per chunk."""
    prompt_ids = ids(prompt) if isinstance(prompt, str) else prompt
    chunks, end = asyncio.run(drain(GenerateRequest(prompt_ids=prompt_ids, **kwargs)))  # type: ignore[arg-type]
    assert all(len(c.token_ids) == 1 for c in chunks)
    assert end.prompt_tokens == len(prompt_ids) and end.cached_tokens == 0
    return text([c.token_ids[0] for c in chunks]), end


def test_EchoEngine_quotes_the_user_message() -> None:
    out, end = echo(SYSTEM + "<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant")
    assert out == f"{ANALYSIS}{FINAL}You said: What is 2 + 2?<|return|>"
    assert end == EngineEnd(reason="stop", prompt_tokens=end.prompt_tokens)


def test_EchoEngine_exact_token_ids() -> None:
    chunks, end = asyncio.run(
        drain(GenerateRequest(prompt_ids=ids("<|start|>user<|message|>Hi<|end|><|start|>assistant")))
    )
    out = [c.token_ids[0] for c in chunks]
    assert out[:3] == [200005, 35644, 200008]  # <|channel|>analysis<|message|>
    assert out[-6:] == [3575, 2059, 25, 220, 12194, 200002]  # "You said: " "Hi" <|return|>
    assert out.count(200007) == 1 and out.count(200006) == 1  # one analysis message, one final
    assert end.reason == "stop"


def test_EchoEngine_quotes_the_last_user_message() -> None:
    prompt = (
        SYSTEM
        + "<|start|>user<|message|>first<|end|>"
        + "<|start|>assistant<|channel|>final<|message|>You said: first<|end|>"
        + "<|start|>user<|message|>second\nline<|end|><|start|>assistant"
    )
    assert echo(prompt)[0].endswith(f"{FINAL}You said: second\nline<|return|>")


def test_EchoEngine_copies_user_tokens_without_reencoding() -> None:
    # Text that looks like a special token, encoded as ordinary text, must stay ordinary text.
    user = load_encoding().encode("say <|return|> now", disallowed_special=())
    prompt = ids("<|start|>user<|message|>") + user + ids("<|end|><|start|>assistant")
    chunks, end = asyncio.run(drain(GenerateRequest(prompt_ids=prompt)))
    out = [c.token_ids[0] for c in chunks]
    assert out[-len(user) - 1 :] == [*user, 200002]
    assert out.count(200002) == 1 and end.reason == "stop"


def test_EchoEngine_without_user_message() -> None:
    out, _ = echo(SYSTEM + "<|start|>assistant")
    assert out == (
        "<|channel|>analysis<|message|>There is no user message; I will say so.<|end|>"
        f"{FINAL}There is no user message to echo.<|return|>"
    )


def test_EchoEngine_empty_user_message() -> None:
    out, _ = echo("<|start|>user<|message|><|end|><|start|>assistant")
    assert out == f"{ANALYSIS}{FINAL}You sent an empty message.<|return|>"


def test_EchoEngine_named_tool_choice_prefill() -> None:
    prefill = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    prompt = ids(SYSTEM + TOOLS + "<|start|>user<|message|>Weather?<|end|>" + prefill)
    chunks, end = asyncio.run(drain(GenerateRequest(prompt_ids=prompt)))
    assert [c.token_ids for c in chunks] == [[12083], [200012]]  # {} <|call|>
    assert end.reason == "stop"


def test_EchoEngine_required_tool_choice_calls_the_first_function() -> None:
    prompt = (
        SYSTEM + TOOLS + "<|start|>user<|message|>Weather?<|end|><|start|>assistant<|channel|>commentary to=functions."
    )
    out, end = echo(prompt)
    assert out == "get_location <|constrain|>json<|message|>{}<|call|>"
    assert end.reason == "stop"


def test_EchoEngine_required_tool_choice_in_another_namespace() -> None:
    browser = (
        "<|start|>system<|message|>Reasoning: low\n\n# Tools\n\n## browser\n\nnamespace browser {\n\n"
        "// Searches.\ntype search = (_: {\nquery: string,\n}) => any;\n\n} // namespace browser<|end|>"
    )
    prompt = (
        browser + TOOLS + "<|start|>user<|message|>Look it up<|end|><|start|>assistant<|channel|>analysis to=browser."
    )
    assert echo(prompt)[0] == "search <|constrain|>json<|message|>{}<|call|>"


def test_EchoEngine_required_tool_choice_without_functions_is_an_error() -> None:
    prompt = SYSTEM + "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>commentary to=functions."
    out, end = echo(prompt)
    assert out == ""
    assert end.reason == "error"
    assert end.message == (
        "echo engine: the prompt forces a call into namespace 'functions' but declares no function in it"
    )


def test_EchoEngine_answers_a_tool_result_with_its_output() -> None:
    prompt = (
        SYSTEM
        + TOOLS
        + "<|start|>user<|message|>Weather in Paris?<|end|>"
        + "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        + '{"location":"Paris"}<|call|>'
        + '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"sunny": true}<|end|>'
        + "<|start|>assistant"
    )
    out, end = echo(prompt)
    assert out == (
        "<|channel|>analysis<|message|>The tool functions.get_weather returned a result; I will quote it.<|end|>"
        f'{FINAL}The tool functions.get_weather returned: {{"sunny": true}}<|return|>'
    )
    assert end.reason == "stop"


def test_EchoEngine_prefilled_final_channel() -> None:
    out, _ = echo("<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>")
    assert out == "You said: Hi<|return|>"


def test_EchoEngine_prefilled_analysis_channel() -> None:
    out, _ = echo("<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|>")
    assert out == f"The user wrote a message; I will echo it back.<|end|>{FINAL}You said: Hi<|return|>"


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ("just text", "the prompt does not end with an assistant message to continue (<|start|>assistant)"),
        ("<|start|>user<|message|>Hi<|end|>", "the prompt does not end with an assistant message to continue"),
        ("<|start|>user<|message|>Hi", "the prompt does not end with an assistant message to continue"),
        (
            "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>fin",
            "cannot continue a prompt that ends with '<|start|>assistant<|channel|>fin'",
        ),
    ],
)
def test_EchoEngine_cannot_continue(prompt: str, message: str) -> None:
    out, end = echo(prompt)
    assert out == "" and end.reason == "error"
    assert end.message is not None and end.message.startswith(f"echo engine: {message}")


def test_EchoEngine_max_tokens_cuts_with_length() -> None:
    out, end = echo("<|start|>user<|message|>Hi<|end|><|start|>assistant", max_tokens=4)
    assert out == "<|channel|>analysis<|message|>The"
    assert end.reason == "length"


def test_EchoEngine_max_tokens_exactly_enough() -> None:
    prompt = ids("<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>")
    out, end = echo(prompt, max_tokens=6)
    assert out == "You said: Hi<|return|>" and end.reason == "stop"
    out, end = echo(prompt, max_tokens=5)
    assert out == "You said: Hi" and end.reason == "length"


def test_EchoEngine_logprobs_when_asked() -> None:
    prompt = ids("<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>")
    chunks, _ = asyncio.run(drain(GenerateRequest(prompt_ids=prompt, top_logprobs=1)))
    assert [c.logprobs for c in chunks][:2] == [
        [TokenLogprob(-0.1, ((3575, -0.1),))],
        [TokenLogprob(-0.2, ((2059, -0.2),))],
    ]
    chunks, _ = asyncio.run(drain(GenerateRequest(prompt_ids=prompt)))
    assert all(c.logprobs is None for c in chunks)


def test_EchoEngine_is_deterministic() -> None:
    prompt = SYSTEM + "<|start|>user<|message|>Same again<|end|><|start|>assistant"
    assert echo(prompt) == echo(prompt)


def test_EchoEngine_aclose_mid_stream() -> None:
    async def main() -> float:
        stream = EchoEngine().generate(
            GenerateRequest(prompt_ids=ids("<|start|>user<|message|>Hi<|end|><|start|>assistant"))
        )
        assert await anext(stream) == TokenChunk(token_ids=[200005])
        started = time.monotonic()
        await stream.aclose()
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
        return time.monotonic() - started

    assert asyncio.run(main()) < 0.5


def test_EchoEngine_describe_says_it_is_a_stand_in() -> None:
    engine = engine_from_spec("echo")
    assert isinstance(engine, EchoEngine) and engine.name == "echo"
    assert "stand-in" in engine.describe() and "not a language model" in engine.describe()
