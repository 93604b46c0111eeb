"""SciFact's train queries (809, a train split: allowed for choices) over the whole SciFact corpus, exact inner
product, nDCG@10 on the train qrels; the same variants as parts.py. The corpus vectors reuse parts.py's SciFact
halves cache: only the 400 passages cut in half there are encoded again whole.

    python experiments/aggretriever-lexical/scifact_train.py MODEL [--gates 16:1 32:1] [--doc-topk 64 128]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from pyserini_ext.data import document_text, load_dataset
from pyserini_ext.evaluation import evaluate
from pyserini_ext.models.aggretriever import Aggretriever
from pyserini_ext.train.distill import bm25_rankings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "aggretriever-full-width"))
from dev_parts import encode  # noqa: E402
from heldout_pseudo import top  # noqa: E402
from parts import PASSAGE_LENGTH, QUERY_LENGTH, gate_factors, token_counts, top_values  # noqa: E402
from query_sets import long_sets  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--out", type=Path, default=Path("runs/exp-lex/vectors"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gates", nargs="*", default=["8:1", "16:1", "24:1", "32:1"])
    parser.add_argument("--doc-topk", type=int, nargs="*", default=[64, 128])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = load_dataset("scifact")
    qrels = data.qrels("train") if callable(getattr(data, "qrels", None)) else data.qrels["train"]
    queries = {q: data.queries[q] for q in qrels}
    queries = {q: (t if isinstance(t, str) else t["text"]) for q, t in queries.items()}
    key = f"{args.model.resolve().parent.name}-{args.model.name}"
    path = args.out / f"{key}-scifact-train.npz"
    docids = sorted(data.corpus)
    qids = sorted(queries)
    if not path.is_file():
        halves = np.load(args.out / f"{key}-scifact-halves.npz")
        texts, cut = long_sets()["scifact-halves"]
        p = halves["P"].copy()
        model = Aggretriever.from_pretrained(args.model).eval()
        tokenizer = AutoTokenizer.from_pretrained(args.model)
        redo = [docids.index(d) for _, d in cut.values()]
        p[redo] = encode(model, tokenizer, [document_text(data.corpus[docids[i]]) for i in redo], PASSAGE_LENGTH,
                         "whole passages")
        q = encode(model, tokenizer, [queries[x] for x in qids], QUERY_LENGTH, "train queries")
        np.savez(path, P=p, Q=q, n=token_counts(tokenizer, [queries[x] for x in qids]).astype(np.float32))
    got = np.load(path)
    p, q, n = got["P"], got["Q"], got["n"]
    cls = Aggretriever.from_pretrained(args.model).config.cls_dim

    def score(scores: np.ndarray) -> float:
        return evaluate(qrels, top(scores, docids, qids), metrics=("ndcg_cut_10",))["ndcg_cut_10"]

    bm25 = bm25_rankings({d: {"title": "", "text": document_text(data.corpus[d])} for d in docids}, queries, 100,
                         threads=args.threads)
    print(f"{'BM25':<40}{evaluate(qrels, bm25, metrics=('ndcg_cut_10',))['ndcg_cut_10']:.4f}")
    sem, lex = q[:, :cls] @ p[:, :cls].T, q[:, cls:] @ p[:, cls:].T
    rows = {"concat": sem + lex, "semantic": sem, "lexical": lex}
    for gate in args.gates:
        label, g = gate_factors(gate, n)
        rows[label] = sem + g * lex
    for k in args.doc_topk:
        pl = top_values(p[:, cls:], k)
        rows[f"doc lexical top-{k}"] = q[:, cls:] @ pl.T
        rows[f"semantic + doc lexical top-{k}"] = sem + q[:, cls:] @ pl.T
    print(f"query tokens: median {np.median(n):.0f}, 90th percentile {np.percentile(n, 90):.0f}")
    for label, scores in rows.items():
        print(f"{label:<40}{score(scores):.4f}", flush=True)


if __name__ == "__main__":
    main()
