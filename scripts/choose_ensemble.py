"""How the teacher ensemble's weights were chosen: rerank each training query's candidates by every teacher and by
weighted z-score ensembles, and score the rankings against the only labels the distillation set has.

    python scripts/choose_ensemble.py --cache runs/models/distillation

Labels: the judged positives of the labelled TRAIN queries (SciFact train), and, for pseudo-queries, the passage
each was made from (a weak label: a good teacher ranks it high). No test query is read. nDCG@10 with Pyserini's
trec_eval over the candidates.
"""
from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import numpy as np

from pyserini_ext.data import write_trec_qrels
from pyserini_ext.evaluation import trec_eval, write_trec_run
from pyserini_ext.train.distill import TEACHERS, DistillationSet, DistillDataConfig, training_corpus


def rerank_ndcg(data: DistillationSet, scores: list[np.ndarray], indices: list[int], work: Path) -> float:
    run = {data.queries[i].qid: list(zip(data.candidates[i], scores[i].tolist())) for i in indices}
    qrels = {data.queries[i].qid: {d: 1 for d in data.queries[i].positives} for i in indices}
    return trec_eval(write_trec_qrels(qrels, work / "qrels.txt"), write_trec_run(run, work / "run.txt"),
                     metrics=("ndcg_cut_10",))["ndcg_cut_10"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, required=True, help="the folder holding the cached set(s)")
    args = parser.parse_args()
    folder = max(args.cache.glob("*/scores.npz"), key=lambda p: p.stat().st_mtime).parent
    corpus, _, _ = training_corpus(DistillDataConfig())
    data = DistillationSet.load(folder, corpus)
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
    print(f"{'ranking':<24}" + "".join(f"{g:>26}" for g in groups))
    with tempfile.TemporaryDirectory() as tmp:
        for name, weights in settings.items():
            scores = data.ensemble(weights)
            row = [rerank_ndcg(data, scores, indices, Path(tmp)) for indices in groups.values()]
            print(f"{name:<24}" + "".join(f"{v:>26.4f}" for v in row), flush=True)


if __name__ == "__main__":
    main()
