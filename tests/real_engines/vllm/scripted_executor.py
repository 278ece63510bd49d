"""A vLLM executor whose "model" writes scripted token ids: vLLM's own server around a scripted sampler.

This module runs inside the vLLM server process (the vLLM venv made by ``scripts/engines/vllm``), not
in ours: it imports vLLM and nothing of harmony-responses. ``vllm serve ... --distributed-executor-backend
scripted_executor.ScriptedExecutor`` replaces only the model executor; vLLM's API server, input
processing, scheduler (chunked prefill, prefix caching, aborts), structured outputs (xgrammar bitmasks),
detokenizer and output processing all run as they would on a GPU.

What the "model" writes is read from ``HARMONY_VLLM_SCRIPT`` (a JSON file, re-read for each new
request): ``{"rules": [{"match": TEXT, "ids": [...], "delay": SECONDS, "hold": PATH}], "default": [...]}``.
The rule whose ``match`` occurs latest in the decoded prompt wins (so a conversation answers its newest
turn; at the same place the longer key); ``ids`` are generated in order, one per step, ``delay`` seconds
apart. Past the script's end it writes ``<|endoftext|>``. A rule with ``hold`` keeps its request running
while the file ``PATH`` exists: once all but the last of its ``ids`` are written, it writes the last one
written again, a step at a time (``delay`` apart, 10 ms at least; the log says ``held`` at the first), and
its last id only once the file is gone; so a test keeps a scheduler slot taken as long as it needs, while
vLLM goes on stepping (admitting, queueing, reporting its stats) around it. When structured outputs
constrain a request, the scripted id is taken only if the grammar's bitmask allows it; otherwise the
script's next special token when allowed there (the rest of a refused word is left out), else the first
allowed id in ``<|return|>``, ``<|call|>``, ``}``, ``]``, then the lowest allowed id (so a grammar that
forbids the script shows in the output, as it would with a real model, which closes what it must close).
Once steered off its script, a request whose grammar lets go (a tag ended: every id allowed again) goes on
from the script's next special token (``<|call|>``, ``<|end|>``, ``<|message|>``…): a model made to close
its arguments early ends its call, where the script's position-by-position ids would have written the rest
of its own arguments after them.

Logprobs are deterministic: the sampled id gets ``-0.25``, alternatives are the next ids with
``-1, -2, …``; an alternative the grammar forbids gets ``-inf`` (what a masked real model reports).

``HARMONY_VLLM_LOG`` (a JSON-lines file) receives what the engine was asked: each new request's id,
prompt length and resolved ``SamplingParams`` (after vLLM applied its defaults), and each finished
request with how many ids it had generated. ``HARMONY_VLLM_LOAD_DELAY`` sleeps at start-up, as a
large model's load would (the API server is not up meanwhile).
"""

from __future__ import annotations

import json
import math
import os
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from vllm.v1.executor.abstract import Executor
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.outputs import LogprobsLists, ModelRunnerOutput
from vllm.v1.worker.worker_base import CompilationTimes

EOT, RETURN = 199999, 200002
SPECIAL = 199998  # the Harmony special tokens' ids begin here
# What a steered model prefers when its script's id is refused: ending, then closing (o200k's ids of "}", "]").
CLOSERS = (RETURN, 200012, 92, 60)
SAMPLED_LOGPROB = -0.25
# KV cache the scheduler may hand out (bytes; the spec below makes it a few thousand blocks).
KV_BYTES = 64 << 20
# The shortest step of a held request (seconds): a hold keeps vLLM stepping, not spinning.
HOLD_STEP = 0.01


@dataclass
class _Req:
    prompt: list[int]
    params: Any
    script: list[int]
    delay: float
    match: str | None
    hold: str | None = None
    out: list[int] = field(default_factory=list)
    held: int = 0  # ids written again while held (not the script's)
    skip: int = 0  # script ids passed over after a steer (see _pick)
    steered: bool = False
    computed: int = 0


class _Script:
    def __init__(self) -> None:
        self.path = os.environ.get("HARMONY_VLLM_SCRIPT")
        self.tokenizer: Any = None

    def choose(self, model_path: str, prompt: list[int]) -> tuple[list[int], float, str | None, str | None]:
        data: dict[str, Any] = {}
        if self.path and os.path.exists(self.path):
            with open(self.path) as f:
                data = json.load(f)
        rules = data.get("rules") or []
        if rules:
            text = self._decode(model_path, prompt)
            best, where = None, (-1, 0)
            for rule in rules:
                # Latest occurrence first; at the same place the longer key ("case-fn-result" over "case-fn").
                at = (text.rfind(rule["match"]), len(rule["match"]))
                if at[0] >= 0 and at > where:
                    best, where = rule, at
            if best is not None:
                return list(best["ids"]), float(best.get("delay", 0.0)), best["match"], best.get("hold")
        return list(data.get("default") or []), 0.0, None, None

    def _decode(self, model_path: str, ids: list[int]) -> str:
        if self.tokenizer is None:
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(os.path.join(model_path, "tokenizer.json"))
        return self.tokenizer.decode(ids, skip_special_tokens=False)


