"""Interleaved timing of exact_documents 256 / 128 on SciFact train queries (nlist 8192 index), same machine state:
for each of the first 200 queries, one search with each setting in turn; prints per setting the wall p50 and the
searching thread's CPU p50 (ms), then the load average.

Needs the index `scifact.nlist8192` in runs/exp57 (build8192.py). Run from the repository root:

    PYTHONPATH=. python experiments/aligner-default-path/time_n.py
"""
from __future__ import annotations

import time

import numpy as np
from harness import load, queries, searcher, setup


def main() -> None:
    setup(2)
    model, idx, s = searcher("scifact", "nlist8192")
    qids, qenc, qrels = queries("scifact", "train")
    T = {256: ([], []), 128: ([], [])}
    for v, w in qenc[:200]:
        for n in (256, 128):
            s.exact_documents = n
            a, b = time.perf_counter(), time.thread_time()
            s.rank(v, w, 10)
            T[n][0].append(1000 * (time.perf_counter() - a))
            T[n][1].append(1000 * (time.thread_time() - b))
    for n, (wall, cpu) in T.items():
        print(f"exact_documents {n}: wall p50 {np.median(wall):.1f} thread CPU p50 {np.median(cpu):.1f} ms")
    print("load", load())


if __name__ == "__main__":
    main()
