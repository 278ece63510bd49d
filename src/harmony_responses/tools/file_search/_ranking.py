"""Hybrid ranking: the full-text and the vector rankings of one query fused by weighted reciprocal rank fusion.

A chunk ranked ``r`` (from 1) by a ranking of weight ``w`` gets ``w / (K + r)`` from it, summed over both
rankings (Cormack, Clarke and Büttcher, SIGIR 2009, with their ``K = 60``). The weights are the tool's
``ranking_options.hybrid_search`` (``embedding_weight``, ``text_weight``; 1 and 1 by default). Fused scores are
divided by the best a chunk could get (first in every ranking of non-zero weight), so they lie in (0, 1] and
``score_threshold`` keeps a meaning: 1 is first by both, about 0.5 first by one only.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

__all__ = ["RRF_K", "HybridError", "fuse", "hybrid_weights"]

RRF_K = 60


class HybridError(ValueError):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def hybrid_weights(value: Any, param: str) -> tuple[float, float] | None:
    """``ranking_options.hybrid_search`` as ``(embedding_weight, text_weight)``, None when not given; raises
    ``HybridError`` for weights that are not non-negative numbers, or both zero."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise HybridError(f"Invalid '{param}': expected an object.", param)
    weights = []
    for key in ("embedding_weight", "text_weight"):
        weight = value.get(key)
        if weight is None:
            raise HybridError(f"Missing required parameter: '{param}.{key}'.", f"{param}.{key}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight < float("inf"):
            raise HybridError(f"Invalid '{param}.{key}': expected a number of at least 0.", f"{param}.{key}")
        weights.append(float(weight))
    if not any(weights):
        raise HybridError(f"Invalid '{param}': the weights cannot both be 0.", param)
    return weights[0], weights[1]


def fuse(rankings: Sequence[tuple[float, Sequence[Hashable]]]) -> dict[Hashable, float]:
    """``(weight, keys best first)`` rankings → each key's fused score in (0, 1]."""
    scores: dict[Hashable, float] = {}
    for weight, keys in rankings:
        if weight <= 0:
            continue
        for rank, key in enumerate(keys, 1):
            scores[key] = scores.get(key, 0.0) + weight / (RRF_K + rank)
    best = sum(w for w, _ in rankings if w > 0) / (RRF_K + 1)
    return {key: score / best for key, score in scores.items()} if best else {}
