"""The shortlist simulated offline, first version (shortlist scored by `score_documents(..., approximate=True)`):
per development query, the decoded and the approximate scores of the 1,024 candidates, every `exact_documents` N
(0 = every candidate decoded, 512 ... 32) read off them; nDCG@10 against the exact index's run (exact.py), then CPU
and wall p50 of the first 150 queries with N = 0, 256 and 128 through the searcher itself.

Needs the index `<dataset>.<name>` in runs/exp57 (build.py, build8192.py) and, for the "vs exact" column,
`exact.<dataset>.<split>.json` (exact.py). Run from the repository root:

    PYTHONPATH=. python experiments/aligner-default-path/shortlist.py scifact train default
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
from harness import WORK, load, queries, searcher, setup, timed

from bench.common import ndcg10


def main() -> None:
    setup(2)
    ds, split, name = sys.argv[1], sys.argv[2], sys.argv[3]
    model, idx, s = searcher(ds, name, exact_documents=0)
    qids, qenc, qrels = queries(ds, split)
    Ns = [0, 512, 384, 256, 192, 128, 64, 32]
    runs = {n: {} for n in Ns}
    t0 = time.time()
    for qid, (v, w) in zip(qids, qenc):
        docs = s.candidates(v, w, 10)
        ex = s.score_documents(v, w, docs)
        ap = s.score_documents(v, w, docs, approximate=True)
        for n in Ns:
            keep = np.arange(len(docs)) if not n or len(docs) <= n else np.argpartition(-ap, n - 1)[:n]
            order = sorted(keep, key=lambda i: (-ex[i], idx.docids[docs[i]]))[:10]
            runs[n][qid] = {idx.docids[docs[i]]: float(ex[i]) for i in order}
    print("scored in", round(time.time() - t0), "s load", load(), flush=True)
    exact_file = WORK / f"exact.{ds}.{split}.json"
    exact = json.loads(exact_file.read_text()) if exact_file.exists() else None
    e = ndcg10(qrels, exact) if exact else float("nan")
    print(f"{ds} {split} {name}: exact {e:.4f}")
    for n in Ns:
        r = ndcg10(qrels, runs[n])
        print(f"  exact_documents {n:5}: ndcg {r:.4f}  vs exact {100 * (r - e):+.2f}", flush=True)
    for n in [0, 256, 128]:
        s.exact_documents = n
        run, cpu, wall = timed(lambda v, w: {h.docid: h.score for h in s.rank(v, w, 10)}, qids[:150], qenc[:150])
        print(f"  timing exact_documents {n}: cpu p50 {cpu:.1f} wall p50 {wall:.1f} load {load()}", flush=True)


if __name__ == "__main__":
    main()
