"""DeepCT-Index: the ONE place where DeepCT weights become integer term frequencies in a Lucene index.

Rules (the released DeepCT code):
  word weight = weight of the word's first piece; negative -> 0; a repeated word keeps its max weight;
  tf = round(scale * w) ("linear") or round(scale * sqrt(w)) ("sqrt"), scale 100; words with tf < 1 dropped.
The original then wrote each word tf times into a pseudo-document and indexed it with Anserini's default
analyzer. We index exactly what that pseudo-document would give, without writing it out: each word is run
through the same Lucene analyzer (default: Anserini's English analyzer, Porter stemming, Lucene's English
stopwords removed; `stemmer` / `keep_stopwords` change it), words that analyze to the same term add their tf
(as repeated tokens would), and each term is indexed once with its tf as a custom term frequency, so the
document length in the norm is the sum of the tf (see java_bridge/lucene.py). BM25 and query likelihood
therefore score it exactly like the pseudo-document index (tested), and the result is an ordinary Lucene
index for `python -m pyserini.search.lucene --bm25`. That command always analyzes queries with the default
analyzer; an index built with other analyzer settings is searched with `pyserini-ext lucene search`, which
reads them from the index metadata.

A document whose words all end with tf 0 (empty text, only stopwords/punctuation, or weights rounding to 0)
is kept as an empty document and counted in a warning, never silently dropped.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from pyserini_ext.data import atomic_output, check_id
from pyserini_ext.data.text import document_text, sanitize_texts
from pyserini_ext.errors import InputError

logger = logging.getLogger(__name__)

METADATA_FILE = "deepct_index.json"
TF_MODES = ("linear", "sqrt")
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


def pseudo_document(word_tfs: Mapping[str, int]) -> str:
    """The original DeepCT pseudo-document: each word repeated tf times (for checks and export)."""
    return " ".join(" ".join([word] * tf) for word, tf in word_tfs.items())


@dataclass
class IndexReport:
    documents: int = 0
    empty_documents: int = 0  # kept, but no term reached tf >= 1
    total_tf: int = 0
    seconds: float = 0.0


def write_term_frequency_index(documents: Iterable[tuple[str, Mapping[str, int], str]], out_dir: str | os.PathLike,
                               analyzer: AnalyzerSettings = DEFAULT_ANALYZER, metadata: Mapping | None = None,
                               overwrite: bool = False, total: int | None = None) -> IndexReport:
    """Index (docid, {word: tf}, raw) documents as the pseudo-document index would, atomically.

    The index is built in a temporary sibling folder and renamed into place only when complete, with
    `deepct_index.json` (settings, counts) inside; a failed or interrupted (Ctrl-C, SIGTERM) run leaves no index
    at `out_dir`. `overwrite` replaces only a DeepCT index.
    """
    from java_bridge.lucene import TermFrequencyIndexWriter

    words = WordAnalyzer(analyzer)  # starts the JVM before atomic_output takes over Ctrl-C from it
    report = IndexReport()
    start = time.time()
    with atomic_output(out_dir, overwrite, owned=lambda p: (p / METADATA_FILE).is_file()) as tmp_dir:
        writer = TermFrequencyIndexWriter(tmp_dir)
        seen: set[str] = set()
        try:
            for docid, word_tfs, raw in tqdm(documents, total=total, desc="deepct index", unit="doc"):
                check_id(docid, "corpus")
                if docid in seen:
                    raise InputError(f"duplicate docid {docid!r}")
                seen.add(docid)
                term_tfs = {t: int(tf) for t, tf in words.term_weights(word_tfs).items()}
                writer.add(docid, term_tfs, raw)
                report.documents += 1
                report.empty_documents += not term_tfs
                report.total_tf += sum(term_tfs.values())
            writer.close()
        except BaseException:
            writer.abort()
            raise
        report.seconds = time.time() - start
        if report.empty_documents:
            logger.warning("%d of %d documents have no term with tf >= 1 (empty text, only stopwords/punctuation, "
                           "or all weights round to 0); they are kept as empty documents that no query matches",
                           report.empty_documents, report.documents)
        info = {"index": "deepct", **(metadata or {}), "analyzer": asdict(analyzer), **asdict(report)}
        (tmp_dir / METADATA_FILE).write_text(json.dumps(info, indent=1))
    return report


def read_index_metadata(index_dir: str | os.PathLike) -> dict:
    path = Path(index_dir) / METADATA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{index_dir}: no {METADATA_FILE}; not a DeepCT index (or an interrupted build)")
    return json.loads(path.read_text())


def build_deepct_index(model, corpus: Mapping[str, Mapping[str, str]], out_dir: str | os.PathLike,
                       scale: float = 100.0, mode: str = "linear", analyzer: AnalyzerSettings = DEFAULT_ANALYZER,
                       batch_size: int = 64, chunk_docs: int = 256, overwrite: bool = False,
                       model_name: str | None = None) -> IndexReport:
    """Weigh every passage (title + text) with `model` (a DeepCTModel) and write the DeepCT index."""
    term_frequency(0.0, scale, mode)  # validate the mode before any model work

    def documents():
        docids = list(corpus)
        for start in range(0, len(docids), chunk_docs):
            chunk = docids[start:start + chunk_docs]
            texts = sanitize_texts((document_text(corpus[d]) for d in chunk), "corpus")
            for docid, text, weights in zip(chunk, texts, model.word_weights(texts, batch_size=batch_size)):
                yield docid, word_term_frequencies(merge_word_weights(weights), scale, mode), json.dumps(
                    {"id": docid, "contents": text}, ensure_ascii=False)

    metadata = {"model": model_name, "scale": scale, "mode": mode, "max_length": model.max_length}
    return write_term_frequency_index(documents(), out_dir, analyzer, metadata, overwrite, total=len(corpus))


def index_json_collection(collection_dir: str | os.PathLike, index_dir: str | os.PathLike, threads: int = 1,
                          extra_args: Iterable[str] = ()) -> Path:
    """A plain Lucene index with Pyserini's own indexer (default analyzer), e.g. of DeepCT pseudo-documents or
    of the original corpus for the BM25 baseline."""
    import subprocess
    import sys

    args = [sys.executable, "-m", "pyserini.index.lucene", "-collection", "JsonCollection", "-input",
            str(collection_dir), "-index", str(index_dir), "-generator", "DefaultLuceneDocumentGenerator",
            "-threads", str(threads), "-storeRaw", *extra_args]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0 or not Path(index_dir).is_dir():
        raise RuntimeError(f"pyserini.index.lucene failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return Path(index_dir)
