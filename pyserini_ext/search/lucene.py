"""Lucene searching Pyserini cannot express: QL with Jelinek-Mercer smoothing and weighted bag-of-words
queries (DeepCT-Query), on ANY Lucene index (a plain `python -m pyserini.index.lucene` index or a DeepCT one).

`ClassicLuceneSearcher` is Pyserini's `LuceneSearcher` plus `set_qljm(lambda)` and `search_weighted(...)`.
When the index carries DeepCT metadata with non-default analyzer settings, queries use those settings.
A query with more distinct terms than Lucene's clause limit (1024) would fail inside Anserini; it keeps the
terms that can match instead (`fit_query_terms`: terms absent from the index go first, then the lowest-weighted),
and a warning says how many went.
"""
from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pyserini.search.lucene import LuceneSearcher
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from java_bridge.lucene import (
    analyze_text,
    bm25_similarity,
    document_frequencies,
    jelinek_mercer_similarity,
    max_query_terms,
    searcher_index_reader,
    set_searcher_similarity,
    weighted_terms_query,
)
from pyserini_ext.errors import IndexFolderError, OptionError
from pyserini_ext.index.deepct import METADATA_FILE, read_index_metadata
from pyserini_ext.models.deepct_terms import DEFAULT_ANALYZER, AnalyzerSettings, WordAnalyzer

logger = logging.getLogger(__name__)

Hits = list[tuple[str, float]]


@dataclass(frozen=True)
class FittedQuery:
    weights: dict[str, float]  # the terms searched with, in the query's order
    absent: int = 0  # dropped: no document holds them, so they could never match
    past_limit: int = 0  # dropped: the lowest-weighted present terms past the clause limit


def fit_query_terms(weights: Mapping[str, float], document_frequency: Callable[[Iterable[str]], Mapping[str, int]],
                    limit: int) -> FittedQuery:
    """`weights` unchanged within `limit` terms. Past it, the terms absent from the index go first (a lookup only
    then: within the limit they cost nothing and match nothing), then the lowest weights; among equal weights the
    rarer term (fewer documents: higher IDF, so the larger score contribution) stays, then the alphabetically first.
    For a text query the weight is the term's count in the query, as in Anserini's bag-of-words query.
    """
    if len(weights) <= limit:
        return FittedQuery(dict(weights))
    frequencies = document_frequency(weights)
    present = {t: w for t, w in weights.items() if frequencies[t] > 0}
    kept = set(sorted(present, key=lambda t: (-present[t], frequencies[t], t))[:limit])
    return FittedQuery({t: w for t, w in present.items() if t in kept}, absent=len(weights) - len(present),
                       past_limit=len(present) - len(kept))


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
        self._index_reader = None

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

    def document_frequencies(self, terms: Iterable[str]) -> dict[str, int]:
        """{term: documents holding it} from the searcher's index reader (0: the term can never match)."""
        if self._index_reader is None:
            self._index_reader = searcher_index_reader(self.object)
        return document_frequencies(self._index_reader, terms)

    def text_weights(self, text: str) -> dict[str, float]:
        """{term: its count in `text`}: the weights of the query Anserini builds from the text (bag of words)."""
        return {t: float(n) for t, n in Counter(analyze_text(self.object.get_analyzer(), text)).items()}

    def fit_weights(self, qid: str, term_weights: Mapping[str, float]) -> dict[str, float]:
        """`term_weights` cut to Lucene's clause limit by `fit_query_terms`, what was dropped said in a warning."""
        limit = max_query_terms()
        fitted = fit_query_terms(term_weights, self.document_frequencies, limit)
        if fitted.absent or fitted.past_limit:
            logger.warning("query %s has %d distinct terms, more than Lucene's clause limit of %d: dropped %d absent "
                           "from the index and %d lowest-weighted; searching with %d", qid, len(term_weights), limit,
                           fitted.absent, fitted.past_limit, len(fitted.weights))
        return fitted.weights

    def search_weighted(self, term_weights: Mapping[str, float], k: int = 1000) -> Hits:
        """Weighted bag-of-words search over analyzed terms; terms absent from the index match nothing."""
        if not term_weights:
            return []
        return [(h.docid, h.score) for h in self.search(weighted_terms_query(term_weights), k)]

    def _search_texts(self, topics: Mapping[str, str], qids: list[str], k: int, threads: int) -> dict[str, Hits]:
        """Text queries through Anserini's batch search; one past the clause limit as its fitted weighted query."""
        limit, plain, run = max_query_terms(), [], {}
        for qid in qids:
            weights = self.text_weights(topics[qid])
            if len(weights) > limit:
                run[qid] = self.search_weighted(self.fit_weights(qid, weights), k)
            else:
                plain.append(qid)
        if plain:
            results = self.batch_search([topics[q] for q in plain], plain, k=k, threads=threads)
            run.update({q: [(h.docid, h.score) for h in results.get(q, [])] for q in plain})
        return run

    def search_topics(self, topics: Mapping[str, str], k: int = 1000, threads: int = 1,
                      query_weights: Callable[[str], Mapping[str, float]] | None = None,
                      progress: bool = True) -> dict[str, Hits]:
        """A run {qid: [(docid, score)]}: plain text queries, or weighted ones from `query_weights(text)`.

        A query that yields no term (empty, only stopwords, no known word) gets no hits and is counted in a
        warning rather than stopping the run. `progress`: a bar over the queries (text queries go to Anserini's
        batch search in chunks, so the bar moves).
        """
        if k < 1:  # Anserini's batch search fails obscurely (and search() silently) on k < 1
            raise OptionError(f"the number of hits must be >= 1, got {k}")
        qids, found = list(topics), {}
        chunk = 1 if query_weights is not None else max(64, 16 * threads)
        with logging_redirect_tqdm(), tqdm(total=len(qids), desc="search", unit="query", disable=not progress) as bar:
            for start in range(0, len(qids), chunk):
                part = qids[start:start + chunk]
                if query_weights is None:
                    found.update(self._search_texts(topics, part, k, threads))
                else:
                    weights = self.analyze_weights(query_weights(topics[part[0]]))
                    found[part[0]] = self.search_weighted(self.fit_weights(part[0], weights), k)
                bar.update(len(part))
        run = {q: found[q] for q in qids}
        empty = [q for q, hits in run.items() if not hits]
        if empty:
            logger.warning("%d of %d queries matched no document (no known terms), e.g. %s", len(empty), len(run),
                           ", ".join(empty[:5]))
        return run