class _Log:
    def __init__(self) -> None:
        self.path = os.environ.get("HARMONY_VLLM_LOG")

    def write(self, **event: Any) -> None:
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(event, default=repr) + "\n")


def _sampling(params: Any) -> dict[str, Any]:
    if params is None:
        return {}
    keys = (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "stop_token_ids",
        "logprobs",
        "seed",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "skip_special_tokens",
    )
    out = {k: getattr(params, k, None) for k in keys}
    out["all_stop_token_ids"] = sorted(getattr(params, "all_stop_token_ids", None) or ())
    structured = getattr(params, "structured_outputs", None)
    out["structured_outputs"] = repr(structured) if structured is not None else None
    return out


class _Worker:
    """The one "worker": vLLM's worker calls this executor's engine core makes, answered by a script."""

    def __init__(self, vllm_config: Any) -> None:
        self.config = vllm_config
        self.model_path = vllm_config.model_config.model
        self.vocab = vllm_config.model_config.get_vocab_size()
        self.reqs: dict[str, _Req] = {}
        self.pending: list[str] = []
        self.order: list[str] = []
        self.script = _Script()
        self.log = _Log()
        delay = float(os.environ.get("HARMONY_VLLM_LOAD_DELAY") or 0)
        if delay:
            time.sleep(delay)

    # ------------------------------------------------------------------ start-up calls

    def get_kv_cache_spec(self) -> dict[str, Any]:
        hf = self.config.model_config.hf_config
        block = self.config.cache_config.block_size or 16
        spec = FullAttentionSpec(
            block_size=block,
            num_kv_heads=hf.num_key_value_heads,
            head_size=getattr(hf, "head_dim", 16),
            dtype=torch.bfloat16,
        )
        return {f"model.layers.{i}.self_attn.attn": spec for i in range(hf.num_hidden_layers)}

    def get_supported_kv_cache_layouts(self) -> list[str]:
        return ["NHD"]

    def determine_available_memory(self) -> int:
        return KV_BYTES

    def compile_or_warm_up_model(self) -> CompilationTimes:
        return CompilationTimes(language_model=0.0, encoder=0.0)

    def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    def check_health(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        # Every other worker call (set_kv_cache_layout, initialize_from_config, handshake metadata,
        # shutdown, …) has nothing to do without a model.
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None

    # ------------------------------------------------------------------ the steps

    def execute_model(self, so: Any) -> None:
        for req_id in so.finished_req_ids:
            req = self.reqs.pop(req_id, None)
            if req is not None:
                self.log.write(event="finished", req_id=req_id, match=req.match, generated=len(req.out), ids=req.out)
        for new in so.scheduled_new_reqs:
            prompt = list(new.prompt_token_ids or [])
            script, delay, match, hold = self.script.choose(self.model_path, prompt)
            self.reqs[new.req_id] = _Req(
                prompt, new.sampling_params, script, delay, match, hold, computed=new.num_computed_tokens
            )
            self.log.write(
                event="new",
                req_id=new.req_id,
                match=match,
                prompt_len=len(prompt),
                cached=new.num_computed_tokens,
                sampling=_sampling(new.sampling_params),
            )
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            req = self.reqs.get(req_id)
            if req is not None:
                req.computed = cached.num_computed_tokens[i]
        self.order = list(so.num_scheduled_tokens)
        self.pending = []
        for req_id, n in so.num_scheduled_tokens.items():
            req = self.reqs[req_id]
            req.computed += n
            if req.computed >= len(req.prompt) + len(req.out):
                self.pending.append(req_id)

    def sample_tokens(self, grammar: Any) -> ModelRunnerOutput:
        masks: dict[str, Any] = {}
        if grammar is not None:
            for row, req_id in enumerate(grammar.structured_output_request_ids):
                masks[req_id] = grammar.grammar_bitmask[row]
        sampled: list[list[int]] = []
        rows: list[tuple[int, list[int], list[float]]] = []
        width = 1 + max((self.reqs[r].params.logprobs or 0 for r in self.order if self.reqs[r].params), default=0)
        delay = 0.0
        for req_id in self.order:
            req = self.reqs[req_id]
            if req_id not in self.pending:
                sampled.append([])
                rows.append((0, [0] * width, [0.0] * width))
                continue
            mask = masks.get(req_id)
            if self._held(req_id, req):
                token = req.out[-1]
                delay = max(delay, HOLD_STEP)
            else:
                token = self._pick(req, mask)
            req.out.append(token)
            sampled.append([token])
            alts = [(token + j) % self.vocab for j in range(1, width)]
            values = [SAMPLED_LOGPROB] + [
                -math.inf if mask is not None and not _allowed(mask, t) else -float(j) for j, t in enumerate(alts, 1)
            ]
            rows.append((token, [token, *alts], values))
            delay = max(delay, req.delay)
        if delay:
            time.sleep(delay)
        logprobs = None
        if width > 1:
            logprobs = LogprobsLists(
                logprob_token_ids=np.array([r[1] for r in rows], dtype=np.int64),
                logprobs=np.array([r[2] for r in rows], dtype=np.float32),
                sampled_token_ranks=np.ones(len(rows), dtype=np.int64),
            )
        return ModelRunnerOutput(
            req_ids=list(self.order),
            req_id_to_index={r: i for i, r in enumerate(self.order)},
            sampled_token_ids=sampled,
            logprobs=logprobs,
        )

    def _held(self, req_id: str, req: _Req) -> bool:
        """Whether ``req`` writes its last id again this step (its rule's hold file exists)."""
        written = len(req.out) - req.held + req.skip
        if not req.hold or not req.out or written != len(req.script) - 1 or not os.path.exists(req.hold):
            return False
        if not req.held:  # the first held step: a test waits for this line
            self.log.write(event="held", req_id=req_id, match=req.match)
        req.held += 1
        return True

    def _pick(self, req: _Req, mask: Any) -> int:
        k = len(req.out) - req.held + req.skip  # the script's next id: held repeats and steered skips aside
        if req.steered and mask is not None and _free(mask):
            req.steered = False
            ahead = next((j for j in range(k, len(req.script)) if req.script[j] >= SPECIAL), None)
            if ahead is not None:
                req.skip += ahead - k
                k = ahead
        token = req.script[k] if k < len(req.script) else EOT
        if mask is None or _allowed(mask, token):
            return token
        req.steered = True
        # A word the grammar refuses is left for the script's next structural token, when it may come here
        # (a recipient cut short goes on with its header); else what a model must write to close.
        ahead = next((j for j in range(k + 1, len(req.script)) if req.script[j] >= SPECIAL), None)
        if ahead is not None and _allowed(mask, req.script[ahead]):
            req.skip += ahead - k
            return req.script[ahead]
        for closer in CLOSERS:
            if _allowed(mask, closer):
                return closer
        for word, bits in enumerate(mask.tolist()):
            if bits:
                bits &= 0xFFFFFFFF
                return word * 32 + ((bits & -bits).bit_length() - 1)
        return EOT


def _free(mask: Any) -> bool:
    """Whether the bitmask allows every id of the vocabulary (its last word may be padding)."""
    return bool((mask[:-1] == -1).all())


def _allowed(mask: Any, token: int) -> bool:
    return bool((int(mask[token >> 5]) >> (token & 31)) & 1)


class ScriptedExecutor(Executor):
    """One in-process scripted worker; every collective call goes to it."""

    uses_ray = False
    supports_pp = False

    def _init_executor(self) -> None:
        self.worker = _Worker(self.vllm_config)

    def collective_rpc(  # type: ignore[override]
        self,
        method: Any,
        timeout: float | None = None,
        args: tuple = (),
        kwargs: dict | None = None,
        non_block: bool = False,
        single_value: bool = False,
    ) -> Any:
        fn = getattr(self.worker, method) if isinstance(method, str) else (lambda *a, **k: method(self.worker, *a, **k))
        try:
            result = fn(*args, **(kwargs or {}))
        except Exception as exc:
            if not non_block:
                raise
            future: Future[Any] = Future()
            future.set_exception(exc)
            return future
        value = result if single_value else [result]
        if not non_block:
            return value
        future = Future()
        future.set_result(value)
        return future

    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:  # type: ignore[override]
        return self.collective_rpc("execute_model", args=(scheduler_output,), non_block=non_block, single_value=True)

    def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Any:  # type: ignore[override]
        return self.collective_rpc("sample_tokens", args=(grammar_output,), non_block=non_block, single_value=True)

    def check_health(self) -> None:
        return None

    def determine_available_memory(self) -> list[int]:
        return [KV_BYTES]
