"""Few-shot alignment adaptation: choose AligneR's alignment (top-k or top-p) from a few labelled queries.

No parameter changes: for each candidate alignment (k in {1, 2, 4, 6, 8}, p in {0.5%, 1%, 1.5%, 2%}) the labelled
queries are searched and scored by nDCG@10 (pyserini_ext.evaluation); the best one wins (ties: the earlier, i.e.
simpler, option). The candidate documents of a query do not depend on the alignment, so they are generated once
per query. `evaluate_adaptation` is the whole protocol (labelled sample, choice, and the default k=1 against the
chosen alignment on the remaining queries), behind `pyserini-ext aligner adapt`.
"""
from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyserini_ext.evaluation import DEFAULT_METRICS, evaluate, write_trec_run
from pyserini_ext.models.alignment import Alignment
from pyserini_ext.search.aligner import AlignerSearcher

ALIGNMENT_OPTIONS: tuple[Alignment, ...] = tuple(
    [Alignment(k=k) for k in (1, 2, 4, 6, 8)] + [Alignment(k=None, p=p) for p in (0.005, 0.01, 0.015, 0.02)])
MAX_LABELLED_QUERIES = 8


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
    labelled_qrels = {qid: qrels[qid] for qid in qids}
    means: dict[str, float] = {}
    for option in options:
        run = {qid: [(h.docid, h.score) for h in searcher.rank(v, w, k, option, doc_indices=c)]
               for qid, (v, w), c in zip(qids, encoded, candidates)}
        means[str(option)] = evaluate(labelled_qrels, run, ("ndcg_cut_10",))["ndcg_cut_10"]
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


def evaluate_adaptation(searcher: AlignerSearcher, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]],
                        n_labelled: int = 8, seed: int = 42, hits: int = 1000, recall_level: int | None = None,
                        run_dir: str | os.PathLike | None = None) -> dict:
    """Choose the alignment on `n_labelled` judged queries, then score the default (k=1) and the chosen one on
    the remaining judged queries; their runs are written to `run_dir` when given."""
    labelled, remaining = split_labelled(queries, qrels, n_labelled, seed)
    result = adapt_alignment(searcher, labelled, qrels)
    report = {"labelled_qids": list(labelled), **result.as_dict(), "remaining_queries": len(remaining)}
    remaining_qrels = {q: qrels[q] for q in remaining}
    for name, alignment in (("default_k=1", Alignment(k=1)), ("chosen", result.chosen)):
        found = searcher.batch_search(list(remaining.values()), list(remaining), k=hits, alignment=alignment)
        run = {q: [(h.docid, h.score) for h in qhits] for q, qhits in found.items()}
        if run_dir is not None:
            write_trec_run(run, Path(run_dir) / f"run.aligner-adapt.{alignment}.txt", tag=f"aligner-{alignment}")
        report[f"remaining_{name}"] = evaluate(remaining_qrels, run, DEFAULT_METRICS, recall_level)
    return report
