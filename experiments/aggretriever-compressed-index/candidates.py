"""Which compressed Faiss index for the Aggretriever at MS MARCO size: each candidate trained on the first
--train-docs vectors, filled with N vectors (the bench's real DL19-subset passages + mixtures of them,
bench/scale_aggretriever.py), searched one query at a time; recall@10 against exact inner products, p50, bytes per
passage. Settings are chosen on DL20's 54 queries (no judgments in this copy: recall against flat only), or with
--dev on the MS MARCO train-triples sample's 100 queries (refine_dev.py's development set); DL19's 43 give recall and
nDCG@10 after the choice. --pq-train-points caps each PQ sub-quantizer's k-means sample (Faiss's default: 256 x 256).

    python experiments/aggretriever-compressed-index/candidates.py --n 100000 --work runs/scale \
        --candidates "IVF1024,SQ4" "IVF1024,PQ256" --nprobe 16 32 64
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import faiss
import numpy as np

from bench.common import DATASET, ndcg10
from bench.scale_aggretriever import Base, exact_top10, load_queries, recall_at_10


def make_index(spec: str, sample: np.ndarray):
    """A Faiss factory string, where a leading "UPCA<d>," is our uncentred PCA (index/aggretriever.py)."""
    from pyserini_ext.index.aggretriever import uncentred_pca

    first, _, rest = spec.partition(",")
    if first.startswith("UPCA"):
        dims = int(first[4:])
        inner = faiss.index_factory(dims, rest, faiss.METRIC_INNER_PRODUCT)
        return faiss.IndexPreTransform(uncentred_pca(sample, dims), inner)
    return faiss.index_factory(sample.shape[1], spec, faiss.METRIC_INNER_PRODUCT)


def search(index, matrix: np.ndarray, hits: int) -> tuple[np.ndarray, list[float]]:
    times, found = [], []
    for q in matrix:
        started = time.perf_counter()
        _, rows = index.search(q[None], hits)
        times.append(time.perf_counter() - started)
        found.append(rows[0][:10])
    return np.stack(found), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100000)
    parser.add_argument("--work", default="runs/scale")
    parser.add_argument("--train-docs", type=int, default=65536)
    parser.add_argument("--candidates", nargs="+", default=["IVF1024,SQ4"])
    parser.add_argument("--nprobe", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--k-factor", type=float, nargs="+", default=[4])
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=None, help="append result rows (JSON lines) here")
    parser.add_argument("--dev", action="store_true", help="recall@10 of the development queries too (recall10_dev)")
    parser.add_argument("--pq-train-points", type=int, default=0,
                        help="PQ training points per centroid (0: Faiss default)")
    args = parser.parse_args()
    from pyserini_ext.data import load_dataset

    folder = Path(args.work) / "aggretriever-base"
    base = Base(folder)
    queries = load_queries(folder)
    qrels = load_dataset(DATASET).qrels("test")
    dl19 = [q for q in queries if q in qrels]
    dl20 = [q for q in queries if q not in qrels]
    docids = base.docids_of(args.n)
    vectors = base.of(docids)
    exact_file = Path(args.work) / f"aggretriever-{args.n}.exact.json"
    if exact_file.is_file():
        exact = json.loads(exact_file.read_text())
    else:
        exact = exact_top10(base, queries, args.n)
        exact_file.write_text(json.dumps(exact))
    matrix = np.stack(list(queries.values()))
    dev = {}
    if args.dev:
        from refine_dev import dev_queries, dev_reference  # this folder's development set (on sys.path)

        dev = dev_queries(Path(args.work))
        dev_exact = dev_reference(Path(args.work), base, dev, args.n)
        dev_matrix = np.stack(list(dev.values()))
    print(f"N {args.n}, real {min(args.n, len(base.docids))}, exact DL19 nDCG@10 "
          f"{ndcg10(qrels, {q: dict(exact[q]) for q in dl19}):.4f}", flush=True)
    for spec in args.candidates:
        faiss.omp_set_num_threads(args.threads)
        started = time.time()
        index = make_index(spec, vectors[:args.train_docs])
        ivf = faiss.try_extract_index_ivf(index)
        pq = getattr(faiss.downcast_index(ivf if ivf is not None else index), "pq", None)
        if pq is not None and args.pq_train_points:
            pq.cp.max_points_per_centroid = args.pq_train_points
        index.train(vectors[:args.train_docs])
        trained = time.time() - started
        index.add(vectors)
        size = faiss.serialize_index(index).size
        refine = faiss.downcast_index(index) if "Refine" in spec or "RFlat" in spec else None
        faiss.omp_set_num_threads(1)  # one query at a time on one core: what a 2-core machine gives each query
        for nprobe in args.nprobe if ivf is not None else [0]:
            for k_factor in args.k_factor if refine is not None else [0]:
                if ivf is not None:
                    ivf.nprobe = nprobe
                if refine is not None:
                    refine.k_factor = k_factor
                found, times = search(index, matrix, args.hits)
                run = {q: [(docids[r], 0.0) for r in found[i] if r >= 0] for i, q in enumerate(queries)}
                row = {"candidate": spec, "N": args.n, "nprobe": nprobe, "k_factor": k_factor,
                       "bytes_per_passage": round(size / args.n, 1), "train_s": round(trained, 1),
                       "p50_ms": round(1000 * float(np.median(times)), 2),
                       "recall10_dl20": round(recall_at_10(run, exact, dl20), 4),
                       "recall10_dl19": round(recall_at_10(run, exact, dl19), 4),
                       "ndcg10_dl19": round(ndcg10(qrels, {q: {d: -r for r, (d, _) in enumerate(run[q])}
                                                           for q in dl19}), 4)}
                if dev:
                    found, times = search(index, dev_matrix, args.hits)
                    dev_run = {q: [(docids[r], 0.0) for r in found[i] if r >= 0] for i, q in enumerate(dev)}
                    row["recall10_dev"] = round(recall_at_10(dev_run, dev_exact, dev), 4)
                    row["p50_ms_dev"] = round(1000 * float(np.median(times)), 2)
                print(json.dumps(row), flush=True)
                if args.output:
                    with open(args.output, "a") as f:
                        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
