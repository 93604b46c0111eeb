"""DeepCT-Index: the ONE place where DeepCT weights become integer term frequencies in a Lucene index.

The word rules (first-piece weight, merging, weight -> tf, word analysis) are DeepCT's own and live in
models/deepct_terms.py. The original DeepCT wrote each word tf times into a pseudo-document and indexed it
with Anserini's default analyzer. We index exactly what that pseudo-document would give, without writing it
out: each word is run through the same Lucene analyzer (default: Anserini's English analyzer, Porter stemming,
Lucene's English stopwords removed; `stemmer` / `keep_stopwords` change it), words that analyze to the same
term add their tf (as repeated tokens would), and each term is indexed once with its tf as a custom term
frequency, so the document length in the norm is the sum of the tf (see java_bridge/lucene.py). BM25 and query
likelihood therefore score it exactly like the pseudo-document index (tested), and the result is an ordinary
Lucene index for `python -m pyserini.search.lucene --bm25`. That command always analyzes queries with the
default analyzer; an index built with other analyzer settings is searched with `pyserini-ext lucene search`,
which reads them from the index metadata.

A document whose words all end with tf 0 (empty text, only stopwords/punctuation, or weights rounding to 0)
is kept as an empty document and counted in a warning, never silently dropped.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from pyserini_ext.data import atomic_output, check_id
from pyserini_ext.data.text import document_text, sanitize_texts
from pyserini_ext.errors import InputError
from pyserini_ext.models.deepct_terms import (
    DEFAULT_ANALYZER,
    AnalyzerSettings,
    TermFrequencyRule,
    WordAnalyzer,
)

logger = logging.getLogger(__name__)

METADATA_FILE = "deepct_index.json"


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
                       rule: TermFrequencyRule | None = None, analyzer: AnalyzerSettings = DEFAULT_ANALYZER,
                       batch_size: int = 64, chunk_docs: int = 256, overwrite: bool = False,
                       model_name: str | None = None) -> IndexReport:
    """Weigh every passage (title + text) with `model` (a DeepCTModel) and write the DeepCT index; `rule`: how
    word weights become tf (default: the model's `index_tf`)."""
    rule = rule or model.index_tf

    def documents():
        docids = list(corpus)
        for start in range(0, len(docids), chunk_docs):
            chunk = docids[start:start + chunk_docs]
            texts = sanitize_texts((document_text(corpus[d]) for d in chunk), "corpus")
            for docid, text, weights in zip(chunk, texts, model.word_weights(texts, batch_size=batch_size)):
                yield docid, rule.term_frequencies(weights), json.dumps(
                    {"id": docid, "contents": text}, ensure_ascii=False)

    metadata = {"model": model_name, **asdict(rule), "max_length": model.max_length}
    return write_term_frequency_index(documents(), out_dir, analyzer, metadata, overwrite, total=len(corpus))

