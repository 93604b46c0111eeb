"""Lucene searching Pyserini cannot express: QL with Jelinek-Mercer smoothing and weighted bag-of-words
queries (DeepCT-Query), on ANY Lucene index (a plain `python -m pyserini.index.lucene` index or a DeepCT one).

`ClassicLuceneSearcher` is Pyserini's `LuceneSearcher` plus `set_qljm(lambda)` and `search_weighted(...)`.
When the index carries DeepCT metadata with non-default analyzer settings, queries use those settings.
A query with more distinct terms than Lucene's clause limit (1024) is cut to fit, with a warning, instead of
failing the whole batch inside Anserini.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from pyserini.search.lucene import LuceneSearcher

from java_bridge.lucene import (
    bm25_similarity,
    jelinek_mercer_similarity,
    max_query_terms,
    set_searcher_similarity,
    weighted_terms_query,
)
from pyserini_ext.errors import IndexFolderError, OptionError
from pyserini_ext.index.deepct import METADATA_FILE, read_index_metadata
from pyserini_ext.models.deepct_terms import DEFAULT_ANALYZER, AnalyzerSettings, WordAnalyzer

logger = logging.getLogger(__name__)

Hits = list[tuple[str, float]]


class ClassicLuceneSearcher(LuceneSearcher):
    def __init__(self, index_dir: str | os.PathLike, analyzer: AnalyzerSettings | None = None):
        if not os.path.isdir(index_dir):
            raise FileNotFoundError(f"{index_dir}: no such index folder")
        if not any(name.startswith("segments_") for name in os.listdir(index_dir)):
            raise IndexFolderError(f"{index_dir}: not a Lucene index (no segments_* file)")
        super().__init__(str(index_dir))
        if analyzer is None and os.path.isfile(os.path.join(index_dir, METADATA_FILE)):
            analyzer = AnalyzerSettings(**read_index_metadata(index_dir)["analyzer"])
        self.analyzer_settings = analyzer or DEFAULT_ANALYZER
        if self.analyzer_settings != DEFAULT_ANALYZER:
            self.set_analyzer(self.analyzer_settings.lucene_analyzer())
        self.word_analyzer = WordAnalyzer(self.analyzer_settings)
        self.model = "bm25 k1=0.9 b=0.4"

    def set_bm25(self, k1: float = 0.9, b: float = 0.4) -> None:
        bm25_similarity(k1, b)  # range checks
        super().set_bm25(k1, b)
        self.model = f"bm25 k1={k1} b={b}"

    def set_qld(self, mu: float = 1000.0) -> None:
        if not mu > 0:
            raise OptionError(f"Dirichlet mu must be > 0, got {mu}")
        super().set_qld(mu)
        self.model = f"qld mu={mu}"

    def set_qljm(self, lambda_: float = 0.1) -> None:
        """Query likelihood with Jelinek-Mercer smoothing (Lucene's LMJelinekMercerSimilarity)."""
        set_searcher_similarity(self.object, jelinek_mercer_similarity(lambda_))
        self.model = f"qljm lambda={lambda_}"

    def analyze_weights(self, word_weights: Mapping[str, float]) -> dict[str, float]:
        """Query words -> index terms (same analyzer as the index); positive weights only."""
        return {t: w for t, w in self.word_analyzer.term_weights(word_weights).items() if w > 0}

    def fit_text_query(self, qid: str, text: str) -> str:
        """`text`, or its longest prefix of words within Lucene's clause limit (said in a warning)."""
        limit, terms = max_query_terms(), set()
        words = text.split()
        for position, word in enumerate(words):
            terms.update(self.word_analyzer.terms(word))
            if len(terms) > limit:
                logger.warning("query %s has more than %d distinct terms (Lucene's clause limit); searching with its "
                               "first %d of %d words", qid, limit, position, len(words))
                return " ".join(words[:position])
        return text

    def fit_weighted_query(self, qid: str, term_weights: Mapping[str, float]) -> dict[str, float]:
        """`term_weights`, or its `limit` heaviest terms when Lucene's clause limit is exceeded (with a warning)."""
        limit = max_query_terms()
        if len(term_weights) <= limit:
            return dict(term_weights)
        logger.warning("query %s has %d weighted terms, more than Lucene's clause limit; keeping the %d heaviest",
                       qid, len(term_weights), limit)
        return dict(sorted(term_weights.items(), key=lambda tw: (-tw[1], tw[0]))[:limit])

    def search_weighted(self, term_weights: Mapping[str, float], k: int = 1000) -> Hits:
        """Weighted bag-of-words search over analyzed terms; terms absent from the index match nothing."""
        if not term_weights:
            return []
        return [(h.docid, h.score) for h in self.search(weighted_terms_query(term_weights), k)]

    def search_topics(self, topics: Mapping[str, str], k: int = 1000, threads: int = 1,
                      query_weights: Callable[[str], Mapping[str, float]] | None = None) -> dict[str, Hits]:
        """A run {qid: [(docid, score)]}: plain text queries, or weighted ones from `query_weights(text)`.

        A query that yields no term (empty, only stopwords, no known word) gets no hits and is counted in a
        warning rather than stopping the run.
        """
        if k < 1:  # Anserini's batch search fails obscurely (and search() silently) on k < 1
            raise OptionError(f"the number of hits must be >= 1, got {k}")
        if query_weights is None:
            qids = list(topics)
            results = self.batch_search([self.fit_text_query(q, topics[q]) for q in qids], qids, k=k,
                                        threads=threads)
            run = {q: [(h.docid, h.score) for h in results.get(q, [])] for q in qids}
        else:
            run = {qid: self.search_weighted(self.fit_weighted_query(qid, self.analyze_weights(query_weights(text))), k)
                   for qid, text in topics.items()}
        empty = [q for q, hits in run.items() if not hits]
        if empty:
            logger.warning("%d of %d queries matched no document (no known terms), e.g. %s", len(empty), len(run),
                           ", ".join(empty[:5]))
        return run
