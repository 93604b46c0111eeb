"""The two labelled development sets the reranking experiments score on (no test query is read), and their metric.

- MS MARCO triples: the 100 queries of the packaged train-triples sample, each with its positive and negative
  passage; candidates = those two plus BM25's top 30 of the DL19 subset's passages. No trainer sees them.
- SciFact train: the labelled queries of the distillation set that `make models` builds (they are in training,
  so they flatter models that fit them).

nDCG@10 comes from `pyserini_ext.evaluation` (trec_eval -c values), as everywhere else. Scripts in the folders
beside this file import it after putting this folder on `sys.path`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from pyserini_ext.data import data_home, load_dataset
from pyserini_ext.evaluation import evaluate
from pyserini_ext.train.distill import (
    DistillationSet,
    DistillDataConfig,
    TrainingQuery,
    bm25_rankings,
    build_distillation_set,
    read_triples,
)


def rerank_ndcg(data: DistillationSet, scores: Sequence[np.ndarray] | Mapping[int, np.ndarray],
                indices: list[int]) -> float:
    """nDCG@10 of the queries `indices`, each ranking its own candidates by `scores[i]`, against its positives."""
    run = {data.queries[i].qid: list(zip(data.candidates[i], scores[i].tolist())) for i in indices}
    qrels = {data.queries[i].qid: {d: 1 for d in data.queries[i].positives} for i in indices}
    return evaluate(qrels, run, metrics=("ndcg_cut_10",))["ndcg_cut_10"]


def triples_development_set(cache: Path) -> DistillationSet:
    """The MS MARCO triples development set with its teacher scores (built once, cached under `cache`)."""
    dl19 = load_dataset("msmarco-dl19-subset").corpus
    corpus = {f"msmarco-dl19-subset/{d}": doc for d, doc in dl19.items()}
    queries = []
    for i, (query, positive, negative) in enumerate(read_triples(data_home() / "msmarco-train-triples-sample")):
        corpus[f"triples/p{i}"] = {"title": "", "text": positive}
        corpus[f"triples/n{i}"] = {"title": "", "text": negative}
        queries.append(TrainingQuery(f"triples/q{i}", query, "labelled", (f"triples/p{i}",)))
    bm25 = bm25_rankings(corpus, {q.qid: q.text for q in queries}, 30, threads=2)
    keep = {d for hits in bm25.values() for d, _ in hits} | {d for d in corpus if d.startswith("triples/")}
    return build_distillation_set(DistillDataConfig(datasets={}, triples=None), cache,
                                  corpus_and_queries=({d: corpus[d] for d in keep}, queries, []))


def labelled_indices(data: DistillationSet) -> list[int]:
    """The positions of the labelled (SciFact train) queries of the distillation set."""
    return [i for i, q in enumerate(data.queries) if q.kind == "labelled"]
