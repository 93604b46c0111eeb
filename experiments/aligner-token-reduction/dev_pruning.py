"""How AligneR's index-time token reduction was chosen: exact AligneR search of development queries over indexes
keeping `--beta-d` of each document's vectors: pruned by salience alone, pruned with near-copies pushed back at
each `--duplicate-cosine`, and pooled (`pool_tokens`), plus the unreduced index. nDCG@10 (`pyserini_ext.evaluation`),
every query token, one thread.

Development sets (never test queries): SciFact train (the first `--scifact-queries` by id, whole corpus) and the
MS MARCO triples dev set `make report` builds (100 queries; DL19 subset passages + the 200 triple passages).
Corpus encodings are the ones `make report` caches (`--workdir`), the triple passages encoded here once.

    python experiments/aligner-token-reduction/dev_pruning.py --duplicate-cosine 0.9 0.85 0.8 \
        --workdir runs/report/full
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from pyserini_ext.data import load_dataset
from pyserini_ext.encode.aligner import AlignerQueryEncoder
from pyserini_ext.evaluation import evaluate
from pyserini_ext.index.aligner import AlignerIndex, EncodedCorpus, build_index, encode_corpus
from pyserini_ext.models.aligner import AlignerModel
from pyserini_ext.models.alignment import DEFAULT_BETA_Q
from pyserini_ext.search.aligner import AlignerSearcher


def msmarco_dev_encoding(workdir: Path, tag: str, model: AlignerModel, model_dir: str, dataset) -> EncodedCorpus:
    """The DL19 subset's cached encoding plus the 200 triple passages (encoded once, cached next to it)."""
    cache = workdir / "msmarco-dev" / f"aligner.{tag}.encoded.npz"
    if cache.is_file():
        return EncodedCorpus.load(cache)
    dl19 = EncodedCorpus.load(workdir / "dl19" / f"aligner.{tag}.encoded.npz")
    extra = encode_corpus(model, {d: t for d, t in dataset.corpus.items() if d not in set(dl19.docids)},
                          model_path=model_dir, progress=False)
    merged = EncodedCorpus(dl19.docids + extra.docids, np.concatenate([dl19.offsets, extra.offsets[1:]
                                                                       + dl19.offsets[-1]]),
                           np.concatenate([dl19.vectors, extra.vectors]),
                           np.concatenate([dl19.salience_scores, extra.salience_scores]), dl19.model_info)
    if set(merged.docids) != set(dataset.corpus):
        raise SystemExit(f"{cache}: the encodings do not cover the MS MARCO dev corpus")
    return EncodedCorpus.load(merged.save(cache))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resources/models/aligner-minilm")
    parser.add_argument("--workdir", default="runs/report/full", help="make report's work folder (its caches)")
    parser.add_argument("--tag", default="aligner-minilm-9e98b3ae", help="model tag in the cached file names")
    parser.add_argument("--beta-d", type=float, default=0.4)
    parser.add_argument("--duplicate-cosine", type=float, nargs="+", default=[0.9, 0.85, 0.8])
    parser.add_argument("--scifact-queries", type=int, default=400)
    args = parser.parse_args()
    torch.set_num_threads(1)
    workdir = Path(args.workdir)
    model = AlignerModel.from_pretrained(args.model)
    scifact, msmarco = load_dataset("scifact"), load_dataset(workdir / "msmarco-dev" / "source")
    sets = {"scifact-train": (EncodedCorpus.load(workdir / "scifact" / f"aligner.{args.tag}.encoded.npz"),
                              scifact, "train", args.scifact_queries),
            "msmarco-dev": (msmarco_dev_encoding(workdir, args.tag, model, args.model, msmarco), msmarco, "dev",
                            None)}
    settings = [(1.0, "prune", None), (args.beta_d, "prune", None),
                *((args.beta_d, "prune", c) for c in args.duplicate_cosine), (args.beta_d, "pool", None)]
    encoder = AlignerQueryEncoder(args.model)
    for name, (encoded, dataset, split, first) in sets.items():
        qrels = dataset.qrels(split)
        qids = sorted(q for q in qrels if q in dataset.queries)[:first]
        queries = encoder.encode_tokens([dataset.queries[q] for q in qids], beta=DEFAULT_BETA_Q)
        with tempfile.TemporaryDirectory() as tmp:
            for number, (beta_d, reduction, cosine) in enumerate(settings):
                folder = build_index(encoded, Path(tmp) / str(number), beta_d=beta_d, reduction=reduction,
                                     duplicate_cosine=cosine, progress=False)
                searcher = AlignerSearcher(AlignerIndex.open(folder), model)
                run = {q: [(h.docid, h.score) for h in searcher.rank(v[0], v[1], 10)] for q, v in zip(qids, queries)}
                score = evaluate({q: qrels[q] for q in qids}, run, metrics=("ndcg_cut_10",))["ndcg_cut_10"]
                print(f"{name} ({len(qids)} queries) beta_d {beta_d:g} {reduction} duplicate_cosine {cosine}: nDCG@10 "
                      f"{score:.4f}", flush=True)


if __name__ == "__main__":
    main()
