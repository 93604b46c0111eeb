"""What the reduced precisions cost: max abs diff of the document vectors / weights from torch float32 and
nDCG@10 on a SciFact subset, for the three encoders on every backend and precision, in one run.

Subset: the SciFact test queries, and a corpus of every document judged for them plus the first other
documents by docid up to `--docs`. Aggretriever: Faiss flat inner product; DeepCT: DeepCT index + BM25
(k1=15, b=0.6, docs/deepct.md); AligneR: float16 flat index, exact alignment over the candidates.

    python -m bench.bench_precision_quality --docs 800
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import torch

from bench.common import model_folder, ndcg10, runnable, subset, write_json
from pyserini_ext.data import load_dataset

MODELS = ("Aggretriever", "DeepCT", "AligneR")
SETTINGS = {
    "torch fp32": {"backend": "torch"},
    "onnx fp32": {"backend": "onnx"},
    "torch bf16": {"backend": "torch", "precision": "bfloat16"},
    "onnx int8": {"backend": "onnx", "precision": "int8"},
}


def aggretriever(model_dir, corpus, queries, settings, onnx_dir):
    from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder, AggretrieverQueryEncoder

    docids = list(corpus)
    out = {}
    for name, options in settings.items():
        started = time.perf_counter()
        encoder = AggretrieverDocumentEncoder(model_dir, onnx_dir=onnx_dir, **options)
        vectors = np.concatenate([encoder.encode([corpus[d]["text"] for d in docids[i:i + 32]],
                                                 titles=[corpus[d]["title"] for d in docids[i:i + 32]],
                                                 max_length=256) for i in range(0, len(docids), 32)])
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        query_encoder = AggretrieverQueryEncoder(model_dir, onnx_dir=onnx_dir, **options)
        qids = list(queries)
        scores, rows = index.search(np.stack([query_encoder.encode(queries[q]) for q in qids]), 10)
        run = {q: {docids[r]: float(s) for r, s in zip(rows[i], scores[i])} for i, q in enumerate(qids)}
        out[name] = {"vectors": vectors, "run": run, "seconds": time.perf_counter() - started}
    return out


def deepct(model_dir, corpus, queries, settings, onnx_dir, tmp):
    from pyserini.search.lucene import LuceneSearcher

    from pyserini_ext.data import document_text
    from pyserini_ext.encode.deepct import RuntimeDeepCTModel
    from pyserini_ext.encode.runtime import EncoderRuntime
    from pyserini_ext.index.deepct import build_deepct_index

    docids = list(corpus)
    out = {}
    for name, options in settings.items():
        started = time.perf_counter()
        model = RuntimeDeepCTModel(model_dir, EncoderRuntime(onnx_dir=onnx_dir, **options))
        weights = model.word_weights([document_text(corpus[d]) for d in docids])
        index = Path(tmp) / f"deepct-{name.replace(' ', '-')}"
        build_deepct_index(model, corpus, index)
        searcher = LuceneSearcher(str(index))
        searcher.set_bm25(15.0, 0.6)
        run = {q: {h.docid: h.score for h in searcher.search(text, 10)} for q, text in queries.items()}
        out[name] = {"vectors": np.array([w for doc in weights for _, w in doc]), "run": run,
                     "seconds": time.perf_counter() - started}
    return out


def aligner(model_dir, corpus, queries, settings, onnx_dir, tmp):
    from pyserini_ext.encode.aligner import AlignerDocumentEncoder, AlignerQueryEncoder
    from pyserini_ext.index.aligner import build_index, encode_corpus
    from pyserini_ext.search.aligner import AlignerSearcher

    out = {}
    for name, options in settings.items():
        started = time.perf_counter()
        encoder = AlignerDocumentEncoder(model_dir, onnx_dir=onnx_dir, **options)
        encoded = encode_corpus(encoder, corpus, model_path=model_dir, progress=False)
        index = build_index(encoded, Path(tmp) / f"aligner-{name.replace(' ', '-')}", progress=False)
        searcher = AlignerSearcher(index, encoder.model, query_encoder=AlignerQueryEncoder(
            model_dir, onnx_dir=onnx_dir, **options))
        hits = searcher.batch_search(list(queries.values()), list(queries), k=10)
        run = {q: {h.docid: h.score for h in results} for q, results in hits.items()}
        out[name] = {"vectors": encoded.vectors.astype(np.float32), "run": run,
                     "seconds": time.perf_counter() - started}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=800)
    parser.add_argument("--queries", type=int, help="the first N test queries by id (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--aggretriever", help="Aggretriever folder (default: the shipped one)")
    parser.add_argument("--deepct", help="DeepCT folder (default: the shipped one)")
    parser.add_argument("--aligner", help="AligneR folder (default: the shipped one)")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="default: all three")
    parser.add_argument("--settings", nargs="+", choices=[s for s in SETTINGS if s != "torch fp32"],
                        help="only these besides torch fp32, the reference (default: all)")
    parser.add_argument("--json", help="also write the figures to this file (for `make bench`)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    corpus, queries, qrels = subset(load_dataset("scifact"), args.docs, first_queries=args.queries)
    settings = {name: {**options, "threads": args.threads} if options["backend"] == "onnx" else options
                for name, options in runnable(SETTINGS).items()
                if name == "torch fp32" or not args.settings or name in args.settings}
    folders = {"Aggretriever": model_folder("aggretriever", args.aggretriever, "aggretriever_config.json"),
               "DeepCT": model_folder("deepct", args.deepct, "deepct_config.json"),
               "AligneR": model_folder("aligner", args.aligner, "aligner_config.json")}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        onnx_dir = str(Path(tmp) / "onnx")
        if "Aggretriever" in args.models:
            results["Aggretriever"] = aggretriever(folders["Aggretriever"], corpus, queries, settings,
                                                   onnx_dir + "-agg")
        if "DeepCT" in args.models:
            results["DeepCT"] = deepct(folders["DeepCT"], corpus, queries, settings, onnx_dir + "-deepct", tmp)
        if "AligneR" in args.models:
            results["AligneR"] = aligner(folders["AligneR"], corpus, queries, settings, onnx_dir + "-aligner", tmp)
    print(f"SciFact test: {len(queries)} queries, {len(corpus)} documents (all judged ones + first others by "
          f"docid), {args.threads} threads; models: "
          + ", ".join(f"{model} {Path(folders[model]).name}" for model in results))
    print(f"{'model':13} {'setting':11} {'max abs diff':>13} {'nDCG@10':>8} {'delta (points)':>15} {'seconds':>8}")
    rows = {}
    for model, by_setting in results.items():
        reference = by_setting["torch fp32"]
        base = ndcg10(qrels, reference["run"])
        for name, r in by_setting.items():
            diff = float(np.abs(r["vectors"] - reference["vectors"]).max()) if r["vectors"].shape == \
                reference["vectors"].shape else float("nan")
            score = ndcg10(qrels, r["run"])
            rows.setdefault(model, {})[name] = {"max_abs_diff": diff, "ndcg10": score,
                                                "delta_points": 100 * (score - base), "seconds": r["seconds"]}
            print(f"{model:13} {name:11} {diff:13.2e} {score:8.4f} {100 * (score - base):+15.2f} "
                  f"{r['seconds']:8.1f}")
    write_json(args.json, {"docs": len(corpus), "queries": len(queries), "rows": rows})


if __name__ == "__main__":
    main()
