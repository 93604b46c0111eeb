"""The exact index's run (float16 vectors, flat candidates, every document and query token) of each split given:
writes runs/exp57/exact.<dataset>.<split>.json (the reference shortlist.py and shortlist2.py compare with) and
prints the number of queries, nDCG@10, CPU and wall p50 ms and the load average.

Run from the repository root (builds the index if build.py has not):

    PYTHONPATH=. python experiments/aligner-default-path/exact.py scifact train
"""
from __future__ import annotations

import json
import sys

from harness import WORK, index, load, queries, setup, timed

from bench.common import model_folder, ndcg10
from pyserini_ext.index.aligner import AlignerIndex
from pyserini_ext.models.aligner import AlignerModel
from pyserini_ext.search.aligner import AlignerSearcher


def main() -> None:
    setup(2)
    ds = sys.argv[1]
    model = AlignerModel.from_pretrained(model_folder("aligner", None, "aligner_config.json"))
    idx = AlignerIndex.open(index(ds, "exact", codec="float16", candidates="flat"))
    s = AlignerSearcher(idx, model)
    for split in sys.argv[2:]:
        qids, qenc, qrels = queries(ds, split)
        run, cpu, wall = timed(lambda v, w: {h.docid: h.score for h in s.rank(v, w, 10)}, qids, qenc)
        (WORK / f"exact.{ds}.{split}.json").write_text(json.dumps(run))
        print(ds, split, len(qids), "exact ndcg", round(ndcg10(qrels, run), 4), "cpu p50", round(cpu, 1),
              "wall", round(wall, 1), "load", load(), flush=True)


if __name__ == "__main__":
    main()
