"""Encoding on Ray: 1 worker vs N workers (local Ray, one CPU each), the same passages and shipped model.

    python -m bench.bench_scale_ray --docs 600 --workers 2

Each run is the streaming build (`build_on_ray`, AggretrieverIndexBuilder) end to end with the shipped
Aggretriever (actor start and model load included: what a user waits for) into a Pyserini Faiss index; prints
passages/s, the speed-up over one worker, and checks that the two indexes hold the same vectors.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import ray

from pyserini_ext.data import load_dataset
from pyserini_ext.index.aggretriever import AggretrieverIndexBuilder, AggretrieverIndexSettings
from pyserini_ext.index.streaming import build_on_ray
from pyserini_ext.models.folder import resolve_model


def vectors(folder: Path) -> np.ndarray:
    index = faiss.read_index(str(folder / "index"))
    return index.reconstruct_n(0, index.ntotal)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--docs", type=int, default=600)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    corpus = load_dataset(args.dataset).corpus
    corpus = {d: corpus[d] for d in sorted(corpus)[:args.docs]}
    model = resolve_model("aggretriever", "aggretriever")
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, args.workers):
            start = time.time()
            builder = AggretrieverIndexBuilder(str(model), AggretrieverIndexSettings(max_length=args.max_length))
            out = build_on_ray(builder, iter(corpus.items()), Path(tmp) / f"w{workers}", workers=workers,
                               chunk_docs=max(1, len(corpus) // (4 * workers)), total=len(corpus), progress=False)
            seconds = time.time() - start
            results[workers] = {"seconds": seconds, "passages_per_second": len(corpus) / seconds,
                                "vectors": vectors(out)}
    one, many = results[1], results[args.workers]
    diff = float(np.abs(one.pop("vectors") - many.pop("vectors")).max())
    print(f"Aggretriever, {len(corpus)} {args.dataset} passages, max length {args.max_length}, local Ray")
    print(f"{'workers':>8}{'seconds':>10}{'passages/s':>12}{'speed-up':>10}")
    for workers, row in results.items():
        print(f"{workers:>8}{row['seconds']:>10.1f}{row['passages_per_second']:>12.2f}"
              f"{row['passages_per_second'] / one['passages_per_second']:>9.2f}x")
    print(f"max abs diff between the two indexes' vectors: {diff:.2e}")
    if args.json:
        args.json.write_text(json.dumps({"docs": len(corpus), "max_abs_diff": diff,
                                         "workers": {str(k): v for k, v in results.items()}}))


if __name__ == "__main__":
    main()
