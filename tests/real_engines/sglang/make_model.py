"""Writes the model folder SGLang's front end reads: a tiny gpt-oss config and Harmony's tokenizer, no weights.

Run by ``scripts/engines/sglang`` with the SGLang venv's Python (it needs ``transformers``)::

    make_model.py OUT_DIR O200K_BASE_TIKTOKEN_GZ

The scripted scheduler never loads weights; SGLang's tokenizer manager and detokenizer read
``config.json`` (``GptOssForCausalLM``, context 4096; tests lower it with ``--context-length``), the
o200k_harmony ``tokenizer.json`` (o200k_base's ranks from the ``bpe-openai`` package, Harmony's special
tokens at ids 199998..201087, ``<|return|>`` as eos) and ``generation_config.json``. The latter carries
sampling defaults that are *not* plain (temperature 0.7, top_p 0.8, top_k 20, min_p 0.05), as published
checkpoints do, and gpt-oss's eos list ``[200002, 199999, 200012]``: SGLang stops on those ids whatever a
request sends, and applies the sampling defaults to its OpenAI-style endpoints (``--sampling-defaults
model``); the tests check that neither reaches what we send to ``/generate``.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

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
# tiktoken's o200k_base pre-tokenizer pattern.
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
    specials = [NAMED.get(i, f"<|reserved_{i}|>") for i in range(FIRST_SPECIAL, VOCAB_SIZE)]
    ranks = out / "o200k_base.tiktoken"
    ranks.write_bytes(raw)
    try:
        converted = TikTokenConverter(vocab_file=str(ranks), pattern=PATTERN, extra_special_tokens=specials).converted()
    finally:
        ranks.unlink()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=converted,
        bos_token="<|startoftext|>",
        eos_token="<|return|>",
        pad_token="<|endoftext|>",
        model_max_length=CONFIG["max_position_embeddings"],
    )
    for token_id, name in NAMED.items():
        assert tokenizer.convert_tokens_to_ids(name) == token_id, name
    # o200k's own merges: tiktoken encodes "Hi 🚀 ok" as these ids (the rocket spans two tokens).
    assert tokenizer.encode("Hi 🚀 ok", add_special_tokens=False) == [12194, 169883, 222, 4763]
    tokenizer.save_pretrained(str(out))
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
