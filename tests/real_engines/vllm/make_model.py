"""Writes the model folder the scripted vLLM serves: a tiny gpt-oss config and Harmony's tokenizer, no weights.

Run by ``scripts/engines/vllm`` with the vLLM venv's Python (it needs ``transformers``)::

    make_model.py OUT_DIR O200K_BASE_TIKTOKEN_GZ

The scripted executor never loads weights, so the folder holds only what vLLM's front end reads:
``config.json`` (a 2-layer ``GptOssForCausalLM``, ``max_position_embeddings`` 4096), an o200k_harmony
``tokenizer.json`` (o200k_base's ranks from the ``bpe-openai`` package, Harmony's special tokens at their
ids 199998..201087, ``<|return|>`` as eos as in gpt-oss's own tokenizer) and a ``generation_config.json``
whose sampling defaults are *not* plain (temperature 0.7, top_p 0.8, top_k 20, min_p 0.05), as many
published checkpoints ship: vLLM applies them to every request that does not say otherwise, which is what
the tests check we override. Its ``eos_token_id`` list is gpt-oss's own ``[200002, 199999, 200012]``.
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
from pathlib import Path

# Harmony's named special tokens (openai-harmony's registry); the other ids up to 201087 are reserved.
NAMED = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
}
FIRST_SPECIAL, VOCAB_SIZE = 199998, 201088
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
CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 4096,
    "initial_context_length": 4096,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_theta": 150000.0,
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
        "original_max_position_embeddings": 4096,
    },
    "eos_token_id": 200002,
    "pad_token_id": 199999,
    "bos_token_id": 199998,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
GENERATION_CONFIG = {
    "bos_token_id": 199998,
    "eos_token_id": [200002, 199999, 200012],
    "pad_token_id": 199999,
    "do_sample": True,
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
    "min_p": 0.05,
}


def main(out: Path, vocab_gz: Path) -> None:
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    out.mkdir(parents=True, exist_ok=True)
    raw = gzip.decompress(vocab_gz.read_bytes())
    ranks = [int(line.split()[1]) for line in raw.splitlines() if line]
    assert ranks == list(range(FIRST_SPECIAL)), "o200k_base ranks are 0..199997 in order"
    specials = [NAMED.get(i, f"<|reserved_{i}|>") for i in range(FIRST_SPECIAL, VOCAB_SIZE)]
    ranks_file = out / "o200k_base.tiktoken"
    ranks_file.write_bytes(raw)
    try:
        tok = TikTokenConverter(vocab_file=str(ranks_file), pattern=PATTERN, extra_special_tokens=specials).converted()
    finally:
        ranks_file.unlink()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|startoftext|>",
        eos_token="<|return|>",
        pad_token="<|endoftext|>",
        model_max_length=CONFIG["max_position_embeddings"],
    )
    for token_id, name in NAMED.items():
        assert fast.convert_tokens_to_ids(name) == token_id, (name, fast.convert_tokens_to_ids(name))
    assert fast.decode([200006, 200008, 200002]) == "<|start|><|message|><|return|>"
    # A spot check against o200k's own merges: "Hi 🚀 ok" is these ids in tiktoken.
    assert fast.encode("Hi 🚀 ok", add_special_tokens=False) == [12194, 169883, 222, 4763], "not o200k's merges"
    assert base64.b64decode(raw.split()[0]) == b"!"
    fast.save_pretrained(str(out))
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
