"""recall@10 against exact search of one index that bench/scale_aggretriever.py built, at several nprobe (the
docs/scale.md figures: DL19's 43 queries are limited by the codes, DL20's 54, without real neighbours in the
bench's base, by the probing).

    PYTHONPATH=. .venv/bin/python experiments/aggretriever-compressed-index/nprobe.py 100000 --nprobe 8 16 32 64
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import faiss
import numpy as np

from bench.common import DATASET
from bench.scale_aggretriever import load_queries, recall_at_10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n", type=int)
    parser.add_argument("--work", default="runs/scale")
    parser.add_argument("--index-name", default="aggretriever-index_typeivfsq")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[8, 16, 32, 64])
    args = parser.parse_args()
    from pyserini_ext.data import load_dataset

    work = Path(args.work)
    folder = work / f"{args.index_name}-{args.n}"
    index = faiss.read_index(str(folder / "index"))
    docids = (folder / "docid").read_text().split()
    queries = load_queries(work / "aggretriever-base")
    exact = json.loads((work / f"aggretriever-{args.n}.exact.json").read_text())
    qrels = load_dataset(DATASET).qrels("test")
    matrix = np.stack(list(queries.values()))
    for nprobe in args.nprobe:
        faiss.extract_index_ivf(index).nprobe = nprobe
        _, found = index.search(matrix, 10)
        run = {q: [(docids[i], 0.0) for i in found[k] if i >= 0] for k, q in enumerate(queries)}
        print(json.dumps({"N": args.n, "nprobe": nprobe,
                          "recall10_dl19": round(recall_at_10(run, exact, [q for q in queries if q in qrels]), 4),
                          "recall10_dl20": round(recall_at_10(run, exact, [q for q in queries if q not in qrels]), 4)}))


if __name__ == "__main__":
    main()
