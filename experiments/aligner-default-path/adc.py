"""Scoring on asymmetric lookup tables (ADC) against decoding, on 61,000 tokens of the SciFact default index (rows
200,000-260,999, about 256 documents) for the first 20 SciFact train queries: process CPU p50 ms of the codec's
`similarities` (Faiss decode + product + renormalisation, the current path) and of the residual term alone from
per-query-token tables of the 32 sub-codebooks' inner products (`torch.nn.functional.embedding_bag` over the
codes, without the norms the renormalisation needs); prints one line each with the load average.

Needs the index `scifact.default` in runs/exp57 (build.py). Run from the repository root:

    PYTHONPATH=. python experiments/aligner-default-path/adc.py
"""
from __future__ import annotations

import time

import faiss
import numpy as np
import torch
from harness import index, load, queries, setup

from pyserini_ext.index.aligner import AlignerIndex


def main() -> None:
    setup(2)
    idx = AlignerIndex.open(index("scifact", "default"))
    c = idx.codec
    pq = faiss.downcast_index(c.ivfpq).pq
    M, nbits, ksub, dsub = pq.M, pq.nbits, pq.ksub, pq.dsub
    book = torch.from_numpy(faiss.vector_to_array(pq.centroids).reshape(M, ksub, dsub))
    qids, qenc, qrels = queries("scifact", "train")
    rows = np.arange(200000, 200000 + 61000)
    codes = np.ascontiguousarray(c.codes[rows])
    bits = np.unpackbits(codes[:, 2:], axis=1, bitorder="little").reshape(len(rows), M, nbits)
    padded = np.concatenate([bits, np.zeros((len(rows), M, 8 - nbits), np.uint8)], 2)
    sub = torch.from_numpy(np.packbits(padded, axis=2, bitorder="little")[:, :, 0].astype(np.int64)
                           + np.arange(M) * ksub)
    T = {"decode+matmul (current)": [], "ADC embedding_bag (residual only, no norms)": []}
    for v, _ in qenc[:20]:
        q = torch.from_numpy(v.astype(np.float32))
        a = time.process_time()
        c.similarities(rows, v.astype(np.float32))
        T["decode+matmul (current)"].append(time.process_time() - a)
        a = time.process_time()
        lut = torch.einsum("mkd,nmd->mkn", book, q.view(len(v), M, dsub)).reshape(M * ksub, len(v))
        torch.nn.functional.embedding_bag(sub, lut, mode="sum")
        T["ADC embedding_bag (residual only, no norms)"].append(time.process_time() - a)
    for k, x in T.items():
        print(f"{k:45} cpu p50 {1000 * np.median(x):.1f} ms for 61,000 tokens (256 SciFact documents), load {load()}")


if __name__ == "__main__":
    main()
