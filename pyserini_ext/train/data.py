"""What the trainers learn from, the second argument of every `train_<model>(model, data, config, out_dir)`:

- `LabelledData`: judged (query, passage) pairs, e.g. a BEIR train split; the papers' own training data;
- `train.distill.DistillationSet`: training queries with candidates scored by the packaged MS MARCO teachers,
  on any corpus (pseudo-queries where there are no labels).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from pyserini_ext.data import BeirDataset, load_dataset

NEGATIVES = ("random", "bm25", "none")


@dataclass
class LabelledData:
    corpus: Mapping[str, Mapping[str, str]]
    queries: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, int]]
    # one hard negative per query and step: an unjudged document drawn uniformly ("random"), from the query's
    # BM25 top `bm25_depth` minus its judged documents ("bm25", Pyserini over a temporary Lucene index), or none
    negatives: str = "random"
    bm25_depth: int = 30
    name: str = ""  # where the pairs come from, for the training log

    def __post_init__(self):
        if self.negatives not in NEGATIVES:
            raise ValueError(f"negatives must be one of {NEGATIVES}, got {self.negatives!r}")

    @classmethod
    def from_dataset(cls, dataset: str | os.PathLike | BeirDataset, split: str = "train",
                     negatives: str = "random") -> LabelledData:
        """A BEIR dataset's `split` qrels (DatasetError when the split has none)."""
        if not isinstance(dataset, BeirDataset):
            dataset = load_dataset(dataset)
        return cls(dataset.corpus, dataset.queries, dataset.qrels(split), negatives, name=f"{dataset.name}/{split}")

    @cached_property
    def bm25_rankings(self) -> dict[str, list[str]]:
        """qid -> BM25 top `bm25_depth` docids, for the judged queries with text."""
        from pyserini_ext.train.distill import bm25_rankings

        queries = {qid: self.queries[qid] for qid in self.qrels if self.queries.get(qid, "").strip()}
        return {qid: [docid for docid, _ in hits]
                for qid, hits in bm25_rankings(self.corpus, queries, self.bm25_depth).items()}

    def log(self) -> dict:
        return {"data": self.name or "labelled pairs", "negatives": self.negatives}
