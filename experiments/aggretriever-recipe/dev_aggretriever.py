"""Compare Aggretriever folders on development queries by exact search over a whole corpus: nDCG@10 of the
concatenated vector and of each part ([CLS] projection, agg*), which the model was trained to rank with alone.

    python experiments/aggretriever-recipe/dev_aggretriever.py MODEL_DIR [MODEL_DIR ...] [--dataset scifact \
        --split train --queries 400]
    python experiments/aggretriever-recipe/dev_aggretriever.py MODEL_DIR --split train test  # one corpus encoding

Default: SciFact train, the first 400 queries by id, over the whole corpus (SciFact train is in the distillation
set, so it flatters every model alike; the MS MARCO triples development set that `make report` builds is
`--dataset runs/report/full/msmarco-dev/source --split dev`; `--reuse-index` with the model's DL19 Faiss index
from `make report` or `make prebuilt` reads its 30k passages back instead of encoding them again). Passages at
`--max-length` tokens (256, as the report indexes them), queries at 32, inner product, nDCG@10 with
pyserini_ext.evaluation.
`--cls-only` runs the body alone (no vocabulary head): only the [CLS] part, much faster. Several `--split`s share
one encoding of the corpus; a test split's figures are for reporting a choice already made, never for making it.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import faiss
import numpy as np
import torch
from transformers import AutoTokenizer

from pyserini_ext.data import document_text, load_dataset
from pyserini_ext.evaluation import evaluate
from pyserini_ext.models.aggretriever import Aggretriever


def encode(model: Aggretriever, tokenizer, texts: list[str], max_length: int, cls_only: bool) -> np.ndarray:
    order = np.argsort([len(t) for t in texts])  # similar lengths together: less padding
    parts = []
    for start in range(0, len(texts), 32):
        inputs = tokenizer([texts[i] for i in order[start:start + 32]], max_length=max_length, truncation=True,
                           padding="longest", return_tensors="pt")
        with torch.inference_mode():
            if cls_only:
                hidden = model.mlm_head.hidden_states(inputs["input_ids"], inputs["attention_mask"])
                parts.append(model.dense(inputs["attention_mask"], hidden).numpy())
            else:
                parts.append(model(inputs["input_ids"], inputs["attention_mask"]).numpy())
    vectors = np.zeros((len(texts), parts[0].shape[1]), np.float32)
    vectors[order] = np.concatenate(parts)
    return vectors


def stored_vectors(index_dir: str) -> dict[str, np.ndarray]:
    """docid -> vector of a Pyserini Faiss index folder (`index` + `docid`)."""
    index = faiss.read_index(str(Path(index_dir) / "index"))
    docids = (Path(index_dir) / "docid").read_text(encoding="utf-8").splitlines()
    if len(docids) != index.ntotal:
        raise SystemExit(f"{index_dir}: {len(docids)} docids for {index.ntotal} vectors")
    return dict(zip(docids, index.reconstruct_n(0, index.ntotal)))


def ndcg10(scores: np.ndarray, qids: list[str], docids: list[str], qrels: dict[str, dict[str, int]]) -> float:
    """nDCG@10 of each query's top 100 passages by `scores` (queries x passages)."""
    run = {}
    for row, qid in enumerate(qids):
        top = np.argpartition(-scores[row], 100)[:100]
        run[qid] = [(docids[j], float(scores[row, j])) for j in top]
    return evaluate(qrels, run, metrics=("ndcg_cut_10",))["ndcg_cut_10"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--dataset", default="scifact", help="dataset name or BEIR folder")
    parser.add_argument("--split", nargs="+", default=["train"])
    parser.add_argument("--queries", type=int, default=400, help="the first N judged queries by id (per split)")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--cls-only", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--semantic-weights", type=float, nargs="+", default=[],
                        help="also the concat with the [CLS] part's scores times each weight (w x [CLS] + agg): "
                             "how the parts' scales balance")
    parser.add_argument("--reuse-index", help="a Pyserini Faiss index built with this model (one model only): the "
                                              "passages it holds are read back, the others encoded")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dataset = load_dataset(args.dataset)
    splits = {}
    for split in args.split:
        judged, queries = dataset.qrels(split), dataset.split_queries(split)
        qids = sorted(q for q in queries if q in judged)[:args.queries]
        splits[split] = (qids, [queries[qid] for qid in qids], {q: dict(judged[q]) for q in qids})
    docids = sorted(dataset.corpus)
    passages = [document_text(dataset.corpus[d]) for d in docids]
    for folder in args.models:
        start = time.perf_counter()
        model, tokenizer = Aggretriever.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
        if args.reuse_index:
            if len(args.models) > 1 or args.cls_only:
                raise SystemExit("--reuse-index: one model, full vectors")
            stored = stored_vectors(args.reuse_index)
            missing = [i for i, d in enumerate(docids) if d not in stored]
            blank = np.zeros_like(next(iter(stored.values())))
            p = np.stack([stored.get(d, blank) for d in docids])
            if missing:
                p[missing] = encode(model, tokenizer, [passages[i] for i in missing], args.max_length, False)
            print(f"{len(docids) - len(missing)} passages read from {args.reuse_index}, {len(missing)} encoded")
        else:
            p = encode(model, tokenizer, passages, args.max_length, args.cls_only)
        for split, (qids, texts, qrels) in splits.items():
            q = encode(model, tokenizer, texts, 32, args.cls_only)
            cls_dim = q.shape[1] if args.cls_only else model.config.cls_dim
            figures = {"[CLS] part": ndcg10(q[:, :cls_dim] @ p[:, :cls_dim].T, qids, docids, qrels)}
            if not args.cls_only:
                semantic, lexical = q[:, :cls_dim] @ p[:, :cls_dim].T, q[:, cls_dim:] @ p[:, cls_dim:].T
                figures = {"concat": ndcg10(q @ p.T, qids, docids, qrels), **figures,
                           f"{model.config.pooling} part": ndcg10(lexical, qids, docids, qrels),
                           **{f"{w:g} x [CLS] + agg": ndcg10(w * semantic + lexical, qids, docids, qrels)
                              for w in args.semantic_weights}}
            print(f"{folder} [{split}]: " + ", ".join(f"{k} {v:.4f}" for k, v in figures.items())
                  + f" ({len(qids)} queries, {len(docids)} passages, {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
