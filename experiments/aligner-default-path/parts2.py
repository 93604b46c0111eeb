"""CPU ms per stage of a default query (SciFact train, first 60 queries, nlist 8192 index), with 256 documents
decoded after the shortlist (the default when this was measured; now 128, hence `exact_documents=256` here):
process CPU p50 of the centroid candidates (1,024 documents), the shortlist, the decoded scoring of the 256 kept,
and of the whole `rank`; then the load average.

Needs the index `scifact.nlist8192` in runs/exp57 (build8192.py). Run from the repository root:

    PYTHONPATH=. python experiments/aligner-default-path/parts2.py
"""
from __future__ import annotations

import time

import numpy as np
from harness import load, queries, searcher, setup


def main() -> None:
    setup(2)
    model, idx, s = searcher("scifact", "nlist8192", exact_documents=256)
    qids, qenc, qrels = queries("scifact", "train")
    T = {}

    def t(name, fn, *args):
        a = time.process_time()
        r = fn(*args)
        T.setdefault(name, []).append(1000 * (time.process_time() - a))
        return r

    for v, w in qenc[:60]:
        docs = t("1 candidates (1,024)", s.candidates, v, w, 10)
        short = t("2 shortlist (-> 256)", s.shortlist, v, w, docs, 10)
        t("3 decoded scoring (256)", s.score_documents, v, w, short)
        t("all: rank", s.rank, v, w, 10)
    for k, x in T.items():
        print(f"{k:26} cpu p50 {np.median(x):7.1f} ms")
    print("load", load())


if __name__ == "__main__":
    main()
