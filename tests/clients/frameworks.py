"""Shared pieces of the framework tests: a live server whose engine scripts the model and keeps every prompt.

``PromptRecorder`` plays the same two engine calls for every client (the model thinks, writes a preamble and
calls ``get_weather``; then answers) and keeps each prompt's token ids, so that a test can assert what the
model received on the second call, the one built from the history the client resent.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding

MODEL = "gpt-oss-20b"
QUESTION = "What is the weather in Paris?"
REASONING = "The user wants the weather; I should call get_weather."
PREAMBLE = "Let me check the forecast."
ARGUMENTS = '{"city": "Paris"}'
TOOL_OUTPUT = "sunny, 21 C"
ANSWER = "It is sunny and 21 C in Paris."
CALL_TURN = (
    f"<|channel|>analysis<|message|>{REASONING}<|end|>"
    f"<|start|>assistant<|channel|>commentary<|message|>{PREAMBLE}<|end|>"
    f"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{ARGUMENTS}<|call|>"
)
ANSWER_TURN = f"<|channel|>final<|message|>{ANSWER}<|return|>"

# The second prompt's conversation as the model wrote it (harmony.md §6: reasoning kept within the tool turn).
HISTORY = (
    f"<|start|>user<|message|>{QUESTION}<|end|>"
    f"<|start|>assistant<|channel|>analysis<|message|>{REASONING}<|end|>"
    f"<|start|>assistant<|channel|>commentary<|message|>{PREAMBLE}<|end|>"
    f"<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{ARGUMENTS}<|call|>"
    f"<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{TOOL_OUTPUT}<|end|>"
    "<|start|>assistant"
)


@dataclass
class PromptRecorder:
    """An engine that answers from ``script`` in turn and keeps every prompt it was given."""

    script: tuple[str, ...] = (CALL_TURN, ANSWER_TURN)
    prompts: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._turns: Iterator[str] = itertools.cycle(self.script)
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        self.prompts.append(list(request.prompt_ids))
        ids = load_encoding().encode(next(self._turns), allowed_special="all")
        for start in range(0, len(ids), 3):  # a few tokens per chunk, as engines stream
            yield TokenChunk(token_ids=ids[start : start + 3])
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))

    def text(self, index: int) -> str:
        return load_encoding().decode(self.prompts[index])

    def history(self, index: int) -> str:
        """The conversation part of a prompt: from the first user message on (system and developer cut)."""
        text = self.text(index)
        return text[text.index("<|start|>user") :]
