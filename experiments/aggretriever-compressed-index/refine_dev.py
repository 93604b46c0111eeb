"""ivfpq-refine's search defaults chosen on development queries: the MS MARCO train-triples sample's 100 queries
(encoded by the shipped default; never a test query), recall@10 against exact search of the bench's N vectors
(bench/scale_aggretriever.py: real DL19-subset passages + mixtures of them) for an ivfpq-refine index the bench
built, at several nprobe x candidates; and, with --refine-codecs, the same candidates re-scored from other codes
than fp16 (scalar quantizers trained on the first 65,536 vectors, optionally after a random rotation).

    PYTHONPATH=. python experiments/aggretriever-compressed-index/refine_dev.py --n 1000000 \
        --index runs/scale/aggretriever-index_typeivfpq-refine-1000000 --nprobe 128 256 512 --candidates 1000 2000 4000
    PYTHONPATH=. python experiments/aggretriever-compressed-index/refine_dev.py --n 1000000 --index ... \
        --nprobe 256 --candidates 2000 4000 --refine-codecs SQfp16 SQ8 SQ6 SQ4 RR1024,SQ6 \
        PCA768,SQ8 PCAR768,SQ8 PCA640,SQ8
"""
from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import faiss
import numpy as np
import torch

from bench.scale_aggretriever import Base, _model_folder, exact_top10, recall_at_10
from pyserini_ext.data.beir import data_home
from pyserini_ext.integration.search_faiss import read_faiss_index


def dev_queries(work: Path) -> dict[str, np.ndarray]:
    cache = work / "dev-queries.npz"
    if not cache.is_file():
        from pyserini_ext.integration.encoders import AggretrieverQueryEncoder

        triples = data_home() / "msmarco-train-triples-sample" / "triples.tsv.gz"
        texts = sorted({line.split("\t")[0] for line in gzip.open(triples, "rt", encoding="utf-8")})
        encoder = AggretrieverQueryEncoder(_model_folder())
        np.savez(cache, **{f"t{i}": encoder.encode(text) for i, text in enumerate(texts)})
    with np.load(cache) as data:
        return {q: data[q].astype(np.float32) for q in data}


def dev_reference(work: Path, base: Base, queries: dict[str, np.ndarray], n: int) -> dict:
    """The development queries' exact top 10 over the bench's first n vectors, cached under WORK."""
    exact_file = work / f"dev-queries-{n}.exact.json"
    if not exact_file.is_file():
        exact_file.write_text(json.dumps(exact_top10(base, queries, n)))
    return json.loads(exact_file.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--index", required=True, help="an ivfpq-refine folder bench/scale_aggretriever.py built")
    parser.add_argument("--work", default="runs/scale")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[256])
    parser.add_argument("--candidates", type=int, nargs="+", default=[1000, 2000, 4000])
    parser.add_argument("--refine-codecs", nargs="*", default=[], help="Faiss factory strings of flat code indexes")
    args = parser.parse_args()
    torch.set_num_threads(2)
    faiss.omp_set_num_threads(1)
    work = Path(args.work)
    base = Base(work / "aggretriever-base")
    queries = dev_queries(work)
    reference = dev_reference(work, base, queries, args.n)
    index = read_faiss_index(args.index)
    docids = (Path(args.index) / "docid").read_text().split()
    matrix = np.stack(list(queries.values()))
    codecs = {}
    for spec in args.refine_codecs:
        codecs[spec] = faiss.index_factory(matrix.shape[1], spec, faiss.METRIC_INNER_PRODUCT)
        pq = getattr(faiss.downcast_index(codecs[spec]), "pq", None)
        if pq is not None:  # 16,384 points, 10 rounds: Faiss's k-means in 2-4 dims still takes ~4 s a sub-quantizer
            pq.cp.max_points_per_centroid, pq.cp.niter = 64, 10
        codecs[spec].train(base.of(docids[:65536]))
    for nprobe in args.nprobe:
        faiss.extract_index_ivf(index.base_index).nprobe = nprobe
        for candidates in args.candidates:
            index.k_factor = candidates / 10
            started, runs = time.perf_counter(), {}
            for qid, q in queries.items():
                scores, found = type(index).search(index, q[None], 10)  # Faiss's own: k * k_factor candidates
                runs[qid] = [(docids[i], float(s)) for s, i in zip(scores[0], found[0]) if i >= 0]
            line = (f"nprobe {nprobe} candidates {candidates}: recall@10 {recall_at_10(runs, reference, queries):.3f}"
                    f" ({1000 * (time.perf_counter() - started) / len(queries):.1f} ms a query, caches as they are)")
            if codecs:
                _, rows = index.base_index.search(matrix, candidates)
                for spec, codec in codecs.items():
                    shares = []
                    for k, qid in enumerate(queries):
                        kept = [r for r in rows[k] if r >= 0]
                        vectors = base.of([docids[r] for r in kept])
                        decoded = codec.sa_decode(codec.sa_encode(vectors))
                        top = np.argsort(-(decoded @ matrix[k]))[:10]  # decoded in the input space
                        shares.append(len({docids[kept[t]] for t in top} & {d for d, _ in reference[qid]}) / 10)
                    line += f"; {spec} {np.mean(shares):.3f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
