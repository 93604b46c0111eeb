"""How much of a lexical representation survives being pooled into the Aggretriever's 640 lexical dimensions, by
pooling rule: splade-tiny's full-vocabulary vectors (the best lexical teacher we have) pooled by agg+'s contiguous
vocabulary slices, by slices of a random or a document-frequency-balanced vocabulary order, and by (signed) hashing
with sum pooling (a count sketch, whose inner product is the full one in expectation), at 640 and 1,280 dims.
Development sets only (query_sets.py: long halves, short inverse-cloze); splade vectors cached by parts.py.

    python experiments/aggretriever-lexical/pooling.py --splade $SITE_PACKAGES/cognition/model

Printed per set: nDCG@10 (one relevant passage per query, top 100 by exact inner product).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "aggretriever-full-width"))
from heldout_pseudo import ndcg, top  # noqa: E402
from parts import sliced, splade_vectors  # noqa: E402
from query_sets import long_sets, short_sets  # noqa: E402

SEED = 56


def slice_pooling(order: np.ndarray, width: int):
    """Max over slices of the vocabulary taken in `order` (agg+'s rule when order is the identity)."""
    return lambda m: sliced(m[:, order], width)


def hash_pooling(vocabulary: int, width: int, signed: bool):
    """Sum pooling through a seeded hash of the vocabulary to `width` slots (random signs if `signed`)."""
    rng = np.random.default_rng(SEED)
    slot = rng.integers(0, width, vocabulary)
    sign = rng.choice([-1.0, 1.0], vocabulary) if signed else np.ones(vocabulary)
    sketch = sp.csr_matrix((sign, (np.arange(vocabulary), slot)), shape=(vocabulary, width))
    return lambda m: (m @ sketch).toarray()


def df_balanced_order(passages: list[sp.csr_matrix], width: int) -> np.ndarray:
    """A vocabulary order whose contiguous slices each hold tokens of every document-frequency rank: rank r goes to
    slice r mod width, so no slice gathers several frequent tokens (a slice's max is "on" in most passages then)."""
    df = sum(np.asarray((p > 0).sum(axis=0)).ravel() for p in passages)
    ranked = np.argsort(-df, kind="stable")
    per = -(-len(ranked) // width)
    slots = [ranked[j::width] for j in range(width)]
    return np.concatenate([np.pad(s, (0, per - len(s)), constant_values=-1) for s in slots])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--splade", type=Path, required=True)
    parser.add_argument("--sets", nargs="+", default=["long", "short"], choices=["long", "short"])
    parser.add_argument("--out", type=Path, default=Path("runs/exp-lex/vectors"))
    parser.add_argument("--widths", type=int, nargs="+", default=[640, 1280])
    args = parser.parse_args()
    torch.set_num_threads(2)
    sets = (long_sets() if "long" in args.sets else {}) | (short_sets() if "short" in args.sets else {})
    spl = splade_vectors(args.splade, sets, args.out)
    names = list(sets)
    vocabulary = next(iter(spl.values()))[0].shape[1]
    passages = [spl[n][0] for n in names]
    rules = {"full vocabulary": lambda m: m}
    for width in args.widths:
        balanced = df_balanced_order(passages, width)
        rules |= {
            f"{width} slices, vocabulary order (agg+)": slice_pooling(np.arange(vocabulary), width),
            f"{width} slices, random order": slice_pooling(np.random.default_rng(SEED).permutation(vocabulary),
                                                           width),
            f"{width} slices, df-balanced order": lambda m, o=balanced, w=width: sliced(
                sp.hstack([m, sp.csr_matrix((m.shape[0], 1))]).tocsc()[:, o].tocsr(), w),
            f"{width} hashed, sum": hash_pooling(vocabulary, width, signed=False),
            f"{width} hashed, signed sum (count sketch)": hash_pooling(vocabulary, width, signed=True),
        }
    print(f"{'':<46}" + "  ".join(f"{n:>16}" for n in names) + "      mean", flush=True)
    for label, rule in rules.items():
        row = []
        for name in names:
            texts, queries = sets[name]
            scores = rule(spl[name][1]) @ rule(spl[name][0]).T
            scores = scores.toarray() if sp.issparse(scores) else np.asarray(scores)
            row.append(ndcg(top(scores, sorted(texts), list(queries)), queries))
        print(f"{label:<46}" + "  ".join(f"{v:>16.4f}" for v in row) + f"  {np.mean(row):.4f}", flush=True)


if __name__ == "__main__":
    main()
