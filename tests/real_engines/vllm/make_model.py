"""Writes the model folder the scripted vLLM serves: a tiny gpt-oss config and Harmony's tokenizer, no weights.

Run by ``scripts/engines/vllm`` with the project's Python, from the repository root::

    python -m tests.real_engines.vllm.make_model OUT_DIR

The scripted executor never loads weights, so the folder holds only what vLLM's front end reads:
``config.json`` (a 2-layer ``GptOssForCausalLM``, ``max_position_embeddings`` 4096), the o200k_harmony
tokenizer the real-engine tier shares (``tiny_model.harmony_tokenizer()``: o200k_base's ranks from the
``bpe-openai`` package, Harmony's special tokens at their ids, ``<|return|>`` as eos as in gpt-oss's own)
and a ``generation_config.json`` whose sampling defaults are *not* plain (temperature 0.7, top_p 0.8,
top_k 20, min_p 0.05), as many published checkpoints ship: vLLM applies them to every request that does
not say otherwise, which is what the tests check we override. Its ``eos_token_id`` list is gpt-oss's own
``[200002, 199999, 200012]`` (vLLM adds those ids to every request's stop ids).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from ..tiny_model import harmony_tokenizer

CONTEXT = 4096
CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "vocab_size": 201088,
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "max_position_embeddings": CONTEXT,
    "initial_context_length": CONTEXT,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_theta": 150000.0,
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
        "original_max_position_embeddings": CONTEXT,
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


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for path in harmony_tokenizer().iterdir():
        if path.is_file() and not path.name.startswith("."):
            shutil.copy(path, out / path.name)
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
