"""Writes the model folder SGLang's front end reads: a tiny gpt-oss config and Harmony's tokenizer, no weights.

Run by ``scripts/engines/sglang`` with the SGLang venv's Python, after the project's venv made the shared
o200k_harmony tokenizer (``tests/real_engines/tiny_model.py``, ``harmony_tokenizer()``)::

    make_model.py OUT_DIR TOKENIZER_DIR

The scripted scheduler never loads weights; SGLang's tokenizer manager and detokenizer read
``config.json`` (``GptOssForCausalLM``, context 4096; tests lower it with ``--context-length``), the
tokenizer (copied in, and checked to load in SGLang's own transformers) and ``generation_config.json``.
The latter carries sampling defaults that are *not* plain (temperature 0.7, top_p 0.8, top_k 20, min_p
0.05), as published checkpoints do, and gpt-oss's eos list ``[200002, 199999, 200012]``: SGLang stops on
those ids whatever a request sends, and applies the sampling defaults to its OpenAI-style endpoints
(``--sampling-defaults model``); the tests check that neither reaches what we send to ``/generate``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

VOCAB_SIZE = 201088
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


def main(out: Path, tokenizer_dir: Path) -> None:
    from transformers import AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    for f in tokenizer_dir.iterdir():
        if f.is_file() and not f.name.startswith("."):  # not tiny_model's own stamp
            shutil.copyfile(f, out / f.name)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert tokenizer.decode([200006, 200008, 200002]) == "<|start|><|message|><|return|>"
    # o200k's own merges: tiktoken encodes "Hi 🚀 ok" as these ids (the rocket spans two tokens).
    assert tokenizer.encode("Hi 🚀 ok", add_special_tokens=False) == [12194, 169883, 222, 4763]
    assert tokenizer.eos_token_id == 200002
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
