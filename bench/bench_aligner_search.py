"""AligneR search: exact (float16 store, flat candidates) vs the default index, and a Faiss flat single-vector search.

Queries of `--dataset` (SciFact by default), split `--split` (test for the figures; train to choose settings), and
a corpus of every document judged for them plus the first others by docid up to `--docs` (a large number: the
whole corpus), encoded once with the AligneR model (`--encoded` keeps that encoding, e.g. the one `make report`
cached, so that a second run only builds and searches). Indexes: exact (float16 vectors, flat token candidates:
the option `--codec float16 --candidates flat`), the default (what `pyserini-ext aligner index` builds with no codec
options for this corpus size: residual-PQ codes + PLAID-style centroid candidates from 2,048 documents up), and one
compressed index per `--compressed` setting. The single-vector baseline is Faiss IndexFlatIP over AligneR's
pooled document vectors (what `--encoder-class aligner` gives Pyserini). Latency is per query from encoded query
vectors to the top 10 (query encoding excluded on both sides), with `--threads` torch/Faiss threads (default 1).

    .venv/bin/python -m bench.bench_aligner_search --docs 1000
    .venv/bin/python -m bench.bench_aligner_search --dataset vaswani --docs 1000000000 --beta-d 1 \
        --encoded runs/vaswani.encoded.npz            # exact vs default on a whole collection (docs/aligner.md)
    .venv/bin/python -m bench.bench_aligner_search --dataset msmarco-dl19-subset --split dl19 --docs 100000
    .venv/bin/python -m bench.bench_aligner_search --split train --queries 300 \
        --compressed pq16x8,nprobe4 pq32x4,nprobe4 pq32x8,nprobe8    # how the default was chosen
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import torch

from bench.common import model_folder as _model  # the shared helper (bench/common.py)
from bench.common import ndcg10, subset
from pyserini_ext.data import load_dataset
from pyserini_ext.encode.aligner import AlignerQueryEncoder
from pyserini_ext.index.aligner import AlignerIndex, EncodedCorpus, build_index, encode_corpus
from pyserini_ext.models.aligner import AlignerModel
from pyserini_ext.models.alignment import DEFAULT_BETA_Q, pool_vectors
from pyserini_ext.search.aligner import AlignerSearcher


def timed_search(search, items) -> tuple[dict, np.ndarray, np.ndarray]:
    """The run, and per query the wall and this thread's CPU milliseconds (with one thread, CPU time is what the
    query costs on an idle core: on a loaded machine the wall time also counts the waits for a core)."""
    run, latencies, cpu = {}, [], []
    for qid, item in items:
        start, start_cpu = time.perf_counter(), time.thread_time()
        run[qid] = search(item)
        latencies.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
    return run, np.array(latencies) * 1000, np.array(cpu) * 1000


DEFAULT_COMPRESSED = "pq32x6,nprobe4"


def compressed_setting(text: str) -> dict:
    """'pq32x4,nprobe8[,nlist1024]' -> build and open options of a residual-PQ + centroid index."""
    setting = {"name": text}
    try:
        for part in text.lower().split(","):
            if part.startswith("pq"):
                setting["pq_m"], setting["pq_bits"] = (int(v) for v in part[2:].split("x"))
            elif part.startswith("nprobe"):
                setting["nprobe"] = int(part[6:])
            elif part.startswith("nlist"):
                setting["nlist"] = int(part[5:])
            else:
                raise ValueError(part)
    except ValueError:
        raise argparse.ArgumentTypeError(f"cannot parse {text!r}; use e.g. pq16x8,nprobe4 or pq32x4,nprobe8,nlist512"
                                         ) from None
    if "pq_m" not in setting or "nprobe" not in setting:
        raise argparse.ArgumentTypeError(f"{text!r}: needs both pqMxBITS and nprobeN")
    return setting


def long_queries(corpus: dict, words: int, count: int) -> tuple[dict, dict]:
    """`count` queries of the first `words` words of documents at least that long (seed 57), each with its own
    document as the one relevant."""
    long = sorted(d for d, doc in corpus.items() if len(doc.get("text", "").split()) >= words)
    if not long:
        raise SystemExit(f"--query-words {words}: no document of the corpus has that many words")
    chosen = np.random.default_rng(57).choice(long, size=min(count, len(long)), replace=False)
    queries = {f"long-{d}": " ".join(corpus[d]["text"].split()[:words]) for d in chosen}
    return queries, {f"long-{d}": {d: 1} for d in chosen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--aligner", help="AligneR folder (default: the shipped one)")
    parser.add_argument("--beta-d", type=float, default=0.4, help="document tokens kept (the docs' default)")
    parser.add_argument("--dataset", default="scifact", help="a dataset name of the project's loader")
    parser.add_argument("--split", default="test", help="split of the queries (SciFact train: to choose settings)")
    parser.add_argument("--queries", type=int, help="the first N queries of the split by id (default: all)")
    parser.add_argument("--compressed", nargs="*", type=compressed_setting, default=[],
                        help="more residual-PQ + centroid rows, pqMxBITS,nprobeN[,nlistN] (nprobe: centroids probed "
                             f"per query token; nlist default: the index's), e.g. {DEFAULT_COMPRESSED}")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch and Faiss threads (default 1; the targets in docs/aligner.md are at 2)")
    parser.add_argument("--neighbours", type=int, help="documents kept by the centroid stage (default: the index's)")
    parser.add_argument("--exact-documents", type=int,
                        help="of those, the ones scored on decoded codes, the best by centroid interaction (default: "
                             "the index's; 0: all)")
    parser.add_argument("--encoded", help="cache of the corpus encoding (EncodedCorpus .npz), reused if present")
    parser.add_argument("--query-words", type=int,
                        help="long queries instead of the split's: the first N words of as many documents (at least "
                             "N words long, seeded), each relevant to its own query; for latency at that length")
    parser.add_argument("--json", help="also write the figures to this file (for `make bench`)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    model_dir = _model("aligner", args.aligner, "aligner_config.json")
    corpus, queries, qrels = subset(load_dataset(args.dataset), args.docs, args.split, args.queries)
    if args.query_words:
        queries, qrels = long_queries(corpus, args.query_words, len(queries))
    model = AlignerModel.from_pretrained(model_dir)
    if args.encoded and Path(args.encoded).is_file():
        encoded = EncodedCorpus.load(args.encoded)
        if set(encoded.docids) | set(encoded.skipped_empty) != set(corpus):
            raise SystemExit(f"{args.encoded} holds {len(encoded.docids)} documents, not the {len(corpus)} asked "
                             "for (--dataset/--docs); remove it or give another --encoded path")
    else:
        encoded = encode_corpus(model, corpus, model_path=model_dir, progress=False)
        if args.encoded:
            encoded.save(args.encoded)
    encoded_queries = AlignerQueryEncoder(model_dir).encode_tokens(list(queries.values()), beta=DEFAULT_BETA_Q)
    pooled_docs = np.stack([pool_vectors(torch.from_numpy(encoded.vectors[a:b].astype(np.float32))[None],
                                         torch.relu(torch.from_numpy(encoded.salience_scores[a:b]))[None],
                                         torch.ones(1, b - a, dtype=torch.bool))[0].numpy()
                            for a, b in zip(encoded.offsets[:-1], encoded.offsets[1:])])
    pooled_queries = AlignerQueryEncoder(model_dir).pooled(list(queries.values()), None, False)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        flat = faiss.IndexFlatIP(pooled_docs.shape[1])
        flat.add(pooled_docs.astype(np.float32))

        def single_vector(vector):
            scores, ids = flat.search(vector[None], 10)
            return {encoded.docids[i]: float(s) for i, s in zip(ids[0], scores[0])}

        run, ms, cpu = timed_search(single_vector, zip(queries, pooled_queries))
        rows["Faiss flat, pooled single vector"] = {"run": run, "ms": ms, "cpu": cpu, "bytes_per_token": None}
        indexes = [("AligneR exact (float16, flat)", {"codec": "float16", "candidates": "flat"}, {}),
                   ("AligneR default", {}, {})]
        for setting in args.compressed:
            build = {"codec": "residual-pq", "candidates": "centroid", "pq_m": setting["pq_m"],
                     "pq_bits": setting["pq_bits"], "nlist": setting.get("nlist")}
            indexes.append((f"AligneR {setting['name']} + centroid", build, {"nprobe": setting["nprobe"]}))
        for number, (name, options, open_options) in enumerate(indexes):
            folder = build_index(encoded, Path(tmp) / str(number), beta_d=args.beta_d, progress=False, **options)
            index = AlignerIndex.open(folder, **open_options)
            compressed = "codec" not in options or options["codec"] == "residual-pq"
            searcher = AlignerSearcher(index, model, neighbours=args.neighbours if compressed else None,
                                       exact_documents=args.exact_documents if compressed else None)
            if name == "AligneR default":  # name the path the size rule chose
                name = (f"AligneR default ({index.metadata['codec']}, {index.metadata['candidates']}"
                        + (f", nlist {index.metadata['nlist']})" if index.metadata["nlist"] else ")"))

            def multi_vector(query, searcher=searcher):
                return {h.docid: h.score for h in searcher.rank(query[0], query[1], 10)}

            run, ms, cpu = timed_search(multi_vector, zip(queries, encoded_queries))
            rows[name] = {"run": run, "ms": ms, "cpu": cpu, "bytes_per_token": index.bytes_per_token()}
    base = np.percentile(rows["Faiss flat, pooled single vector"]["ms"], 50)
    exact = ndcg10(qrels, rows["AligneR exact (float16, flat)"]["run"])
    print(f"AligneR {Path(model_dir).name}, {args.dataset} {args.split}: {len(queries)} queries, {len(corpus)} "
          f"documents "
          f"({encoded.offsets[-1]} tokens, beta_d {args.beta_d}), {args.threads} threads; centroid stage: "
          f"{args.neighbours or 'default'} documents, "
          f"{'default' if args.exact_documents is None else args.exact_documents} of them scored on decoded codes")
    print(f"{'':46} {'nDCG@10':>8} {'vs exact':>9} {'bytes/token':>12} {'p50 ms':>7} {'p99 ms':>7} {'p50 ratio':>10} "
          f"{'CPU p50 ms':>11}")
    report = {}
    for name, r in rows.items():
        score = ndcg10(qrels, r["run"])
        report[name] = {"ndcg10": score, "delta_points": 100 * (score - exact), "bytes_per_token": r["bytes_per_token"],
                        "p50_ms": float(np.percentile(r["ms"], 50)), "p99_ms": float(np.percentile(r["ms"], 99)),
                        "cpu_p50_ms": float(np.percentile(r["cpu"], 50))}
        report[name]["p50_ratio"] = report[name]["p50_ms"] / base
        bpt = f"{r['bytes_per_token']:.1f}" if r["bytes_per_token"] else "-"
        print(f"{name:46} {score:8.4f} {100 * (score - exact):+9.2f} {bpt:>12} {report[name]['p50_ms']:7.2f} "
              f"{report[name]['p99_ms']:7.2f} {report[name]['p50_ratio']:9.1f}x {report[name]['cpu_p50_ms']:11.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"dataset": args.dataset, "split": args.split, "docs": len(corpus),
                                               "queries": len(queries), "rows": report},
                                              indent=1))


if __name__ == "__main__":
    main()
