"""DeepCT's word rules: word weights -> integer term frequencies, and the Lucene analysis of those words.

Rules (the released DeepCT code):
  word weight = weight of the word's first piece; negative -> 0; a repeated word keeps its max weight;
  tf = round(scale * w) ("linear") or round(scale * sqrt(w)) ("sqrt"), scale 100; words with tf < 1 dropped.
`TermFrequencyRule` holds (scale, mode, merge) for an index: merge "max" is the rule above, "sum" adds the tf of
every occurrence of a word (as a pseudo-document that wrote each occurrence out would), which keeps the passage's
own term frequency beside the model's weights. A model folder names the rule its index should use (`index_tf` in
deepct_config.json; the released code's rule where it names none).
The original wrote each word tf times into a pseudo-document and indexed it with Anserini's default analyzer;
`WordAnalyzer` runs each word through that same analyzer (`AnalyzerSettings` picks the stemmer and stopwords),
and words that analyze to the same term add their weights, as repeated tokens would. The index
(index/deepct.py), the query encoder (encode/deepct.py) and the searcher (search/lucene.py) all use these rules.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

TF_MODES = ("linear", "sqrt")
TF_MERGES = ("max", "sum")
STEMMERS = ("porter", "krovetz", "none")


@dataclass(frozen=True)
class AnalyzerSettings:
    stemmer: str = "porter"
    keep_stopwords: bool = False

    def __post_init__(self):
        if self.stemmer not in STEMMERS:
            raise ValueError(f"unknown stemmer {self.stemmer!r}; known: {', '.join(STEMMERS)}")

    def lucene_analyzer(self):
        """The analyzer `python -m pyserini.index.lucene` would use with the matching options."""
        from pyserini.analysis import get_lucene_analyzer

        stemming = self.stemmer != "none"
        return get_lucene_analyzer(stemming=stemming, stemmer=self.stemmer if stemming else "porter",
                                   stopwords=not self.keep_stopwords)


DEFAULT_ANALYZER = AnalyzerSettings()  # Anserini's default: Porter stemming, English stopwords removed


class WordAnalyzer:
    """Lucene analysis of single words, cached (a corpus has far fewer distinct words than tokens)."""

    def __init__(self, settings: AnalyzerSettings = DEFAULT_ANALYZER):
        from pyserini.analysis import Analyzer

        self.settings = settings
        self._analyzer = Analyzer(settings.lucene_analyzer())
        self._cache: dict[str, list[str]] = {}

    def terms(self, word: str) -> list[str]:
        if word not in self._cache:
            self._cache[word] = list(self._analyzer.analyze(word))
        return self._cache[word]

    def term_weights(self, word_weights: Mapping[str, float]) -> dict[str, float]:
        """Words -> index terms; words analysing to the same term add up (as repeated tokens would)."""
        weights: dict[str, float] = {}
        for word, weight in word_weights.items():
            for term in self.terms(word):
                weights[term] = weights.get(term, 0) + weight
        return weights


def merge_word_weights(word_weights: Iterable[tuple[str, float]]) -> dict[str, float]:
    """(word, first-piece weight) pairs -> {word: max(0, weight)}; a repeated word keeps its maximum."""
    merged: dict[str, float] = {}
    for word, weight in word_weights:
        merged[word] = max(merged.get(word, 0.0), max(0.0, float(weight)))
    return merged


def term_frequency(weight: float, scale: float = 100.0, mode: str = "linear") -> int:
    if mode not in TF_MODES:
        raise ValueError(f"unknown tf mode {mode!r}; known: {', '.join(TF_MODES)}")
    weight = max(0.0, weight)
    return int(round(scale * (math.sqrt(weight) if mode == "sqrt" else weight)))


def word_term_frequencies(word_weights: Mapping[str, float], scale: float = 100.0,
                          mode: str = "linear") -> dict[str, int]:
    """{word: tf}, words whose tf rounds below 1 dropped."""
    tfs = {word: term_frequency(w, scale, mode) for word, w in word_weights.items()}
    return {word: tf for word, tf in tfs.items() if tf >= 1}


@dataclass(frozen=True)
class TermFrequencyRule:
    """How one passage's (word, weight) occurrences become {word: integer tf} in a DeepCT index."""

    scale: float = 100.0
    mode: str = "linear"  # tf = round(scale * w), or round(scale * sqrt(w))
    merge: str = "max"  # a repeated word: its largest weight's tf (the released code), or the sum of every occurrence's

    def __post_init__(self):
        if self.mode not in TF_MODES:
            raise ValueError(f"unknown tf mode {self.mode!r}; known: {', '.join(TF_MODES)}")
        if self.merge not in TF_MERGES:
            raise ValueError(f"unknown tf merge {self.merge!r}; known: {', '.join(TF_MERGES)}")
        if not self.scale > 0:
            raise ValueError(f"tf scale must be > 0, got {self.scale}")

    @classmethod
    def from_settings(cls, settings: Mapping | None) -> TermFrequencyRule:
        """The rule a model folder names (`index_tf` in its settings), else the released code's."""
        return cls(**(settings or {}))

    def with_overrides(self, scale: float | None = None, mode: str | None = None,
                       merge: str | None = None) -> TermFrequencyRule:
        """This rule with the given (not None) fields replaced: the CLI's and encoders' options over a model's rule."""
        given = {"scale": scale, "mode": mode, "merge": merge}
        return replace(self, **{k: v for k, v in given.items() if v is not None})

    def term_frequencies(self, occurrences: Iterable[tuple[str, float]]) -> dict[str, int]:
        """{word: tf >= 1} for one passage's (word, weight) occurrences, in text order."""
        if self.merge == "max":
            return word_term_frequencies(merge_word_weights(occurrences), self.scale, self.mode)
        tfs: dict[str, int] = {}
        for word, weight in occurrences:
            tfs[word] = tfs.get(word, 0) + term_frequency(float(weight), self.scale, self.mode)
        return {word: tf for word, tf in tfs.items() if tf >= 1}


def pseudo_document(word_tfs: Mapping[str, int]) -> str:
    """The original DeepCT pseudo-document: each word repeated tf times (for checks and export)."""
    return " ".join(" ".join([word] * tf) for word, tf in word_tfs.items())
