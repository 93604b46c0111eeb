"""DeepCT-Query: the model's weights on the query's words as a weighted bag of words.

* `DeepCTQueryWeigher(model)(text)` -> {word: weight} (first-piece weight, negative -> 0, repeated word keeps
  its max, same rules as the index), for `ClassicLuceneSearcher.search_weighted` on any Lucene index.
* `DeepCTQueryEncoder(model).encode(text)` returns {analyzed term: integer weight} as Pyserini's
  `LuceneImpactSearcher` expects (it casts weights to int, so weights are scaled like the index tf:
  round(scale * w)). Terms are analyzed with the index's analyzer so they match a DeepCT index (or a plain Lucene
  index).
* `RuntimeDeepCTModel(model, runtime)`: the model on a runtime (torch or ONNX Runtime, see encode/runtime.py); its
  `word_weights` is the same call either way.
* `DeepCTDocumentEncoder(model).encode(texts)` gives each passage as {analyzed term: integer tf}, the terms and tf
  our DeepCT index holds, i.e. a JsonVectorCollection for `python -m pyserini.index.lucene --impact --pretokenized`.

Nothing here knows Pyserini: the classes its commands build (`--encoder-class deepct`, `deepct-onnx`) are the
adapters in integration/encoders.py over the two encoders above.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from pyserini_ext.data.text import document_texts, sanitize_texts
from pyserini_ext.encode.runtime import EncoderRuntime, OnnxGraph, as_int64
from pyserini_ext.models.deepct import DeepCTModel
from pyserini_ext.models.deepct_terms import (
    DEFAULT_ANALYZER,
    AnalyzerSettings,
    TermFrequencyRule,
    WordAnalyzer,
    merge_word_weights,
    word_term_frequencies,
)

GRAPH = OnnxGraph("deepct", (torch.tensor([[101, 7592, 2088, 102, 0]]), torch.tensor([[1, 1, 1, 1, 0]])),
                  ("input_ids", "attention_mask"), ("weights",),
                  {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"},
                   "weights": {0: "batch", 1: "length"}})


class OnnxDeepCTModel(DeepCTModel):
    """A DeepCTModel whose forward runs the exported graph on ONNX Runtime; the word rules are the model's."""

    def __init__(self, model: DeepCTModel, session):
        super().__init__(model.encoder, model.tokenizer, model.max_length, model.index_tf)
        self.session = session

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        inputs = {"input_ids": as_int64(input_ids), "attention_mask": as_int64(attention_mask)}
        weights, = self.session.run(None, inputs)
        return torch.from_numpy(weights)


class RuntimeDeepCTModel:
    """`word_weights(texts)` of a DeepCT model on a runtime: torch (autocast per precision) or ONNX Runtime."""

    def __init__(self, model: DeepCTModel | str | os.PathLike, runtime: EncoderRuntime | None = None):
        self.runtime = runtime or EncoderRuntime()
        loaded = model if isinstance(model, DeepCTModel) else DeepCTModel.from_pretrained(model)
        loaded.to(self.runtime.torch_device)
        if self.runtime.backend == "onnx":
            if isinstance(model, DeepCTModel):
                raise ValueError("the ONNX backend exports from a saved model folder; pass its path")
            loaded = OnnxDeepCTModel(loaded, self.runtime.session(GRAPH, Path(model), lambda: loaded))
        self.model = loaded

    @property
    def max_length(self) -> int:
        return self.model.max_length

    @property
    def index_tf(self) -> TermFrequencyRule:
        return self.model.index_tf

    def word_weights(self, texts: list[str], batch_size: int = 64) -> list[list[tuple[str, float]]]:
        with self.runtime.autocast():
            return self.model.word_weights(texts, batch_size)


class DeepCTQueryWeigher:
    def __init__(self, model: DeepCTModel | RuntimeDeepCTModel | str | os.PathLike,
                 runtime: EncoderRuntime | None = None):
        self.model = model if isinstance(model, RuntimeDeepCTModel) else RuntimeDeepCTModel(model, runtime)

    def __call__(self, text: str) -> dict[str, float]:
        return merge_word_weights(self.model.word_weights(sanitize_texts([text], "query"))[0])


class DeepCTQueryEncoder:
    def __init__(self, model_name_or_path: DeepCTModel | str | os.PathLike, scale: float = 100.0,
                 mode: str = "linear", analyzer: AnalyzerSettings = DEFAULT_ANALYZER, device: str = "cpu",
                 backend: str = "torch", precision: str = "float32", threads: int | None = None,
                 onnx_dir: str | None = None, **_pyserini_kwargs):
        self.weigher = DeepCTQueryWeigher(model_name_or_path,
                                          EncoderRuntime(backend, device, precision, threads, onnx_dir))
        self.scale, self.mode = scale, mode
        self.words = WordAnalyzer(analyzer)

    def encode(self, text: str, **_kwargs) -> dict[str, int]:
        """{term: integer weight}; empty when no query word gets weight (empty or unknown-word queries)."""
        word_weights = word_term_frequencies(self.weigher(text), self.scale, self.mode)
        return {t: int(w) for t, w in self.words.term_weights(word_weights).items()}


class DeepCTDocumentEncoder:
    def __init__(self, model_name: DeepCTModel | str | os.PathLike, scale: float | None = None,
                 mode: str | None = None, merge: str | None = None, analyzer: AnalyzerSettings = DEFAULT_ANALYZER,
                 device: str = "cpu", backend: str = "torch", precision: str = "float32", threads: int | None = None,
                 onnx_dir: str | None = None, **_pyserini_kwargs):
        """scale / mode / merge: the tf rule (models/deepct_terms.py); each defaults to the released code's
        (100, linear, max), not the model's `index_tf`: that rule was chosen for BM25 over our DeepCT index, with
        document lengths, while Pyserini's `--impact` index has none and scores sum(query weight x tf) without
        saturation, where adding up a word's occurrences overweights repeated words (SciFact train nDCG@10 of
        `--impact --encoder deepct`: linear/max 0.4633, sqrt/sum 0.3266)."""
        self.model = RuntimeDeepCTModel(model_name, EncoderRuntime(backend, device, precision, threads, onnx_dir))
        self.rule = TermFrequencyRule().with_overrides(scale=scale, mode=mode, merge=merge)
        self.words = WordAnalyzer(analyzer)

    def encode(self, texts: list[str], titles: list[str] | None = None, **_pyserini_kwargs) -> list[dict[str, int]]:
        """Per passage (title + text) {term: tf >= 1}; long passages are weighed in windows, as for the index
        (Pyserini's `max_length` does not truncate them)."""
        encoded = []
        for weights in self.model.word_weights(document_texts(texts, titles)):
            word_tfs = self.rule.term_frequencies(weights)
            encoded.append({t: int(tf) for t, tf in self.words.term_weights(word_tfs).items()})
        return encoded
