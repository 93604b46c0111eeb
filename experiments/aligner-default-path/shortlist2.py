"""The shortlist as shipped, simulated offline (the figures of docs/aligner.md's "How the shortlist and the cap were
chosen" table): per development query the 1,024 candidates, their shortlist scores (MaxSim over every token's
centroid, `maxsim_concatenated` on `approximate_similarities`) and the decoded scores of the best 256, every smaller
shortlist (128, 64, 32, 16) read off those. Prints the index's bytes per token and nlist, then nDCG@10 per
shortlist size and its difference from the exact index's run (exact.py); with `--time`, CPU and wall p50 of the first
150 queries with `exact_documents` 0, 256, 128 and 64 through the searcher itself.

Needs the index `<dataset>.<name>` in runs/exp57 (build.py: `default`; build8192.py: `nlist8192`) and
`exact.<dataset>.<split>.json` (exact.py). Run from the repository root:

    PYTHONPATH=. python experiments/aligner-default-path/shortlist2.py scifact train default --time
    PYTHONPATH=. python experiments/aligner-default-path/shortlist2.py scifact train nlist8192
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
from harness import WORK, load, queries, searcher, setup, timed

from bench.common import ndcg10
from pyserini_ext.search.aligner import maxsim_concatenated


def main() -> None:
    setup(2)
    ds, split, name = sys.argv[1], sys.argv[2], sys.argv[3]
    model, idx, s = searcher(ds, name)
    print(name, "bytes/token", idx.bytes_per_token(), "nlist", idx.metadata["nlist"], flush=True)
    qids, qenc, qrels = queries(ds, split)
    Ns = [256, 128, 64, 32, 16]
    runs = {n: {} for n in Ns}
    t0 = time.time()
    for qid, (v, w) in zip(qids, qenc):
        docs = s.candidates(v, w, 10)
        rows, lengths = idx.token_rows(docs)
        ap = maxsim_concatenated(idx.codec.approximate_similarities(rows, v), w,
                                 np.asarray(idx.weights[rows], np.float32), lengths)
        order = np.argsort(-ap, kind="stable")
        top = docs[order[:256]]
        ex = dict(zip(top, s.score_documents(v, w, np.sort(top))[np.argsort(np.argsort(top))]))
        for n in Ns:
            keep = top[:n]
            best = sorted(keep, key=lambda d: (-ex[d], idx.docids[d]))[:10]
            runs[n][qid] = {idx.docids[d]: float(ex[d]) for d in best}
    print("scored in", round(time.time() - t0), "s load", load(), flush=True)
    exact = json.loads((WORK / f"exact.{ds}.{split}.json").read_text())
    e = ndcg10(qrels, exact)
    print(f"{ds} {split} {name}: exact {e:.4f}")
    for n in Ns:
        r = ndcg10(qrels, runs[n])
        print(f"  exact_documents {n:5}: ndcg {r:.4f}  vs exact {100 * (r - e):+.2f}", flush=True)
    if "--time" in sys.argv:
        for n in [0, 256, 128, 64]:
            s.exact_documents = n
            run, cpu, wall = timed(lambda v, w: {h.docid: h.score for h in s.rank(v, w, 10)}, qids[:150], qenc[:150])
            print(f"  timing exact_documents {n}: cpu p50 {cpu:.1f} wall p50 {wall:.1f} load {load()}", flush=True)


if __name__ == "__main__":
    main()
