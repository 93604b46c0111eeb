"""Aggretriever folders on the two reranking development sets (experiments/devsets.py; no test query is read), with
each part's figures and the balance of the two parts.

    python experiments/aggretriever-full-width/dev_parts.py MODEL [MODEL ...] [--weights 0.5 1 2 4 ...]

Every query (32 tokens, or --query-length) and candidate passage (256 tokens, as scripts/dev_rerank.py) is encoded
once per model by the torch model in float32; the vectors are kept under --out/<parent>-<model folder name>.npz, so
a second call (another grid of weights) encodes nothing. Printed per model and set: nDCG@10 of the concatenated
vector, of the semantic part alone, of the lexical part alone, and of `w x semantic + lexical` for each --weights w
(the semantic part's inner products relative to the saved folder's; w = 1 is the concatenation). --lexical-from
takes the lexical part from another folder (a second body beside the first one's semantic part).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from pyserini_ext.data import document_text
from pyserini_ext.models.aggretriever import Aggretriever
from pyserini_ext.train.distill import DistillationSet, DistillDataConfig, build_distillation_set

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from devsets import labelled_indices, rerank_ndcg, triples_development_set  # noqa: E402

QUERY_LENGTH = 32  # as the models train (the cached vectors' query length)


def encode(model: Aggretriever, tokenizer, texts: list[str], max_length: int, desc: str) -> np.ndarray:
    from tqdm.auto import tqdm
    order = np.argsort([len(t) for t in texts])  # similar lengths together: less padding
    parts = []
    for start in tqdm(range(0, len(texts), 32), desc=desc, mininterval=30):
        inputs = tokenizer([texts[i] for i in order[start:start + 32]], max_length=max_length, truncation=True,
                           padding="longest", return_tensors="pt")
        with torch.inference_mode():
            parts.append(model(inputs["input_ids"], inputs["attention_mask"]).float().numpy())
    vectors = np.zeros((len(texts), parts[0].shape[1]), np.float32)
    vectors[order] = np.concatenate(parts)
    return vectors


def dev_sets(cache: Path) -> dict[str, tuple[DistillationSet, list[int]]]:
    training = build_distillation_set(DistillDataConfig(), cache)
    triples = triples_development_set(cache / "triples-dev")
    return {"MS MARCO triples": (triples, list(range(len(triples.queries)))),
            "SciFact train": (training, labelled_indices(training))}


def vectors_of(folder: Path, sets: dict, out: Path, query_length: int = QUERY_LENGTH
               ) -> tuple[dict[str, np.ndarray], int]:
    """{"q:<text>" / "p:<docid>": vector} of every dev query and candidate, and the semantic part's width."""
    model = Aggretriever.from_pretrained(folder).eval()
    # keyed by the folder and its parent: candidates are all saved as <name>/model
    key = f"{folder.resolve().parent.name}-{folder.name}"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    queries = sorted({data.queries[i].text for data, indices in sets.values() for i in indices})
    vectors = cached(out / f"{key}.npz", lambda: encoded(model, tokenizer, queries, sets, folder))
    if query_length != QUERY_LENGTH:  # queries at another length beside the passages already encoded
        vectors |= cached(out / f"{key}-q{query_length}.npz", lambda: {
            f"q:{t}": v for t, v in zip(queries, encode(model, tokenizer, queries, query_length, "queries"))})
    return vectors, model.config.cls_dim


def cached(path: Path, make) -> dict[str, np.ndarray]:
    if path.is_file():
        stored = np.load(path, allow_pickle=False)
        return dict(zip(stored["keys"].tolist(), stored["vectors"]))
    vectors = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, keys=np.array(list(vectors)), vectors=np.stack(list(vectors.values())))
    return vectors


def encoded(model: Aggretriever, tokenizer, queries: list[str], sets: dict, folder: Path) -> dict[str, np.ndarray]:
    passages = {}
    for data, indices in sets.values():
        for i in indices:
            passages.update({d: document_text(data.corpus[d]) for d in data.candidates[i]})
    docids = sorted(passages)
    start = time.perf_counter()
    q = encode(model, tokenizer, queries, QUERY_LENGTH, f"{folder.name} queries")
    p = encode(model, tokenizer, [passages[d] for d in docids], 256, f"{folder.name} passages")
    print(f"{folder}: {len(queries)} queries, {len(docids)} passages encoded in {time.perf_counter() - start:.0f} s",
          flush=True)
    return dict(zip([f"q:{t}" for t in queries] + [f"p:{d}" for d in docids], np.concatenate([q, p])))


def part_scores(vectors: dict[str, np.ndarray], cls_dim: int, data: DistillationSet, indices: list[int]
                ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    semantic, lexical = {}, {}
    for i in indices:
        q = vectors[f"q:{data.queries[i].text}"]
        p = np.stack([vectors[f"p:{d}"] for d in data.candidates[i]])
        semantic[i], lexical[i] = p[:, :cls_dim] @ q[:cls_dim], p[:, cls_dim:] @ q[cls_dim:]
    return semantic, lexical


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=Path("runs/models/distillation"))
    parser.add_argument("--out", type=Path, default=Path("runs/exp-afw/dev-vectors"))
    parser.add_argument("--weights", type=float, nargs="*", default=[])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--query-length", type=int, default=QUERY_LENGTH, help="query tokens (passages stay at 256)")
    parser.add_argument("--lexical-from", type=Path,
                        help="another Aggretriever folder whose lexical part replaces each model's (two bodies)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sets = dev_sets(args.cache)
    print(f"{'teacher ensemble':<52}" + "  ".join(f"{name} {rerank_ndcg(data, data.ensemble(), idx):.4f}"
                                                 for name, (data, idx) in sets.items()), flush=True)
    other = vectors_of(args.lexical_from, sets, args.out, args.query_length) if args.lexical_from else None
    for folder in args.models:
        vectors, cls_dim = vectors_of(folder, sets, args.out, args.query_length)
        rows: dict[str, list[float]] = {}
        for data, indices in sets.values():
            semantic, lexical = part_scores(vectors, cls_dim, data, indices)
            if other:
                lexical = part_scores(*other, data, indices)[1]
            for name, weight in [("concat", 1.0), ("semantic", None), ("lexical", 0.0)] + [
                    (f"{w:g} x semantic + lexical", w) for w in args.weights]:
                scores = semantic if weight is None else {i: weight * semantic[i] + lexical[i] for i in indices}
                rows.setdefault(name, []).append(rerank_ndcg(data, scores, indices))
        for name, row in rows.items():
            print(f"{folder.name:<28}{name:<26}" + "  ".join(f"{v:.4f}" for v in row) + f"  mean {np.mean(row):.4f}",
                  flush=True)


if __name__ == "__main__":
    main()
