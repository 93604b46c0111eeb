"""Each part of an Aggretriever, and ways to balance them, on the whole-corpus development sets of query_sets.py
(long halves; short inverse-cloze), beside BM25 and a splade-tiny lexical part (SPLADE's max-pooled log-saturated
MLM logits, full vocabulary or slice-max-pooled to 640 like agg+).

    python experiments/aggretriever-lexical/parts.py MODEL [--sets long short] [--splade] [--threads 2]

Printed per set: nDCG@10 (one relevant passage per query, top 100 by exact inner product). Query-side gates scale
the query's lexical part by g(n) = min(1, (n0 / n) ** p), n = the query's tokens (the encoder's tokenizer, no
special tokens): a property of the query vector alone, so one Faiss index still serves every query length.
Vectors are cached under --out.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from pyserini_ext.models.aggretriever import Aggretriever, slice_max
from pyserini_ext.train.distill import bm25_rankings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "aggretriever-full-width"))
from dev_parts import encode  # noqa: E402
from heldout_pseudo import ndcg, top  # noqa: E402
from query_sets import long_sets, short_sets  # noqa: E402

PASSAGE_LENGTH, QUERY_LENGTH = 256, 512


def gate_factors(gate: str, n: np.ndarray) -> tuple[str, np.ndarray]:
    """"n0:p" -> (label, [queries, 1] factors min(1, (n0 / n) ** p))."""
    n0, power = map(float, gate.split(":"))
    return f"gate n0={n0:g} p={power:g}", np.minimum(1.0, (n0 / np.maximum(n, 1)) ** power)[:, None]


def top_values(m: np.ndarray, k: int) -> np.ndarray:
    """A copy of `m` with all but each row's k largest values set to 0."""
    cut = m.copy()
    cut[cut < -np.partition(-cut, k - 1, axis=1)[:, k - 1:k]] = 0
    return cut


def token_counts(tokenizer, texts: list[str]) -> np.ndarray:
    return np.array([len(tokenizer(t, add_special_tokens=False, truncation=True, max_length=QUERY_LENGTH - 2)
                          ["input_ids"]) for t in texts])


def model_vectors(folder: Path, sets: dict, out: Path) -> dict[str, np.ndarray]:
    model = Aggretriever.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    key = f"{folder.resolve().parent.name}-{folder.name}"
    vectors = {}
    for name, (texts, queries) in sets.items():
        def make(name=name, texts=texts, queries=queries) -> dict[str, np.ndarray]:
            docids = sorted(texts)
            return {"P": encode(model, tokenizer, [texts[d] for d in docids], PASSAGE_LENGTH, f"{name} passages"),
                    "Q": encode(model, tokenizer, [t for t, _ in queries.values()], QUERY_LENGTH, f"{name} queries"),
                    "n": token_counts(tokenizer, [t for t, _ in queries.values()]).astype(np.float32)[:, None]}
        path = out / f"{key}-{name}.npz"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(path, **make())
        got = np.load(path)
        vectors[name] = (got["P"], got["Q"], got["n"][:, 0], model.config.cls_dim)
    return vectors


def splade_encode(model, tokenizer, texts: list[str], max_length: int) -> sp.csr_matrix:
    order = np.argsort([len(t) for t in texts])
    rows = [None] * len(texts)
    for start in range(0, len(texts), 32):
        idx = order[start:start + 32]
        inputs = tokenizer([texts[i] for i in idx], max_length=max_length, truncation=True, padding="longest",
                           return_tensors="pt")
        with torch.inference_mode():
            logits = model(**inputs).logits.masked_fill(~inputs["attention_mask"].bool()[..., None], float("-inf"))
            # log(1 + relu(.)) is monotone: the max over positions first, on [batch, vocab] instead of every position
            rep = torch.log1p(torch.relu(logits.amax(1)))
        for i, r in zip(idx, rep.numpy()):
            rows[i] = sp.csr_matrix(r)
    return sp.vstack(rows).tocsr()


def splade_vectors(folder: Path, sets: dict, out: Path) -> dict[str, tuple[sp.csr_matrix, sp.csr_matrix]]:
    model = AutoModelForMaskedLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    result = {}
    for name, (texts, queries) in sets.items():
        path = out / f"splade-{name}.npz"
        if path.is_file():
            stored = np.load(path, allow_pickle=True)
            result[name] = (stored["P"].item(), stored["Q"].item())
            continue
        docids = sorted(texts)
        p = splade_encode(model, tokenizer, [texts[d] for d in docids], PASSAGE_LENGTH)
        q = splade_encode(model, tokenizer, [t for t, _ in queries.values()], QUERY_LENGTH)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, P=np.array(p, dtype=object), Q=np.array(q, dtype=object))
        result[name] = (p, q)
    return result


