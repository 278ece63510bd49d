"""``MockEngine``: any async generator function as an engine, the analogue of httpx's ``MockTransport``."""

from __future__ import annotations

from collections.abc import Callable

from ._base import Engine, EngineStream, GenerateRequest

__all__ = ["MockEngine"]

Handler = Callable[[GenerateRequest], EngineStream]


class MockEngine(Engine):
    """An engine whose ``generate`` is ``handler(request)``, passed through untouched.

    Nothing is added or checked, so tests can also script engines that break the stream contract
    (no ``EngineEnd``, an exception mid-stream, a stream that never ends)::

        async def handler(request: GenerateRequest) -> EngineStream:
            yield TokenChunk(token_ids=[200005, 17196, 200008, 12194, 200002])
            yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))

        engine = MockEngine(handler)
    """

    def __init__(self, handler: Handler, *, name: str = "mock") -> None:
        self.handler = handler
        self.name = name

    def generate(self, request: GenerateRequest) -> EngineStream:
        return self.handler(request)

    def describe(self) -> str:
        return f"{self.name}: {getattr(self.handler, '__qualname__', repr(self.handler))} (a test double)"
