"""``--record PATH``: every engine call appended to a file in the replay engine's format.

``RecordingEngine`` wraps any engine and passes its stream through untouched, noting what the server
saw: the token ids, where each chunk ended, logprobs, the finish reason and message, and the prompt
and cached token counts. When the call ends it appends one JSON line that ``replay:PATH`` plays back
exactly (``_replay.py`` documents the fields), so that a session on a real engine can be reproduced
without one, e.g. from a bug report. The line starts with the ids decoded (``"text"``, special tokens
written literally), for whoever reads the file; the replay plays the ids, never that text. A call the
engine refused before streaming is written with ``"refused": true``; a call cut short by the client
(disconnect, cancel) is written as an error.

Lines are written whole with one ``write`` on a file opened in append mode, so that several servers
may share one file without interleaving within a line.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import orjson
from openai_harmony import HarmonyError

from ..tokens import ADMITTED, EngineEnd, TokenChunk, TokenLogprob
from ..vocab import load_encoding
from ._base import Engine, EngineError, EngineStream, GenerateRequest

__all__ = ["RecordingEngine"]


class RecordingEngine(Engine):
    """Passes ``engine`` through, appending each call to ``path`` (see the module docstring)."""

    def __init__(self, engine: Engine, path: str | Path) -> None:
        self.engine = engine
        self.name = engine.name
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()

    async def start(self) -> None:
        # Fail at start, not at the first call, when the file cannot be written.
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab"):
                pass
        except OSError as exc:
            raise EngineError(f"--record {self.path}: cannot write to it ({exc.strerror or exc})") from exc
        await self.engine.start()
        self.context_window = self.engine.context_window

    async def aclose(self) -> None:
        await self.engine.aclose()

    async def probe(self) -> None:
        await self.engine.probe()

    def describe(self) -> str:
        return f"{self.engine.describe()}; recording every call to {self.path}"

    async def generate(self, request: GenerateRequest) -> EngineStream:  # type: ignore[override]
        tokens: list[int] = []
        chunks: list[int] = []
        logprobs: list[TokenLogprob | None] = []
        any_logprobs = False
        line: dict[str, Any] | None = None
        try:
            async for item in self.engine.generate(request):
                if item is ADMITTED:
                    pass  # not a chunk the model wrote: a replay yields its first chunk at once anyway
                elif isinstance(item, TokenChunk):
                    tokens.extend(item.token_ids)
                    chunks.append(len(item.token_ids))
                    if item.logprobs is not None:
                        any_logprobs = True
                        logprobs.extend(item.logprobs)
                    else:
                        logprobs.extend([None] * len(item.token_ids))
                elif isinstance(item, EngineEnd):
                    line = {
                        "finish": item.reason,
                        "prompt_tokens": item.prompt_tokens,
                        "cached_tokens": item.cached_tokens,
                    }
                    if item.message is not None:
                        line["error"] = item.message
                yield item
        except EngineError as exc:
            if not tokens:
                line = {"finish": "error", "error": str(exc), "refused": True}
            raise
        finally:
            if line is None:  # cut short: the consumer went away, or the engine broke its contract
                line = {"finish": "error", "error": f"not finished: the call was cancelled after {len(tokens)} tokens"}
            if not line.get("refused"):
                line = {**_readable(tokens), "tokens": tokens, "chunks": [n for n in chunks if n]} | line
                if any_logprobs:
                    line["token_logprobs"] = [
                        None if lp is None else [lp.logprob, [list(p) for p in lp.top]] for lp in logprobs
                    ]
            self._append(line)

    def _append(self, line: dict[str, Any]) -> None:
        data = orjson.dumps(line) + b"\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


def _readable(tokens: list[int]) -> dict[str, str]:
    """``{"text": …}``: the ids decoded, lossily (a call cut inside a character still gets its line, and the
    ids are exact anyway); nothing for ids outside the vocabulary, which a broken engine may send and which
    the line must still record."""
    try:
        return {"text": load_encoding().decode(tokens)}
    except HarmonyError:
        return {}
