"""A development set that behaves like a collection no trainer saw: inverse-cloze pseudo-queries on Cranfield's and
Vaswani's corpora (neither is in the distillation set; their queries and qrels are never read), searched over the
whole corpus, as the report's collections are.

    python experiments/aggretriever-full-width/heldout_pseudo.py MODEL [MODEL ...] [--weights 1.5 2 3 ...]

Each pseudo-query is a piece of one passage, cut out of it: the passage, less that piece, is its one relevant
document, so matching the piece's words exactly earns nothing and the query must be matched by topic, vocabulary and
meaning, as a real query is.
- Cranfield: a 4-30 word sentence of the abstract (not the title sentence), from 500 passages drawn by seed.
- Vaswani (one unpunctuated sentence per passage): an 8-word span starting inside the passage, from 500 passages
  of at least 24 words.
Every passage of both corpora is encoded (the chosen ones less their piece; 256 tokens, queries whole), ranked
exactly by inner product, and scored by nDCG@10 (one relevant passage each). Printed per model: the concatenation,
each part alone and `w x semantic + lexical` (as dev_parts.py), with BM25 (Pyserini's defaults) on the same set.
Vectors are cached under --out, keyed by the model folder and its parent.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from pyserini_ext.data import document_text, load_dataset
from pyserini_ext.evaluation import evaluate
from pyserini_ext.models.aggretriever import Aggretriever
from pyserini_ext.train.distill import bm25_rankings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dev_parts import cached, encode  # noqa: E402

QUERIES_PER_SET = 500
SPAN = 8
SEED = 46


def cranfield_sentences(text: str) -> list[str]:
    """Cranfield's text is lower-cased with sentences ended by a spaced full stop (" . ")."""
    return [s.strip() for s in text.strip().removesuffix(".").split(" . ") if s.strip()]


def cranfield_set(rng: random.Random) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """(docid -> text as encoded, qid -> (query, relevant docid)). The text repeats the title as its first sentence."""
    corpus = load_dataset("cranfield").corpus
    texts = {d: document_text(doc) for d, doc in corpus.items()}
    usable = {}
    for d, doc in corpus.items():
        body = cranfield_sentences(doc.get("text") or "")[1:]  # the first is the title again
        pieces = [s for s in body if 4 <= len(s.split()) <= 30]
        if len(body) >= 3 and pieces:
            usable[d] = (doc, pieces)
    queries = {}
    for d in sorted(rng.sample(sorted(usable), QUERIES_PER_SET)):
        doc, pieces = usable[d]
        piece = rng.choice(pieces)
        rest = " . ".join(s for s in cranfield_sentences(doc["text"]) if s != piece) + " ."
        texts[d] = document_text({"title": doc.get("title"), "text": rest})
        queries[f"cranfield/{d}"] = (piece, d)
    return texts, queries


def vaswani_set(rng: random.Random) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    corpus = load_dataset("vaswani").corpus
    texts = {d: document_text(doc) for d, doc in corpus.items()}
    usable = sorted(d for d, doc in corpus.items() if len((doc.get("text") or "").split()) >= 24)
    queries = {}
    for d in sorted(rng.sample(usable, QUERIES_PER_SET)):
        words = corpus[d]["text"].split()
        start = rng.randint(1, len(words) - SPAN - 1)  # inside: some words stay on each side
        texts[d] = " ".join(words[:start] + words[start + SPAN:])
        queries[f"vaswani/{d}"] = (" ".join(words[start:start + SPAN]), d)
    return texts, queries


def pseudo_sets() -> dict[str, tuple[dict[str, str], dict[str, tuple[str, str]]]]:
    return {"cranfield": cranfield_set(random.Random(SEED)), "vaswani": vaswani_set(random.Random(SEED))}


def ndcg(run: dict[str, list[tuple[str, float]]], queries: dict[str, tuple[str, str]]) -> float:
    qrels = {q: {d: 1} for q, (_, d) in queries.items()}
    return evaluate(qrels, run, metrics=("ndcg_cut_10",))["ndcg_cut_10"]


def top(scores: np.ndarray, docids: list[str], qids: list[str], k: int = 100) -> dict[str, list[tuple[str, float]]]:
    best = np.argpartition(-scores, k, axis=1)[:, :k]
    return {q: [(docids[j], float(scores[i, j])) for j in best[i]] for i, q in enumerate(qids)}


def model_vectors(folder: Path, sets: dict, out: Path) -> tuple[dict[str, np.ndarray], int]:
    model = Aggretriever.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    key = f"{folder.resolve().parent.name}-{folder.name}"

    def make() -> dict[str, np.ndarray]:
        vectors = {}
        for name, (texts, queries) in sets.items():
            docids = sorted(texts)
            p = encode(model, tokenizer, [texts[d] for d in docids], 256, f"{name} passages")
            q = encode(model, tokenizer, [t for t, _ in queries.values()], 512, f"{name} queries")
            vectors |= {f"{name}:p:{d}": v for d, v in zip(docids, p)}
            vectors |= {f"{name}:q:{qid}": v for qid, v in zip(queries, q)}
        return vectors
    return cached(out / f"{key}.npz", make), model.config.cls_dim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("runs/exp-afw/heldout-vectors"))
    parser.add_argument("--weights", type=float, nargs="*", default=[])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-bm25", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sets = pseudo_sets()
    if not args.no_bm25:
        row = []
        for texts, queries in sets.values():
            run = bm25_rankings({d: {"title": "", "text": t} for d, t in texts.items()},
                                {q: t for q, (t, _) in queries.items()}, 100, threads=args.threads)
            row.append(ndcg(run, queries))
        print(f"{'BM25':<54}" + "  ".join(f"{v:.4f}" for v in row) + f"  mean {np.mean(row):.4f}", flush=True)
    for folder in args.models:
        vectors, cls_dim = model_vectors(folder, sets, args.out)
        rows: dict[str, list[float]] = {}
        for name, (texts, queries) in sets.items():
            docids, qids = sorted(texts), list(queries)
            p = np.stack([vectors[f"{name}:p:{d}"] for d in docids])
            q = np.stack([vectors[f"{name}:q:{x}"] for x in qids])
            semantic, lexical = q[:, :cls_dim] @ p[:, :cls_dim].T, q[:, cls_dim:] @ p[:, cls_dim:].T
            for label, weight in [("concat", 1.0), ("semantic", None), ("lexical", 0.0)] + [
                    (f"{w:g} x semantic + lexical", w) for w in args.weights]:
                scores = semantic if weight is None else weight * semantic + lexical
                rows.setdefault(label, []).append(ndcg(top(scores, docids, qids), queries))
        for label, row in rows.items():
            print(f"{folder.resolve().parent.name + '/' + folder.name:<28}{label:<26}"
                  + "  ".join(f"{v:.4f}" for v in row) + f"  mean {np.mean(row):.4f}", flush=True)


if __name__ == "__main__":
    main()
