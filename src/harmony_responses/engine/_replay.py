"""The ``replay:PATH`` engine: a JSON Lines script played back, one line per engine call.

It drives the tests and lets client developers script a model exactly. Each line is one engine call,
served in order and wrapping round to the first line after the last, whatever the prompt::

    // Lines starting with // or #, and empty lines, are comments.
    {"harmony": "<|channel|>final<|message|>Hi!<|return|>"}
    {"tokens": [200005, 17196, 200008, 12194, 0, 200002], "chunk": 2, "delay_ms": 50}
    {"harmony": "<|channel|>analysis<|message|>Hm", "error": "GPU on fire"}

Fields:

- ``"harmony"``: the completion as text, special tokens written literally (encoded with
  ``allowed_special="all"``); or ``"tokens"``: the completion's token ids. Exactly one of them, except
  that a line that ends in an error may have neither (no tokens, then the error).
- ``"chunk"``: tokens per ``TokenChunk`` (default 1); or ``"chunks"``: the size of each chunk in turn
  (``[3, 1, 2]``), adding up to the number of tokens, as a recording keeps the engine's chunking.
- ``"delay_ms"``: sleep between chunks, in milliseconds (default 0).
- ``"finish"``: ``"stop"``, ``"length"`` or ``"error"``. Default: ``"error"`` when ``"error"`` is given,
  else ``"stop"`` when the tokens end with ``<|return|>`` or ``<|call|>``, else ``"length"``.
- ``"error"``: a message, put in ``EngineEnd.message``.
- ``"logprobs"``: true to produce deterministic fake logprobs when the request asks for them: the k-th
  generated token (from 0) gets ``-0.1 * (k + 1)``, and the ``top_logprobs`` alternatives are the token
  itself followed by ids ``token + j`` with logprob ``lp - j``. Without it, no logprobs are returned.

Fields a recording writes (``--record PATH``, ``_record.py``), so that a session replays exactly:

- ``"token_logprobs"``: the engine's logprobs, one entry per token: ``[logprob, [[id, logprob], …]]``
  (the top alternatives), or null for a token that had none (a stop id the adapter added). Served,
  cut to the request's ``top_logprobs``, instead of fake ones.
- ``"text"``: the tokens decoded, special tokens written literally, for a reader of the file; never
  played (the ids are: a decoded text may have lost a split character or a token's exact spelling), so
  it is allowed only beside ``"tokens"``.
- ``"prompt_tokens"``, ``"cached_tokens"``: the counts the engine reported (default: the prompt's
  length, and 0).
- ``"refused": true``: the engine refused the call before streaming anything (the server answered
  503); replayed by raising ``EngineError`` with ``"error"`` as its message.

Calls are recorded when they end, so concurrent calls are written in the order they finished.

Like a real engine, it stops after the first of the request's stop ids (finish ``"stop"``) and cuts at
the request's ``max_tokens`` (finish ``"length"``); the scripted ending is then never reached.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path

from ..tokens import FinishReason, TokenLogprob
from ..vocab import VOCAB_SIZE, load_encoding
from ._base import Engine, EngineError, EngineStream, GenerateRequest
from ._play import play

__all__ = ["ReplayEngine"]

_STOP_IDS = (200002, 200012)
_FINISH_REASONS: tuple[FinishReason, ...] = ("stop", "length", "error")
_FIELDS = (
    "harmony",
    "tokens",
    "chunk",
    "chunks",
    "delay_ms",
    "finish",
    "error",
    "logprobs",
    "token_logprobs",
    "prompt_tokens",
    "cached_tokens",
    "refused",
    "text",
)


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One validated line of a replay script."""

    line: int
    tokens: tuple[int, ...]
    finish: FinishReason
    message: str | None
    chunk: int
    delay: float
    logprobs: bool
    chunks: tuple[int, ...] | None = None
    token_logprobs: tuple[TokenLogprob | None, ...] | None = None
    prompt_tokens: int | None = None
    cached_tokens: int = 0
    refused: bool = False


