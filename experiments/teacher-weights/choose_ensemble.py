"""How the teacher ensemble's weights were chosen: rerank each training query's candidates by every teacher and by
weighted z-score ensembles, and score the rankings against the only labels the distillation set has.

    python experiments/teacher-weights/choose_ensemble.py --cache runs/models/distillation   (after `make models`)

Labels: the judged positives of the labelled TRAIN queries (SciFact train); the MS MARCO train triples sample (100
queries, each with its positive and negative passage, candidates = those plus BM25's top 30 from the DL19 subset's
passages: a development set of MS MARCO-style queries that no trainer sees; experiments/devsets.py); and, for
pseudo-queries, the passage each was made from (a weak label, biased towards the teacher that made it). No test
query is read. nDCG@10 with pyserini_ext.evaluation over the candidates. The shipped weights maximise the mean of
the two labelled columns.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

from pyserini_ext.train.distill import TEACHERS, DistillDataConfig, build_distillation_set

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the shared development sets
from devsets import labelled_indices, rerank_ndcg, triples_development_set  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("runs/models/distillation"),
                        help="the distillation cache of `make models`")
    args = parser.parse_args()
    data = build_distillation_set(DistillDataConfig(), args.cache)  # cached by `make models`
    triples = triples_development_set(args.cache / "triples-dev")
    groups = {"labelled (SciFact train)": labelled_indices(data)}
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
