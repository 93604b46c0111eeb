"""Token reduction: keep ceil(beta_d * m) vectors of each document's m tokens, by merging (`pool_tokens`, the
default) or by salience (`prune_tokens`). Every check of these settings is `check_reduction`."""
from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from pyserini_ext.index.aligner.encoding import EncodedCorpus

# Pruning pushes a token back when its cosine with a more salient token of its document is at least this: a
# near-copy adds little to a MaxSim alignment (chosen on development queries: experiments/aligner-token-reduction/)
DUPLICATE_COSINE: float | None = 0.85

# How an index keeps ceil(beta_d * m) vectors of a document's m tokens: "pool" merges them (`pool_tokens`),
# "prune" keeps the most salient (`prune_tokens`); pooling lost less (experiments/aligner-token-reduction/)
REDUCTIONS = ("pool", "prune")
DEFAULT_REDUCTION = "pool"


def check_reduction(beta_d: float, reduction: str = DEFAULT_REDUCTION,
                    duplicate_cosine: float | None = None) -> None:
    """The one range check of the reduction settings (a ValueError naming the setting)."""
    if not 0 < beta_d <= 1:
        raise ValueError(f"beta_d must be in (0, 1], got {beta_d}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if duplicate_cosine is not None and not 0 < duplicate_cosine <= 1:
        raise ValueError(f"duplicate_cosine must be in (0, 1], got {duplicate_cosine}")


def prune_tokens(offsets: np.ndarray, salience_scores: np.ndarray, beta_d: float, vectors: np.ndarray | None = None,
                 duplicate_cosine: float | None = None) -> np.ndarray:
    """Row numbers of the kept tokens: the top ceil(beta_d * m) of each document by salience, in original order.

    With `vectors` and `duplicate_cosine`, a token whose cosine with a more salient token of the same document is
    >= duplicate_cosine ranks after every other token of that document: a near-copy adds little to a MaxSim
    alignment, so the budget goes to distinct tokens first (repeated words, subwords of one word).
    """
    check_reduction(beta_d, "prune", duplicate_cosine)
    lengths = np.diff(offsets)
    doc_of_token = np.repeat(np.arange(len(lengths)), lengths)
    duplicate = np.zeros(len(salience_scores), dtype=bool)
    if duplicate_cosine is not None and beta_d < 1:
        if vectors is None:
            raise ValueError("duplicate_cosine needs the token vectors")
        for start, stop in zip(offsets[:-1], offsets[1:]):
            by_salience = start + np.argsort(-salience_scores[start:stop], kind="stable")
            block = np.asarray(vectors[by_salience], dtype=np.float32)
            similar_to_earlier = np.tril(block @ block.T >= duplicate_cosine, k=-1)
            duplicate[by_salience] = similar_to_earlier.any(axis=1)
    # by document, then distinct tokens first, then salience descending
    order = np.lexsort((-salience_scores, duplicate, doc_of_token))
    rank_in_doc = np.empty(len(order), dtype=np.int64)
    rank_in_doc[order] = np.arange(len(order)) - offsets[doc_of_token[order]]
    keep_per_doc = np.maximum(1, np.ceil(lengths * beta_d - 1e-9).astype(np.int64))
    return np.flatnonzero(rank_in_doc < keep_per_doc[doc_of_token])


def pool_tokens(offsets: np.ndarray, vectors: np.ndarray, salience_scores: np.ndarray, beta_d: float,
                progress: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, vectors, salience scores) with each document's m tokens merged into at most ceil(beta_d * m).

    Token pooling (Clavie et al., 2024): Ward-linkage clusters of each document's token vectors; a cluster becomes
    the salience-weighted mean of its members, L2-normalised, and keeps its most salient member's score. Unlike
    pruning, no part of the document loses its vector: the tokens that go are merged into their nearest group.
    Fewer clusters than the budget come out only where vectors are identical.
    """
    from scipy.cluster.hierarchy import fcluster, linkage

    check_reduction(beta_d, "pool")
    pooled_vectors, pooled_scores, pooled_lengths = [], [], []
    for start, stop in tqdm(list(zip(offsets[:-1], offsets[1:])), desc="pool tokens", disable=not progress):
        block = np.asarray(vectors[start:stop], dtype=np.float64)
        scores = np.asarray(salience_scores[start:stop], dtype=np.float32)
        budget = max(1, int(np.ceil(len(block) * beta_d - 1e-9)))
        if budget >= len(block):
            pooled_vectors.append(block)
            pooled_scores.append(scores)
            pooled_lengths.append(len(block))
            continue
        labels = fcluster(linkage(block, method="ward"), budget, criterion="maxclust")
        order = np.argsort(labels, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(labels[order]) != 0])
        weights = np.maximum(scores[order], 0)[:, None] + 1e-6  # all-zero salience: the plain mean
        means = np.add.reduceat(block[order] * weights, starts)
        pooled_vectors.append(means / np.linalg.norm(means, axis=1, keepdims=True))
        pooled_scores.append(np.maximum.reduceat(scores[order], starts))
        pooled_lengths.append(len(starts))
    return (np.concatenate([[0], np.cumsum(pooled_lengths)]).astype(np.int64),
            np.concatenate(pooled_vectors).astype(vectors.dtype), np.concatenate(pooled_scores))


def reduce_tokens(encoded: EncodedCorpus, beta_d: float, reduction: str = DEFAULT_REDUCTION,
                  duplicate_cosine: float | None = DUPLICATE_COSINE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, vectors, salience scores) of the kept (pooled or pruned) tokens of each document."""
    if not encoded.docids:  # an all-empty chunk of a stream
        return np.zeros(1, np.int64), encoded.vectors[:0], encoded.salience_scores[:0]
    if reduction == "pool" and beta_d < 1:
        return pool_tokens(encoded.offsets, encoded.vectors, encoded.salience_scores, beta_d)
    kept = prune_tokens(encoded.offsets, encoded.salience_scores, beta_d, encoded.vectors, duplicate_cosine)
    lengths = np.diff(encoded.offsets)
    kept_lengths = np.bincount(np.repeat(np.arange(len(lengths)), lengths)[kept], minlength=len(lengths))
    return (np.concatenate([[0], np.cumsum(kept_lengths)]).astype(np.int64), encoded.vectors[kept],
            encoded.salience_scores[kept])
