"""Weighted min-max fusion of TREC runs, on Pyserini's own run type.

`python -m pyserini.fusion --method normalize` min-max normalises each run's scores per query and sums them with
equal weights; its `interpolation` weighs raw scores, which are on different scales (BM25 ~10-40, AligneR ~1-30).
`weighted_normalize` does what `normalize` does with a weight per run: with equal weights its scores are
`normalize`'s divided by the number of runs (the same ranking). A document missing from a run adds 0 for it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from pyserini.trectools import AggregationMethod, RescoreMethod, TrecRun


def check_weights(weights: Sequence[float], runs: int) -> list[float]:
    """The weights normalised to sum 1; refused when their number is not the runs' or one is negative or not
    finite, or all are 0."""
    if len(weights) != runs:
        raise ValueError(f"{len(weights)} weights for {runs} runs: give one weight per run")
    if any(not math.isfinite(w) or w < 0 for w in weights):
        raise ValueError(f"weights must be finite and >= 0, got {list(weights)}")
    total = sum(weights)
    if total == 0:
        raise ValueError("the weights are all 0")
    return [w / total for w in weights]


def weighted_normalize(runs: Sequence[TrecRun], weights: Sequence[float] | None = None, depth: int | None = None,
                       k: int | None = None) -> TrecRun:
    """sum_i weight_i * minmax_q(run_i) (weights normalised to sum 1; default equal); depth/k as in Pyserini."""
    if len(runs) < 2:
        raise ValueError(f"fusion needs at least 2 runs, got {len(runs)}")
    weights = check_weights([1.0] * len(runs) if weights is None else weights, len(runs))
    scaled = [run.clone().rescore(method=RescoreMethod.NORMALIZE).rescore(method=RescoreMethod.SCALE, scale=w)
              for run, w in zip(runs, weights)]
    return TrecRun.merge(scaled, AggregationMethod.SUM, depth=depth, k=k)
