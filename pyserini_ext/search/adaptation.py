"""Few-shot alignment adaptation: choose AligneR's alignment (top-k or top-p) from a few labelled queries.

No parameter changes: for each candidate alignment (k in {1, 2, 4, 6, 8}, p in {0.5%, 1%, 1.5%, 2%}) the labelled
queries are searched and scored by nDCG@10; the best one wins (ties: the earlier, i.e. simpler, option). The
candidate documents of a query do not depend on the alignment, so they are generated once per query.
"""
from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyserini_ext.models.alignment import Alignment
from pyserini_ext.search.aligner import AlignerSearcher

ALIGNMENT_OPTIONS: tuple[Alignment, ...] = tuple(
    [Alignment(k=k) for k in (1, 2, 4, 6, 8)] + [Alignment(k=None, p=p) for p in (0.005, 0.01, 0.015, 0.02)])
MAX_LABELLED_QUERIES = 8


def ndcg_at_10(ranking: Sequence[str], judgements: Mapping[str, int]) -> float:
    """trec_eval's ndcg_cut.10: linear gains (relevance level), log2(rank + 1) discount, ideal from the qrels."""
    gains = [max(0, judgements.get(docid, 0)) for docid in ranking[:10]]
    dcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(gains))
    ideal = sorted((max(0, g) for g in judgements.values()), reverse=True)[:10]
    idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


@dataclass
class AdaptationResult:
    chosen: Alignment
    labelled_ndcg: dict[str, float] = field(default_factory=dict)  # str(alignment) -> mean nDCG@10

    def as_dict(self) -> dict:
        return {"chosen": str(self.chosen), "labelled_ndcg_at_10": self.labelled_ndcg}


def adapt_alignment(searcher: AlignerSearcher, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]],
                    options: Sequence[Alignment] = ALIGNMENT_OPTIONS, k: int = 10) -> AdaptationResult:
    """Pick the alignment with the best mean nDCG@10 over `queries` (at most 8, each judged in `qrels`)."""
    if not queries:
        raise ValueError("few-shot adaptation needs at least one labelled query")
    if len(queries) > MAX_LABELLED_QUERIES:
        raise ValueError(f"few-shot adaptation takes at most {MAX_LABELLED_QUERIES} labelled queries, "
                         f"got {len(queries)}")
    unjudged = [qid for qid in queries if not qrels.get(qid)]
    if unjudged:
        raise ValueError(f"labelled queries without judgements: {', '.join(unjudged)}")
    qids = list(queries)
    encoded = searcher.encode_queries([queries[q] for q in qids])
    candidates = [searcher.candidates(vectors, weights) for vectors, weights in encoded]
    means: dict[str, float] = {}
    for option in options:
        per_query = [ndcg_at_10([h.docid for h in searcher.rank(v, w, k, option, doc_indices=c)], qrels[qid])
                     for qid, (v, w), c in zip(qids, encoded, candidates)]
        means[str(option)] = sum(per_query) / len(per_query)
    best = max(range(len(options)), key=lambda i: (means[str(options[i])], -i))
    return AdaptationResult(options[best], means)


def split_labelled(queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], n_labelled: int = 8,
                   seed: int = 42) -> tuple[dict[str, str], dict[str, str]]:
    """(labelled, remaining) queries: a seeded sample of judged queries, and every other judged query."""
    judged = [q for q in queries if qrels.get(q)]
    if len(judged) <= n_labelled:
        raise ValueError(f"need more than {n_labelled} judged queries to keep some for evaluation, got {len(judged)}")
    labelled = set(random.Random(seed).sample(judged, n_labelled))
    return ({q: queries[q] for q in judged if q in labelled}, {q: queries[q] for q in judged if q not in labelled})
