"""Development query sets searched over whole corpora, with no test query or qrel read: the long-query set (one
half of a passage retrieves the other half) and the short inverse-cloze set of aggretriever-full-width.

Long queries ("halves"): from SciFact's and Cranfield's corpora, passages of at least 200 words; the query is the
passage's first half (100-300 words, cut at a word), the relevant document is the same passage less that half (its
title kept, as the collection has it). Every other passage stays whole and the whole corpus is searched. 400
SciFact and 300 Cranfield queries (seed 56); ArguAna-like lengths (about 200 words a query) without reading ArguAna.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

from pyserini_ext.data import document_text, load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "aggretriever-full-width"))
from heldout_pseudo import pseudo_sets  # noqa: E402

SEED = 56
HALVES = {"scifact": 400, "cranfield": 300}
MIN_WORDS = 200

QuerySet = tuple[dict[str, str], dict[str, tuple[str, str]]]  # (docid -> text, qid -> (query, relevant docid))


def halves_set(name: str, count: int, rng: random.Random) -> QuerySet:
    corpus = load_dataset(name).corpus
    texts = {d: document_text(doc) for d, doc in corpus.items()}
    usable = sorted(d for d, doc in corpus.items() if len((doc.get("text") or "").split()) >= MIN_WORDS)
    queries = {}
    for d in sorted(rng.sample(usable, min(count, len(usable)))):
        words = corpus[d]["text"].split()
        cut = min(len(words) // 2, 300)
        texts[d] = document_text({"title": corpus[d].get("title"), "text": " ".join(words[cut:])})
        queries[f"{name}-half/{d}"] = (" ".join(words[:cut]), d)
    return texts, queries


def long_sets() -> dict[str, QuerySet]:
    rng = random.Random(SEED)
    return {f"{name}-halves": halves_set(name, count, rng) for name, count in HALVES.items()}


def short_sets() -> dict[str, QuerySet]:
    return {f"{name}-ict": value for name, value in pseudo_sets().items()}
