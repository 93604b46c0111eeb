"""The centroid path's search settings at scale, chosen on development queries: the MS MARCO train-triples
sample's queries (encoded by the shipped AligneR; never a test query), recall@10 against the exhaustive exact
scoring of an index bench/scale_aligner.py built (real DL19-subset passages + recombined distractors), for
(nprobe, centroid-stage documents, decoded documents) triples.

    PYTHONPATH=. python experiments/aligner-default-path/scale_dev.py --n 1000000 --queries 60 \
        --grid 4:1024:128 8:4096:256 16:2048:256
    PYTHONPATH=. python experiments/aligner-default-path/scale_dev.py --n 0 --queries 60 \
        --index runs/report/full/dl19/index.aligner.<tag>.auto2048-s128.beta1 --grid ...

The exact top 10 is computed once per N by the bench's own exact step (one process, hours per 100 queries at
1M on one core: --queries bounds it) and cached beside the index.
"""
from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def dev_queries(folder: Path, count: int) -> Path:
    """<folder>/queries.npz in the bench's layout (token vectors, their weight as the last column)."""
    if (folder / "queries.npz").is_file():
        return folder
    from pyserini_ext.data.beir import data_home
    from pyserini_ext.models.aligner import QUERY, AlignerModel
    from pyserini_ext.models.alignment import DEFAULT_BETA_Q
    from pyserini_ext.models.folder import resolve_model

    triples = data_home() / "msmarco-train-triples-sample" / "triples.tsv.gz"
    texts = sorted({line.split("\t")[0] for line in gzip.open(triples, "rt", encoding="utf-8")})[:count]
    model = AlignerModel.from_pretrained(resolve_model("aligner", "aligner")).eval()
    batch = model.encode_batch(texts, QUERY)
    weights, kept = batch.weights(DEFAULT_BETA_Q)
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "queries.npz", **{f"t{i}": np.concatenate(
        [batch.vectors[i][kept[i]].detach().numpy(), weights[i][kept[i]].detach().numpy()[:, None]], axis=1)
        for i in range(len(texts))})
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, required=True, help="the bench's index of N documents (0: --index)")
    parser.add_argument("--index", type=Path, help="another residual-pq index (e.g. the report's DL19 one)")
    parser.add_argument("--work", type=Path, default=Path("runs/scale"))
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--grid", nargs="+", default=["4:1024:128"], help="nprobe:documents:decoded")
    args = parser.parse_args()
    from bench.scale_aligner import load_queries
    from pyserini_ext.index.aligner import AlignerIndex
    from pyserini_ext.search.aligner import AlignerSearcher

    folder = dev_queries(args.work / f"aligner-dev-queries-{args.queries}", args.queries)
    index_folder = args.index or args.work / f"aligner-{args.n}"
    exact = index_folder.with_name(f"{index_folder.name}.dev{args.queries}-exact.json")
    if not exact.is_file():
        subprocess.run([sys.executable, "-m", "bench.scale_aligner", "--base", str(folder), "--index",
                        str(index_folder), "--n", str(args.n), "--run", str(exact), "exact"], check=True)
    reference = json.loads(exact.read_text())
    queries = load_queries(folder)
    for spec in args.grid:
        nprobe, documents, decoded = map(int, spec.split(":"))
        index = AlignerIndex.open(index_folder, nprobe=nprobe)
        searcher = AlignerSearcher(index, index.metadata["model"]["path"], check_model=False,
                                   neighbours=documents, exact_documents=decoded)
        shares, times = [], []
        for qid, (vectors, weights) in queries.items():
            started = time.perf_counter()
            hits = searcher.rank(vectors, weights, 10)
            times.append(time.perf_counter() - started)
            shares.append(len({h.docid for h in hits} & {d for d, _ in reference[qid]}) / 10)
        print(f"{index_folder.name} nprobe {nprobe} centroid-stage documents {documents} decoded {decoded}: recall@10 "
              f"{np.mean(shares):.4f}, p50 {1000 * np.median(times):.1f} ms (one thread, machine as it is)",
              flush=True)


if __name__ == "__main__":
    main()
