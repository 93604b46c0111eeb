"""The shipped Aggretriever's own vocabulary weights (v: the max over positions of softmax(MLM logits) x term weight,
before agg+ pools it into 640 slice maxima) pooled by another rule without retraining: a count sketch of v's largest
entries against agg+'s slice maxima of the same entries. Development sets only (query_sets.py).

    python experiments/aggretriever-lexical/model_pooling.py resources/models/aggretriever-minilm-fullwidth \
        --sets cranfield-halves cranfield-ict

Printed per set: nDCG@10 of the lexical part alone, and of semantic + lexical with the lexical part rescaled to the
median norms agg+'s part has (each rule enters the concatenation at the shipped balance; the query-side gate
`query_lexical_tokens` applied as the model applies it). v's 256 largest entries per text are cached under --out.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from pyserini_ext.models.aggretriever import Aggretriever

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "aggretriever-full-width"))
from heldout_pseudo import ndcg, top  # noqa: E402
from parts import PASSAGE_LENGTH, QUERY_LENGTH, model_vectors  # noqa: E402
from pooling import hash_pooling, slice_pooling  # noqa: E402
from query_sets import long_sets, short_sets  # noqa: E402

KEEP = 256


def vocabulary_weights(model: Aggretriever, tokenizer, texts: list[str], max_length: int, desc: str
                       ) -> sp.csr_matrix:
    """v of each text, its KEEP largest entries kept."""
    order = np.argsort([len(t) for t in texts])
    rows: list = [None] * len(texts)
    for start in tqdm(range(0, len(texts), 32), desc=desc, mininterval=30):
        idx = order[start:start + 32]
        inputs = tokenizer([texts[i] for i in idx], max_length=max_length, truncation=True, padding="longest",
                           return_tensors="pt")
        with torch.inference_mode():
            hidden = model.mlm_head.hidden_states(inputs["input_ids"], inputs["attention_mask"])
            v = model.lexical(inputs["input_ids"], inputs["attention_mask"], hidden).float()
            values, columns = v.topk(KEEP, dim=1)
        for i, vals, cols in zip(idx, values.numpy(), columns.numpy()):
            rows[i] = sp.csr_matrix((vals, (np.zeros(KEEP, int), cols)), shape=(1, v.shape[1]))
    return sp.vstack(rows).tocsr()


def topk_rows(m: sp.csr_matrix, k: int) -> sp.csr_matrix:
    """Each row's k largest stored values (ties at the k-th kept)."""
    m = m.copy()
    for r in range(m.shape[0]):
        row = m.data[m.indptr[r]:m.indptr[r + 1]]
        if len(row) > k:
            row[row < np.partition(row, len(row) - k)[len(row) - k]] = 0
    m.eliminate_zeros()
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--sets", nargs="+", default=["cranfield-halves", "cranfield-ict"])
    parser.add_argument("--out", type=Path, default=Path("runs/exp-lex/vectors"))
    parser.add_argument("--topk", type=int, nargs="+", default=[32, 64, 128, 256])
    args = parser.parse_args()
    torch.set_num_threads(2)
    sets = {k: v for k, v in (long_sets() | short_sets()).items() if k in args.sets}
    model = Aggretriever.from_pretrained(args.model).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    shipped = model_vectors(args.model, sets, args.out)  # the agg+ vectors, cached by parts.py
    n0 = float(getattr(model.config, "query_lexical_tokens", 0) or 0)
    vocabulary = model.vocab_size
    rules = {}
    for k in args.topk:
        rules[f"top-{k}, 640 slices (agg+ rule)"] = (k, slice_pooling(np.arange(vocabulary), 640))
        rules[f"top-{k}, 640 count sketch"] = (k, hash_pooling(vocabulary, 640, signed=True))
    names = list(sets)
    results: dict[str, list[float]] = {}
    for name in names:
        texts, queries = sets[name]
        docids, qids = sorted(texts), list(queries)
        path = args.out / f"vocab-{args.model.name}-{name}.npz"
        if not path.is_file():
            p = vocabulary_weights(model, tokenizer, [texts[d] for d in docids], PASSAGE_LENGTH, f"{name} passages")
            q = vocabulary_weights(model, tokenizer, [t for t, _ in queries.values()], QUERY_LENGTH,
                                   f"{name} queries")
            np.savez(path, P=np.array(p, dtype=object), Q=np.array(q, dtype=object))
        stored = np.load(path, allow_pickle=True)
        pv, qv = stored["P"].item(), stored["Q"].item()
        P, Q, n, cls = shipped[name]
        gate = np.minimum(1.0, n0 / np.maximum(n, 1))[:, None] if n0 else np.ones((len(n), 1))
        sem = Q[:, :cls] @ P[:, :cls].T
        lexicals = {"agg+ as shipped": (Q[:, cls:], P[:, cls:])}
        for label, (keep, pool) in rules.items():
            lexicals[label] = (pool(topk_rows(qv, keep)), pool(topk_rows(pv, keep)))
        for label, (ql, pl) in lexicals.items():
            ql, pl = np.asarray(ql, np.float32), np.asarray(pl, np.float32)
            ql = ql * np.median(np.linalg.norm(Q[:, cls:], axis=1)) / max(np.median(np.linalg.norm(ql, axis=1)), 1e-9)
            pl = pl * np.median(np.linalg.norm(P[:, cls:], axis=1)) / max(np.median(np.linalg.norm(pl, axis=1)), 1e-9)
            lex = ql @ pl.T
            results.setdefault(f"{label}: alone", []).append(ndcg(top(lex, docids, qids), queries))
            results.setdefault(f"{label}: + semantic", []).append(ndcg(top(sem + gate * lex, docids, qids), queries))
    print(f"{'':<52}" + "  ".join(f"{n:>16}" for n in names) + "      mean", flush=True)
    for label, row in results.items():
        print(f"{label:<52}" + "  ".join(f"{v:>16.4f}" for v in row) + f"  {np.mean(row):.4f}", flush=True)


if __name__ == "__main__":
    main()
