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

The build streams (index/streaming.py): `DeepCTIndexBuilder` weighs the corpus chunk by chunk and writes each chunk
as a Lucene index of its own, in one process (`build`, `build_deepct_index`) or on Ray actors (`build_on_ray`);
Lucene joins the parts, in corpus order, into one segment. Its settings (`DeepCTIndexSettings`) go into the index
metadata (deepct_index.json).

A document whose words all end with tf 0 (empty text, only stopwords/punctuation, or weights rounding to 0)
is kept as an empty document and counted in a warning, never silently dropped.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from pyserini_ext.data import atomic_output, check_id
from pyserini_ext.data.output import interrupts_as_exceptions
from pyserini_ext.data.text import document_text, sanitize_texts
from pyserini_ext.errors import InputError
from pyserini_ext.index.streaming import DEFAULT_CHUNK_DOCS, PART_FILE, Document, IndexBuilder, build
from pyserini_ext.models.deepct_terms import (
    DEFAULT_ANALYZER,
    AnalyzerSettings,
    TermFrequencyRule,
    WordAnalyzer,
)

logger = logging.getLogger(__name__)

METADATA_FILE = "deepct_index.json"
LUCENE_PART = "lucene"  # a part's own Lucene index, inside its part folder


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
        _warn_empty(report)
        info = {"index": "deepct", **(metadata or {}), "analyzer": asdict(analyzer), **asdict(report)}
        (tmp_dir / METADATA_FILE).write_text(json.dumps(info, indent=1))
    return report


def read_index_metadata(index_dir: str | os.PathLike) -> dict:
    path = Path(index_dir) / METADATA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{index_dir}: no {METADATA_FILE}; not a DeepCT index (or an interrupted build)")
    return json.loads(path.read_text())


@dataclass(frozen=True)
class DeepCTIndexSettings:
    """A DeepCT index build's settings (stored in deepct_index.json): the tf rule's overrides of the model's own
    `index_tf` (None: the model's), the word analyzer, the window size (None: the model's) and windows per forward
    pass."""
    scale: float | None = None
    mode: str | None = None
    merge: str | None = None
    analyzer: AnalyzerSettings = DEFAULT_ANALYZER
    max_length: int | None = None
    batch_size: int = 64

    def __post_init__(self):
        TermFrequencyRule().with_overrides(self.scale, self.mode, self.merge)  # bad values fail before any work
        if isinstance(self.analyzer, Mapping):  # read back from JSON
            object.__setattr__(self, "analyzer", AnalyzerSettings(**self.analyzer))
        if self.max_length is not None and self.max_length < 3:
            raise ValueError(f"max_length must be >= 3, got {self.max_length}")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")


class DeepCTIndexBuilder(IndexBuilder):
    """The DeepCT index as a streaming build (index/streaming.py): `write_part` weighs one chunk with the model and
    writes it as a Lucene index of its own (the part folder's `lucene/`); `finalise` joins the parts, in order, with
    Lucene's IndexWriter.addIndexes and merges them into one segment (java_bridge.lucene.merge_indexes), so the
    result is the index one piece would give: the same documents in the same Lucene docid order, the same term
    statistics and norms, the same scores. No weights are ever gathered: a part holds only its chunk's.

    `model`: a DeepCT model folder (loaded on the first part, by each Ray actor for itself), or a model object
    already loaded (`word_weights(texts, batch_size)`, `max_length`, `index_tf`; this process only). `runtime`:
    EncoderRuntime fields (backend, device, precision, ...).
    """
    kind = "deepct"

    def __init__(self, model, settings: DeepCTIndexSettings | None = None, runtime: Mapping | None = None,
                 model_name: str | None = None):
        settings = settings or DeepCTIndexSettings()
        self._loaded = None if isinstance(model, str | os.PathLike) else model
        if self._loaded is None:
            path = Path(model)
            super().__init__(str(path.resolve()) if path.exists() else str(model), settings, runtime)
            rule, max_length = _folder_rule_and_length(self.model, settings.max_length)
        else:
            super().__init__(model_name or "in-memory model", settings, runtime)
            rule = getattr(self._loaded, "index_tf", None) or TermFrequencyRule()
            max_length = self._loaded.max_length
        self.rule = rule.with_overrides(settings.scale, settings.mode, settings.merge)
        self.max_length = max_length
        self.model_name = model_name or (str(model) if self._loaded is None else self.model)  # as given, unresolved
        self._words: WordAnalyzer | None = None

    @property
    def words(self) -> WordAnalyzer:
        """The Lucene analysis of words, made (and the JVM started) on first use: never in a Ray driver, which only
        finalises (see `finalise`)."""
        return self._words or self.start_jvm()

    def start_jvm(self) -> WordAnalyzer:
        """Start the JVM now (the word analyzer), for a build in this process: before `interrupts_as_exceptions`
        takes Ctrl-C and SIGTERM over from it (started later, the JVM's own handlers end the process at once)."""
        if self._words is None:
            self._words = WordAnalyzer(self.settings.analyzer)
        return self._words

    def weigh(self, texts: list[str]) -> list[list[tuple[str, float]]]:
        """(word, weight) per word of each text, in order: the model's (the model loads on the first call)."""
        if self._loaded is None:
            from pyserini_ext.encode.deepct import RuntimeDeepCTModel
            from pyserini_ext.encode.runtime import EncoderRuntime

            self._loaded = RuntimeDeepCTModel(self.model, EncoderRuntime(**self.runtime))
            self._loaded.model.max_length = self.max_length
        return self._loaded.word_weights(texts, self.settings.batch_size)

    def write_part(self, documents: list[Document], part: Path, prepared: Path) -> dict:
        from java_bridge.lucene import TermFrequencyIndexWriter

        texts = sanitize_texts((document_text(doc) for _, doc in documents), "corpus")
        weights = self.weigh(texts)
        counts = {"empty_documents": 0, "total_tf": 0}
        writer = TermFrequencyIndexWriter(part / LUCENE_PART)
        try:
            for (docid, _), text, occurrences in zip(documents, texts, weights, strict=True):
                term_tfs = {t: int(tf) for t, tf in self.words.term_weights(
                    self.rule.term_frequencies(occurrences)).items()}
                writer.add(docid, term_tfs, json.dumps({"id": docid, "contents": text}, ensure_ascii=False))
                counts["empty_documents"] += not term_tfs
                counts["total_tf"] += sum(term_tfs.values())
            writer.close()
        except BaseException:
            writer.abort()
            raise
        return counts

    def finalise(self, parts: list[Path], output: Path, prepared: Path, overwrite: bool) -> Path:
        """Lucene merges the parts; where this process runs Ray (a driver of build_on_ray), in a process of its
        own, out of reach of the signal handlers ray.init installs over the JVM's (lucene.merge_indexes_apart)."""
        from java_bridge.lucene import merge_indexes, merge_indexes_apart

        ray = sys.modules.get("ray")
        merge = merge_indexes_apart if ray is not None and ray.is_initialized() else merge_indexes

        report = IndexReport()
        for part in parts:
            info = json.loads((part / PART_FILE).read_text())
            report.documents += info["documents"]
            report.empty_documents += info["empty_documents"]
            report.total_tf += info["total_tf"]
            report.seconds += info["seconds"]
        with atomic_output(output, overwrite, owned=self.owns) as tmp_dir:
            merge([part / LUCENE_PART for part in parts], tmp_dir, max_segments=1)
            _warn_empty(report)
            info = {"index": "deepct", "model": self.model_name, **asdict(self.rule), "max_length": self.max_length,
                    "analyzer": asdict(self.settings.analyzer), "settings": asdict(self.settings),
                    "parts": len(parts), **asdict(report)}
            (tmp_dir / METADATA_FILE).write_text(json.dumps(info, indent=1))
        return Path(output)

    def owns(self, folder: Path) -> bool:
        return (Path(folder) / METADATA_FILE).is_file()


