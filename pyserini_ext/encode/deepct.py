"""DeepCT-Query: the model's weights on the query's words as a weighted bag of words.

* `DeepCTQueryWeigher(model)(text)` -> {word: weight} (first-piece weight, negative -> 0, repeated word keeps
  its max, same rules as the index), for `ClassicLuceneSearcher.search_weighted` on any Lucene index.
* `DeepCTQueryEncoder` is the Pyserini query encoder registered as `deepct`: its `encode(text)` returns
  {analyzed term: integer weight} as Pyserini's `LuceneImpactSearcher` expects (it casts weights to int, so
  weights are scaled like the index tf: round(scale * w)). Terms are analyzed with the index's analyzer so
  they match a DeepCT index (or a plain Lucene index).
* `DeepCTDocumentEncoder` is the Pyserini document encoder registered as `deepct`: `python -m pyserini.encode`
  (no `--to-faiss`) writes each passage as {analyzed term: integer tf}, the terms and tf our DeepCT index
  holds, i.e. a JsonVectorCollection for `python -m pyserini.index.lucene --impact --pretokenized`.
"""
from __future__ import annotations

import os

import torch
from pyserini.encode import DocumentEncoder, QueryEncoder

from pyserini_ext.data.text import document_texts, sanitize_texts
from pyserini_ext.models.deepct import DeepCTModel
from pyserini_ext.models.deepct_terms import (
    DEFAULT_ANALYZER,
    AnalyzerSettings,
    WordAnalyzer,
    merge_word_weights,
    word_term_frequencies,
)


class DeepCTQueryWeigher:
    def __init__(self, model: DeepCTModel | str | os.PathLike):
        self.model = model if isinstance(model, DeepCTModel) else DeepCTModel.from_pretrained(model)

    def __call__(self, text: str) -> dict[str, float]:
        return merge_word_weights(self.model.word_weights(sanitize_texts([text], "query"))[0])


class DeepCTQueryEncoder(QueryEncoder):
    def __init__(self, model_name_or_path: DeepCTModel | str | os.PathLike, scale: float = 100.0,
                 mode: str = "linear", analyzer: AnalyzerSettings = DEFAULT_ANALYZER, device: str = "cpu",
                 **_pyserini_kwargs):
        super().__init__()
        self.weigher = DeepCTQueryWeigher(model_name_or_path)
        self.weigher.model.to(device)
        self.has_model = True
        self.scale, self.mode = scale, mode
        self.words = WordAnalyzer(analyzer)

    def encode(self, text: str, **_kwargs) -> dict[str, int]:
        """{term: integer weight}; empty when no query word gets weight (empty or unknown-word queries)."""
        word_weights = word_term_frequencies(self.weigher(text), self.scale, self.mode)
        return {t: int(w) for t, w in self.words.term_weights(word_weights).items()}


class DeepCTDocumentEncoder(DocumentEncoder):
    def __init__(self, model_name: DeepCTModel | str | os.PathLike, scale: float = 100.0, mode: str = "linear",
                 analyzer: AnalyzerSettings = DEFAULT_ANALYZER, device: str = "cpu", **_pyserini_kwargs):
        self.model = model_name if isinstance(model_name, DeepCTModel) else DeepCTModel.from_pretrained(model_name)
        self.model.to(device if device.startswith("cpu") or torch.cuda.is_available() else "cpu")
        self.scale, self.mode = scale, mode
        self.words = WordAnalyzer(analyzer)

    def encode(self, texts: list[str], titles: list[str] | None = None, **_pyserini_kwargs) -> list[dict[str, int]]:
        """Per passage (title + text) {term: tf >= 1}; long passages are weighed in windows, as for the index
        (Pyserini's `max_length` does not truncate them)."""
        encoded = []
        for weights in self.model.word_weights(document_texts(texts, titles)):
            word_tfs = word_term_frequencies(merge_word_weights(weights), self.scale, self.mode)
            encoded.append({t: int(tf) for t, tf in self.words.term_weights(word_tfs).items()})
        return encoded