class _BadLine(Exception):
    pass


def _is_int(value: object) -> bool:
    # JSON true/false arrive as bool, which Python counts as int.
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_line(text: str, line: int) -> ScriptedCall:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _BadLine(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise _BadLine(f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(_FIELDS))
    if unknown:
        valid = ", ".join(f'"{f}"' for f in _FIELDS)
        raise _BadLine(f"unknown field {', '.join(repr(u) for u in unknown)}; valid fields: {valid}")

    message = obj.get("error")
    if message is not None and not isinstance(message, str):
        raise _BadLine('"error" must be a string (the error message)')
    finish = obj.get("finish")
    if finish is not None and finish not in _FINISH_REASONS:
        raise _BadLine(f'"finish" must be one of "stop", "length", "error", got {finish!r}')

    if "harmony" in obj and "tokens" in obj:
        raise _BadLine('give either "harmony" or "tokens", not both')
    if "text" in obj and ("tokens" not in obj or not isinstance(obj["text"], str)):
        # Written by --record beside the ids it decodes; a script's own text is "harmony".
        raise _BadLine(
            '"text" is a string a recording writes beside "tokens" and is never played; script text as "harmony"'
        )
    tokens: tuple[int, ...]
    if "harmony" in obj:
        if not isinstance(obj["harmony"], str):
            raise _BadLine('"harmony" must be a string of Harmony text')
        tokens = tuple(load_encoding().encode(obj["harmony"], allowed_special="all"))
    elif "tokens" in obj:
        ids = obj["tokens"]
        if not isinstance(ids, list):
            raise _BadLine('"tokens" must be a list of token ids')
        for i, token in enumerate(ids):
            if not _is_int(token) or not 0 <= token < VOCAB_SIZE:
                raise _BadLine(f'"tokens"[{i}] is {token!r}, not a token id (0..{VOCAB_SIZE - 1})')
        tokens = tuple(ids)
    elif message is None and finish != "error":
        raise _BadLine('needs "harmony" (text) or "tokens" (ids); only a line that ends in an error may omit both')
    else:
        tokens = ()

    chunk = obj.get("chunk", 1)
    if not _is_int(chunk) or chunk < 1:
        raise _BadLine(f'"chunk" must be a whole number of tokens >= 1, got {chunk!r}')
    delay_ms = obj.get("delay_ms", 0)
    if not (_is_int(delay_ms) or isinstance(delay_ms, float)) or not math.isfinite(delay_ms) or delay_ms < 0:
        raise _BadLine(f'"delay_ms" must be a number of milliseconds >= 0, got {delay_ms!r}')
    logprobs = obj.get("logprobs", False)
    if not isinstance(logprobs, bool):
        raise _BadLine(f'"logprobs" must be true or false, got {logprobs!r}')
    chunks = obj.get("chunks")
    if chunks is not None:
        if "chunk" in obj:
            raise _BadLine('give either "chunk" or "chunks", not both')
        if not isinstance(chunks, list) or not all(_is_int(n) and n >= 1 for n in chunks):
            raise _BadLine('"chunks" must be a list of chunk sizes >= 1')
        if sum(chunks) != len(tokens):
            raise _BadLine(f'"chunks" add up to {sum(chunks)} tokens, but the line has {len(tokens)}')
        chunks = tuple(chunks)
    token_logprobs = obj.get("token_logprobs")
    if token_logprobs is not None:
        token_logprobs = _parse_logprobs(token_logprobs, len(tokens))
    counts = {}
    for name in ("prompt_tokens", "cached_tokens"):
        value = obj.get(name)
        if value is not None and (not _is_int(value) or value < 0):
            raise _BadLine(f'"{name}" must be a whole number >= 0, got {value!r}')
        counts[name] = value
    refused = obj.get("refused", False)
    if not isinstance(refused, bool):
        raise _BadLine(f'"refused" must be true or false, got {refused!r}')
    if refused and (message is None or tokens):
        raise _BadLine('a "refused" call has an "error" message and no tokens')

    if finish is None:
        if message is not None:
            finish = "error"
        elif tokens and tokens[-1] in _STOP_IDS:
            finish = "stop"
        else:
            finish = "length"
    return ScriptedCall(
        line=line,
        tokens=tokens,
        finish=finish,
        message=message,
        chunk=chunk,
        delay=delay_ms / 1000,
        logprobs=logprobs,
        chunks=chunks,
        token_logprobs=token_logprobs,
        prompt_tokens=counts["prompt_tokens"],
        cached_tokens=counts["cached_tokens"] or 0,
        refused=refused,
    )


def _parse_logprobs(value: object, n: int) -> tuple[TokenLogprob | None, ...]:
    if not isinstance(value, list) or len(value) != n:
        raise _BadLine(f'"token_logprobs" must be a list with one entry per token ({n})')
    out: list[TokenLogprob | None] = []
    for i, entry in enumerate(value):
        if entry is None:
            out.append(None)
            continue
        try:
            lp, top = entry
            pairs = tuple((int(t), float(v)) for t, v in top)
            if not all(_is_int(t) for t, _ in top):
                raise TypeError
            out.append(TokenLogprob(logprob=float(lp), top=pairs))
        except (TypeError, ValueError):
            raise _BadLine(f'"token_logprobs"[{i}] must be [logprob, [[id, logprob], …]] or null') from None
    return tuple(out)


def load_script(path: str | Path) -> tuple[ScriptedCall, ...]:
    """Read and validate a replay script.

    Raises:
        ValueError: the file cannot be read, has no calls, or a line is invalid; the message names the
            file, the line number and what is wrong, for the person starting the server.
    """
    path = Path(path).expanduser()
    try:
        # utf-8-sig: editors on Windows like to start files with a BOM.
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ValueError(f"replay script {path}: cannot read it ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"replay script {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    calls = []
    # Split on \n only: str.splitlines() would also split inside JSON strings holding U+2028 and the like.
    for number, raw in enumerate(text.split("\n"), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith(("//", "#")):
            continue
        try:
            calls.append(_parse_line(stripped, number))
        except _BadLine as exc:
            raise ValueError(f"replay script {path}, line {number}: {exc}") from None
    if not calls:
        raise ValueError(f"replay script {path} has no engine calls (every line is empty or a comment)")
    return tuple(calls)


class ReplayEngine(Engine):
    """Serves the lines of a replay script in order, one per ``generate`` call, wrapping round.

    The line is taken when ``generate`` is called (not when the stream is first read), so concurrent
    callers get successive lines in the order they called. One counter per engine instance.

    Raises:
        ValueError: from the constructor, when the script is invalid (see ``load_script``).
    """

    name = "replay"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.calls = load_script(self.path)
        # A threading lock, not an asyncio one: the counter must hold whichever threads and event loops
        # share the engine, and the critical section never awaits.
        self._lock = threading.Lock()
        self._served = 0

    @property
    def served(self) -> int:
        """How many calls this engine has served so far."""
        return self._served

    def generate(self, request: GenerateRequest) -> EngineStream:
        with self._lock:
            call = self.calls[self._served % len(self.calls)]
            self._served += 1
        if call.refused:
            return _refuse(call.message or "")
        return play(
            call.tokens,
            request,
            finish=call.finish,
            message=call.message,
            chunk=call.chunk,
            delay=call.delay,
            logprobs=call.logprobs,
            chunks=call.chunks,
            recorded_logprobs=call.token_logprobs,
            prompt_tokens=call.prompt_tokens,
            cached_tokens=call.cached_tokens,
        )

    def describe(self) -> str:
        n = len(self.calls)
        return f"replay: {n} scripted engine call{'s' if n != 1 else ''} from {self.path}, served in order"


async def _refuse(message: str) -> EngineStream:
    raise EngineError(message)
    yield  # an async generator, so that the error comes at the first item like an engine's