def sliced(m: sp.csr_matrix, width: int = 640) -> np.ndarray:
    return slice_max(torch.from_numpy(m.toarray()), width).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--sets", nargs="+", default=["long", "short"], choices=["long", "short"])
    parser.add_argument("--out", type=Path, default=Path("runs/exp-lex/vectors"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--splade", type=Path, help="a splade model folder: its lexical part alone and with ours")
    parser.add_argument("--gates", nargs="*", default=["32:0.5", "32:1", "16:1", "32:2", "64:1"],
                        help="n0:p query-side gates of the lexical part")
    parser.add_argument("--weights", type=float, nargs="*", default=[], help="w x semantic + lexical")
    parser.add_argument("--query-topk", type=int, nargs="*", default=[16, 32, 64],
                        help="keep the query lexical part's k largest values")
    parser.add_argument("--doc-topk", type=int, nargs="*", default=[64, 128, 256])
    parser.add_argument("--no-bm25", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sets = {}
    if "long" in args.sets:
        sets |= long_sets()
    if "short" in args.sets:
        sets |= short_sets()
    names = list(sets)
    print(f"{'':<44}" + "  ".join(f"{n:>16}" for n in names) + "      mean", flush=True)

    def show(label: str, row: list[float]) -> None:
        print(f"{label:<44}" + "  ".join(f"{v:>16.4f}" for v in row) + f"  {np.mean(row):.4f}", flush=True)

    if not args.no_bm25:
        show("BM25", [ndcg(bm25_rankings({d: {"title": "", "text": t} for d, t in texts.items()},
                                         {q: t for q, (t, _) in queries.items()}, 100, threads=args.threads),
                           queries) for texts, queries in sets.values()])
    spl = splade_vectors(args.splade, sets, args.out) if args.splade else None
    if spl:
        for label, fn in [("splade-tiny full vocabulary", lambda m: m), ("splade-tiny sliced 640", sliced)]:
            row = []
            for name in names:
                texts, queries = sets[name]
                p, q = fn(spl[name][0]), fn(spl[name][1])
                scores = q @ p.T
                scores = scores.toarray() if sp.issparse(scores) else scores
                row.append(ndcg(top(scores, sorted(texts), list(queries)), queries))
            show(label, row)
    for folder in args.models:
        vectors = model_vectors(folder, sets, args.out)
        rows: dict[str, list[float]] = {}
        for name in names:
            texts, queries = sets[name]
            docids, qids = sorted(texts), list(queries)
            p, q, n, cls = vectors[name]
            sem, lex = q[:, :cls] @ p[:, :cls].T, q[:, cls:] @ p[:, cls:].T
            cand = {"concat": sem + lex, "semantic": sem, "lexical": lex}
            for w in args.weights:
                cand[f"{w:g} x semantic + lexical"] = w * sem + lex
            for gate in args.gates:
                label, g = gate_factors(gate, n)
                cand[label] = sem + g * lex
            for k in args.query_topk:
                ql = top_values(q[:, cls:], k)
                cand[f"query lexical top-{k}"] = ql @ p[:, cls:].T
                cand[f"semantic + query lexical top-{k}"] = sem + ql @ p[:, cls:].T
            for k in args.doc_topk:
                pl = top_values(p[:, cls:], k)
                cand[f"doc lexical top-{k}"] = q[:, cls:] @ pl.T
                cand[f"semantic + doc lexical top-{k}"] = sem + q[:, cls:] @ pl.T
                for gate in args.gates:
                    label, g = gate_factors(gate, n)
                    cand[f"{label} + doc top-{k}"] = sem + g * (q[:, cls:] @ pl.T)
            if spl:
                slex = sliced(spl[name][1]) @ sliced(spl[name][0]).T
                for w in (0.25, 0.5, 1.0):
                    cand[f"semantic + {w:g} x splade sliced"] = sem + w * slex
            for label, scores in cand.items():
                rows.setdefault(label, []).append(ndcg(top(scores, docids, qids), queries))
        for label, row in rows.items():
            show(f"{folder.name[:16]} {label}", row)


if __name__ == "__main__":
    main()
