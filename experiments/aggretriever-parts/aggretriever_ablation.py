"""Aggretriever ablation on one trained model: concat vs its semantic part ([CLS] projection, or the full-width
mean vector) vs its lexical part (agg* / agg+), scored on the same passages.

    python experiments/aggretriever-parts/aggretriever_ablation.py \
        --model resources/models/aggretriever-minilm-fullwidth \
        --index runs/report/full/scifact/<aggretriever faiss index> --dataset scifact --split test

The passages' vectors are read back from the Pyserini Faiss index that `make report` built with the unchanged
`python -m pyserini.encode` (no re-encoding); queries are encoded with our query encoder. The parts are the
first `cls_dim` dimensions (the semantic part) and the rest (the lexical part): the model was trained with a loss
on each part, so each is a retriever on its own. nDCG@10 / R@100 with `pyserini_ext.evaluation.evaluate`
(trec_eval -c values).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import faiss
import numpy as np

from pyserini_ext.data import load_dataset
from pyserini_ext.encode.aggretriever import AggretrieverQueryEncoder
from pyserini_ext.evaluation import evaluate
from pyserini_ext.models.aggretriever import Aggretriever


def search(queries: np.ndarray, passages: np.ndarray, qids: list[str], docids: list[str], k: int = 100) -> dict:
    index = faiss.IndexFlatIP(passages.shape[1])
    index.add(np.ascontiguousarray(passages))
    scores, rows = index.search(np.ascontiguousarray(queries), k)
    return {q: [(docids[j], float(s)) for j, s in zip(rows[i], scores[i]) if j >= 0] for i, q in enumerate(qids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--index", required=True, help="Pyserini Faiss index folder (index + docid)")
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--recall-level", type=int)
    parser.add_argument("--query-length", type=int, help="query tokens (default: the model's query_max_length)")
    parser.add_argument("--semantic-weight", type=float, default=1.0,
                        help="the semantic part's inner products x this in the concatenation: the model saved at "
                             "sqrt(this) x its semantic scale, without re-encoding the passages")
    args = parser.parse_args()
    dataset = load_dataset(args.dataset)
    topics = dataset.split_queries(args.split)
    qids = list(topics)
    index = faiss.read_index(str(Path(args.index) / "index"))
    passages = index.reconstruct_n(0, index.ntotal)
    docids = (Path(args.index) / "docid").read_text().split("\n")[:index.ntotal]
    config = Aggretriever.from_pretrained(args.model).config
    cls_dim = config.cls_dim
    encoder = AggretrieverQueryEncoder(args.model, max_length=args.query_length)
    queries = np.stack([encoder.encode(topics[q]) for q in qids]).astype(np.float32)
    queries[:, :cls_dim] *= args.semantic_weight  # the passages' side unchanged: their inner products x the weight
    semantic = "semantic part" if config.dense_pooling == "mean" else "[CLS] part"
    parts = {"concat": slice(None), semantic: slice(0, cls_dim), f"{config.pooling} part": slice(cls_dim, None)}
    qrels = dataset.qrels(args.split)
    print(f"{'vectors':<14} nDCG@10   R@100")
    for name, part in parts.items():
        run = search(queries[:, part], passages[:, part], qids, docids)
        scores = evaluate(qrels, run, metrics=("ndcg_cut_10", "recall_100"), recall_level=args.recall_level)
        print(f"{name:<14} {scores['ndcg_cut_10']:.4f}   {scores['recall_100']:.4f}", flush=True)


if __name__ == "__main__":
    main()
