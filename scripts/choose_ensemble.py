"""How the teacher ensemble's weights were chosen: rerank each training query's candidates by every teacher and by
weighted z-score ensembles, and score the rankings against the only labels the distillation set has.

    python scripts/choose_ensemble.py --cache runs/models/distillation   (after `make models`)

Labels: the judged positives of the labelled TRAIN queries (SciFact train); the MS MARCO train triples sample (100
queries, each with its positive and negative passage, candidates = those plus BM25's top 30 from the DL19 subset's
passages: a development set of MS MARCO-style queries that no trainer sees); and, for pseudo-queries, the passage each
was made from (a weak label, biased towards the teacher that made it). No test query is read. nDCG@10 with
ir_measures over the candidates. The shipped weights maximise the mean of the two labelled columns.
"""
from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import ir_measures
import numpy as np
from ir_measures import nDCG

from pyserini_ext.data import data_home, load_dataset
from pyserini_ext.train.distill import (
    TEACHERS,
    DistillationSet,
    DistillDataConfig,
    TrainingQuery,
    bm25_rankings,
    build_distillation_set,
    read_triples,
)


def rerank_ndcg(data: DistillationSet, scores: list[np.ndarray], indices: list[int]) -> float:
    run = {data.queries[i].qid: dict(zip(data.candidates[i], scores[i].tolist())) for i in indices}
    qrels = {data.queries[i].qid: {d: 1 for d in data.queries[i].positives} for i in indices}
    return ir_measures.calc_aggregate([nDCG @ 10], qrels, run)[nDCG @ 10]


def triples_development_set(cache: Path) -> DistillationSet:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("runs/models/distillation"),
                        help="the distillation cache of `make models`")
    args = parser.parse_args()
    data = build_distillation_set(DistillDataConfig(), args.cache)  # cached by `make models`
    triples = triples_development_set(args.cache / "triples-dev")
    groups = {"labelled (SciFact train)": [i for i, q in enumerate(data.queries) if q.kind == "labelled"]}
    rng = np.random.default_rng(0)
    for kind in ("title", "sentence", "keywords"):  # 500 of each kind: enough to compare, quick to score
        indices = [i for i, q in enumerate(data.queries) if q.kind == kind]
        groups[f"pseudo: {kind}"] = sorted(rng.choice(indices, min(500, len(indices)), replace=False).tolist())
    settings = {name: {name: 1.0} for name in TEACHERS}
    for w in itertools.product([0.0, 0.15, 0.35, 0.5, 0.7], repeat=3):
        if abs(sum(w) - 1.0) < 1e-6 and sum(x > 0 for x in w) >= 2:
            settings["ens " + "/".join(f"{x:.2f}" for x in w)] = dict(zip(TEACHERS, w))
    print(f"{len(data.queries)} queries; nDCG@10 over their candidates; weights = {'/'.join(TEACHERS)}")
    print(f"{'ranking':<24}{'MS MARCO triples':>26}" + "".join(f"{g:>26}" for g in groups))
    for name, weights in settings.items():
        scores = data.ensemble(weights)
        row = [rerank_ndcg(triples, triples.ensemble(weights), list(range(len(triples.queries))))]
        row += [rerank_ndcg(data, scores, indices) for indices in groups.values()]
        print(f"{name:<24}" + "".join(f"{v:>26.4f}" for v in row), flush=True)


if __name__ == "__main__":
    main()