def _folder_rule_and_length(model: str, max_length: int | None) -> tuple[TermFrequencyRule, int]:
    """A model folder's own tf rule and window size (read without loading its weights; the window capped at its
    position limit, with a warning)."""
    from pyserini_ext.errors import ModelFolderError
    from pyserini_ext.models.folder import DEEPCT, open_model_folder

    folder = open_model_folder(model, DEEPCT)
    try:
        rule = TermFrequencyRule.from_settings(folder.settings.get("index_tf"))
    except (TypeError, ValueError) as e:
        raise ModelFolderError(f"{folder.path}: unusable index_tf ({e})") from None
    length = max_length or folder.settings.get("max_length", 128)
    config = folder.path / "config.json"
    limit = json.loads(config.read_text()).get("max_position_embeddings") if config.is_file() else None
    if limit is not None and length > limit:
        logger.warning("max_length %d exceeds the model's limit of %d positions; using %d", length, limit, limit)
        length = limit
    return rule, int(length)


def _warn_empty(report: IndexReport) -> None:
    if report.empty_documents:
        logger.warning("%d of %d documents have no term with tf >= 1 (empty text, only stopwords/punctuation, "
                       "or all weights round to 0); they are kept as empty documents that no query matches",
                       report.empty_documents, report.documents)


def build_deepct_index(model, corpus: Mapping[str, Mapping[str, str]] | Iterable[Document],
                       out_dir: str | os.PathLike, rule: TermFrequencyRule | None = None,
                       analyzer: AnalyzerSettings = DEFAULT_ANALYZER, batch_size: int = 64,
                       chunk_docs: int = DEFAULT_CHUNK_DOCS, overwrite: bool = False,
                       model_name: str | None = None, total: int | None = None) -> IndexReport:
    """Weigh every passage (title + text) with `model` (a loaded DeepCTModel / RuntimeDeepCTModel, or a model
    folder) and write the DeepCT index: `DeepCTIndexBuilder` through `build`, in this process. `corpus`: a stream of
    (docid, {"title", "text"}) (e.g. data.iter_corpus) or a mapping docid -> document; `rule`: how word weights
    become tf (default: the model's `index_tf`)."""
    settings = DeepCTIndexSettings(**(asdict(rule) if rule else {}), analyzer=analyzer, batch_size=batch_size)
    builder = DeepCTIndexBuilder(model, settings, model_name=model_name)
    if isinstance(corpus, Mapping):
        total, corpus = len(corpus), corpus.items()
    builder.start_jvm()
    with interrupts_as_exceptions():
        build(builder, corpus, out_dir, chunk_docs=chunk_docs, total=total, overwrite=overwrite)
    return index_report(out_dir)


def index_report(index_dir: str | os.PathLike) -> IndexReport:
    """The counts a DeepCT index's metadata records."""
    info = read_index_metadata(index_dir)
    return IndexReport(**{k: info[k] for k in asdict(IndexReport())})
