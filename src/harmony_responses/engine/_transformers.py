"""The ``transformers:PATH`` engine: a local Harmony-format checkpoint run in-process (engines.md §7).

The model is loaded once at start (GPU when torch sees one, else CPU) and generates token by token with
its KV cache in a worker thread, so that the event loop never blocks on the model. Tokens travel to the
stream through a bounded ``asyncio.Queue``: a slow consumer makes the worker wait (no unbounded
buffering), and cancelling the stream sets a flag that the worker checks before every token, so it
stops within one forward pass. One generation runs at a time (the model is not shared between
threads); the others wait for it, within the first-token bound.

Sampling: greedy at temperature 0, else temperature and top-p; logprobs are the model's log-softmax
(before temperature) with the top-k alternatives. Generation stops after a stop id (included in the
output), on the model's end-of-text id (``<|endoftext|>``), at ``max_tokens`` or at the model's
context length. torch and transformers are the optional extra ``transformers``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from pathlib import Path
from typing import Any

import anyio

from ..tokens import EngineEnd, TokenChunk, TokenLogprob
from ..vocab import VOCAB_SIZE
from ._base import Engine, EngineError, EngineMismatch, EngineStream, EngineTimeout, EngineUnavailable, GenerateRequest
from ._http import HARMONY_PROBE
from ._options import EngineOptions

__all__ = ["TransformersEngine"]

_ENDOFTEXT = 199999
# Tokens that may wait in the queue for a slow consumer: a few chunks' worth, then the worker waits.
QUEUE_SIZE = 64
# How often a worker blocked on a full queue looks at its cancel flag.
_POLL = 0.1


class _Cancelled(Exception):
    pass


class TransformersEngine(Engine):
    """A checkpoint folder loaded with ``AutoModelForCausalLM``; see the module docstring."""

    name = "transformers"

    def __init__(self, path: str | Path, options: EngineOptions | None = None) -> None:
        self.path = Path(path).expanduser()
        self.options = options or EngineOptions()
        self.model: Any = None
        self.device = "cpu"
        self._cache_arg = "past_key_values"
        self._lock = asyncio.Lock()
        self.context_length: int | None = None

    def describe(self) -> str:
        return f"transformers: {self.path} on {self.device} (in-process, one generation at a time)"

    async def start(self) -> None:
        if not self.path.is_dir():
            raise EngineUnavailable(
                f"transformers: {self.path} is not a folder (a checkpoint saved by save_pretrained)"
            )
        await asyncio.to_thread(self._load)

    def _load(self) -> None:
        try:
            import torch
            from transformers import AutoConfig, AutoModelForCausalLM
        except ImportError as exc:
            raise EngineUnavailable(
                f"transformers: {exc.name} is not installed; install the extra: "
                "pip install 'harmony-responses[transformers]'"
            ) from exc
        try:
            config = AutoConfig.from_pretrained(self.path)
        except (OSError, ValueError) as exc:
            raise EngineMismatch(f"transformers: {self.path} holds no model configuration ({exc})") from exc
        vocab = getattr(config, "vocab_size", 0)
        if vocab < VOCAB_SIZE:
            raise EngineMismatch(
                f"transformers: {self.path} has a vocabulary of {vocab} ids; Harmony (o200k_harmony) needs {VOCAB_SIZE}"
            )
        self._check_tokenizer()
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cpu":
            # Leave a core to the event loop: torch's OpenMP workers spin while they wait, and on a small
            # machine they starved the server's thread (40-100 ms per streamed token on 2 cores, 6 ms
            # with one core left free).
            torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
        model = AutoModelForCausalLM.from_pretrained(self.path)
        self.model = model.to(self.device).eval()
        # transformers renamed the KV-cache argument (past_key_values → cache); take whichever it has.
        parameters = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in parameters else "past_key_values"
        self.context_length = getattr(config, "max_position_embeddings", None)

    def _check_tokenizer(self) -> None:
        # A checkpoint with a tokenizer must decode Harmony's special tokens; test checkpoints have none.
        if not any((self.path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
            return
        from transformers import AutoTokenizer

        ids, expected = HARMONY_PROBE
        text = AutoTokenizer.from_pretrained(self.path).decode(ids, skip_special_tokens=False)
        if text != expected:
            raise EngineMismatch(f"transformers: {self.path}'s tokenizer decodes {ids} to {text!r}, not {expected!r}")

    async def aclose(self) -> None:
        self.model = None

    async def generate(self, request: GenerateRequest) -> EngineStream:  # type: ignore[override]
        if self.model is None:
            raise EngineUnavailable("transformers: the model is not loaded (start() was not called)")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TokenChunk | EngineEnd | BaseException] = asyncio.Queue(QUEUE_SIZE)
        cancel = threading.Event()
        try:
            await asyncio.wait_for(self._lock.acquire(), self.options.first_token_timeout)
        except TimeoutError:
            raise EngineTimeout(
                f"transformers: still busy with other generations after {self.options.first_token_timeout:g} s"
            ) from None
        worker = None
        try:
            worker = loop.run_in_executor(None, self._run, request, loop, queue, cancel)
            first = True
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    if first:
                        raise EngineError(f"transformers: {item}") from item
                    yield EngineEnd(
                        reason="error", message=f"transformers: {item}", prompt_tokens=len(request.prompt_ids)
                    )
                    return
                first = False
                yield item
                if isinstance(item, EngineEnd):
                    return
        finally:
            cancel.set()
            try:
                if worker is not None:
                    # The worker stops within one forward pass (or one queue poll); wait for it, shielded
                    # from the cancellation that may have brought us here, so that the next generation
                    # finds the model free.
                    with anyio.CancelScope(shield=True):
                        await worker
            finally:
                self._lock.release()

    # ------------------------------------------------------------------ the worker thread

    def _run(
        self,
        request: GenerateRequest,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[Any],
        cancel: threading.Event,
    ) -> None:
        def put(item: Any) -> None:
            future = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
            while True:
                try:
                    future.result(_POLL)
                    return
                except TimeoutError:
                    if cancel.is_set():
                        future.cancel()
                        raise _Cancelled from None

        try:
            for item in self._tokens(request, cancel):
                put(item)
        except _Cancelled:
            pass
        except Exception as exc:  # the model failed: reported in-band (or as EngineError before any token)
            try:
                put(exc)
            except _Cancelled:
                pass

    def _tokens(self, request: GenerateRequest, cancel: threading.Event) -> Any:
        import torch

        model = self.model
        prompt = request.prompt_ids
        budget = request.max_tokens
        if self.context_length:
            room = max(0, self.context_length - len(prompt))
            budget = room if budget is None else min(budget, room)
        stops = set(request.stop_token_ids)
        temperature = 1.0 if request.temperature is None else request.temperature
        top_p = 1.0 if request.top_p is None else request.top_p
        top = request.top_logprobs
        generated = 0
        reason = "length"
        with torch.inference_mode():
            ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
            cache = None
            while budget is None or generated < budget:
                if cancel.is_set():
                    raise _Cancelled
                kwargs = {self._cache_arg: cache} if cache is not None else {}
                out = model(input_ids=ids, use_cache=True, **kwargs)
                cache = getattr(out, self._cache_arg, None) or getattr(out, "past_key_values", None)
                logits = out.logits[0, -1].float()
                token = _sample(torch, logits, temperature, top_p)
                logprobs = None
                if top is not None:
                    logprobs = [_logprob(torch, logits, token, top)]
                generated += 1
                yield TokenChunk(token_ids=[token], logprobs=logprobs)
                if token in stops or token == _ENDOFTEXT:
                    reason = "stop"
                    break
                ids = torch.tensor([[token]], dtype=torch.long, device=self.device)
        yield EngineEnd(reason=reason, prompt_tokens=len(prompt))


def _sample(torch: Any, logits: Any, temperature: float, top_p: float) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < top_p
        sorted_probs = sorted_probs * keep
        return int(order[torch.multinomial(sorted_probs / sorted_probs.sum(), 1)])
    return int(torch.multinomial(probs, 1))


def _logprob(torch: Any, logits: Any, token: int, top: int) -> TokenLogprob:
    logprobs = torch.log_softmax(logits, dim=-1)
    alternatives: tuple[tuple[int, float], ...] = ()
    if top:
        values, indices = torch.topk(logprobs, top)
        alternatives = tuple((int(i), float(v)) for i, v in zip(indices, values, strict=True))
    return TokenLogprob(logprob=float(logprobs[token]), top=alternatives)
