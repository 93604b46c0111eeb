"""Raw Lucene/Anserini calls through pyjnius that Pyserini 1.6 does not expose. Nothing model-specific.

* similarities (Jelinek-Mercer query likelihood, BM25) set on an Anserini `SimpleSearcher`;
* weighted bag-of-words queries (a BooleanQuery of boosted TermQuerys), and the analysis and document
  frequencies a searcher needs to fit a long query to Lucene's clause limit;
* an IndexWriter that indexes documents given as {term: term frequency}.

Why the writer looks the way it does (no `javac` here, so no Java subclass of TokenStream is possible):
Lucene's `DelimitedTermFrequencyTokenFilter` turns a token `term|7` into the term `term` with the custom
term frequency 7, and Lucene's indexing chain adds that frequency (not 1) to the field length that goes into
the norm. So the document `a|3 b|2` gets tf(a) = 3, tf(b) = 2 and length 5: exactly what the pseudo-document
`a a a b b` would get, while indexing one token per distinct term. Lucene forbids positions with custom
frequencies, so the field is indexed with DOCS_AND_FREQS (bag-of-words queries only; phrase queries on such
a field fail).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from java_bridge import autoclass

CONTENTS_FIELD = "contents"  # Anserini's IndexArgs.CONTENTS: what LuceneSearcher searches
ID_FIELD = "id"  # Anserini's IndexArgs.ID
RAW_FIELD = "raw"  # Anserini's IndexArgs.RAW: what LuceneSearcher.doc(...).raw() returns
TF_DELIMITER = "|"
# pyjnius picks Field(String, BytesRef, type) for a Python str unless told the CharSequence constructor
_FIELD_FROM_TEXT = "(Ljava/lang/String;Ljava/lang/CharSequence;Lorg/apache/lucene/index/IndexableFieldType;)V"


def jelinek_mercer_similarity(lambda_: float):
    """Lucene's LMJelinekMercerSimilarity: log(1 + (1-λ) tf/|d| / (λ P(t|C))) per query term."""
    if not 0.0 < lambda_ <= 1.0:
        raise ValueError(f"Jelinek-Mercer lambda must be in (0, 1], got {lambda_}")
    return autoclass("org.apache.lucene.search.similarities.LMJelinekMercerSimilarity")(float(lambda_))


def bm25_similarity(k1: float, b: float):
    if k1 < 0 or not 0.0 <= b <= 1.0:
        raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
    return autoclass("org.apache.lucene.search.similarities.BM25Similarity")(float(k1), float(b))


def set_searcher_similarity(simple_searcher, similarity) -> None:
    """Make an `io.anserini.search.SimpleSearcher` score with `similarity`.

    SimpleSearcher only offers BM25 and Dirichlet QL setters. Its protected field `similarity` is written
    through commons-lang3 FieldUtils (assigning it through pyjnius directly crashes the JVM), and its cached
    IndexSearcher (`searcher`) is cleared so the next search builds a new one with the new similarity.
    """
    field_utils = autoclass("org.apache.commons.lang3.reflect.FieldUtils")
    field_utils.writeField(simple_searcher, "similarity", similarity, True)
    field_utils.writeField(simple_searcher, "searcher", None, True)


def max_query_terms() -> int:
    """Lucene's limit on the clauses of one BooleanQuery: a bag-of-words query has one clause per distinct term."""
    return autoclass("org.apache.lucene.search.BooleanQuery").getMaxClauseCount()


def searcher_index_reader(simple_searcher):
    """The IndexReader of an `io.anserini.search.SimpleSearcher` (a protected field: read like the similarity)."""
    return autoclass("org.apache.commons.lang3.reflect.FieldUtils").readField(simple_searcher, "reader", True)


def document_frequencies(index_reader, terms: Iterable[str], field: str = CONTENTS_FIELD) -> dict[str, int]:
    """{term: number of documents whose `field` holds it}; 0 for a term absent from the index."""
    term_cls = autoclass("org.apache.lucene.index.Term")
    return {term: index_reader.docFreq(term_cls(field, term)) for term in terms}


def analyze_text(analyzer, text: str) -> list[str]:
    """`text` as Anserini's query generator sees it: the analyzer's terms, repeats kept (AnalyzerUtils.analyze)."""
    return list(autoclass("io.anserini.analysis.AnalyzerUtils").analyze(analyzer, text).toArray())


def weighted_terms_query(weights: Mapping[str, float], field: str = CONTENTS_FIELD):
    """BooleanQuery of SHOULD clauses `BoostQuery(TermQuery(field:term), weight)`; terms must be analyzed.

    Non-positive weights are rejected: Lucene forbids negative boosts and a zero boost only adds noise. With
    weight = the term's count in the query this is the query Anserini's BagOfWordsQueryGenerator builds from text.
    """
    if not weights:
        raise ValueError("weighted query needs at least one term")
    bad = {t: w for t, w in weights.items() if not w > 0}
    if bad:
        raise ValueError(f"query term weights must be > 0, got {bad}")
    term_cls = autoclass("org.apache.lucene.index.Term")
    term_query = autoclass("org.apache.lucene.search.TermQuery")
    boost_query = autoclass("org.apache.lucene.search.BoostQuery")
    should = autoclass("org.apache.lucene.search.BooleanClause$Occur").SHOULD
    boolean_query = autoclass("org.apache.lucene.search.BooleanQuery")
    if len(weights) > boolean_query.getMaxClauseCount():
        raise ValueError(f"{len(weights)} query terms exceed Lucene's clause limit {boolean_query.getMaxClauseCount()}")
    builder = autoclass("org.apache.lucene.search.BooleanQuery$Builder")()
    for term, weight in weights.items():
        builder.add(boost_query(term_query(term_cls(field, term)), float(weight)), should)
    return builder.build()


class TermFrequencyIndexWriter:
    """Writes a Lucene index whose documents are {term: tf}; length of a document = sum of its tf.

    Terms are written as given (already analyzed by the caller). The documents carry Anserini's `id` field
    (stored + binary doc values, which Anserini's searchers use to break score ties) and a stored `raw` field,
    so `LuceneSearcher`, `LuceneIndexReader` and `python -m pyserini.search.lucene` work on the result.
    """

    def __init__(self, index_dir: str | os.PathLike, ram_buffer_mb: float = 256.0):
        self._string_field = autoclass("org.apache.lucene.document.StringField")
        self._stored_field = autoclass("org.apache.lucene.document.StoredField")
        self._binary_dv_field = autoclass("org.apache.lucene.document.BinaryDocValuesField")
        self._field = autoclass("org.apache.lucene.document.Field")
        self._bytes_ref = autoclass("org.apache.lucene.util.BytesRef")
        self._document = autoclass("org.apache.lucene.document.Document")
        self._store_yes = autoclass("org.apache.lucene.document.Field$Store").YES

        field_type = autoclass("org.apache.lucene.document.FieldType")()
        field_type.setTokenized(True)
        field_type.setStored(False)
        field_type.setOmitNorms(False)  # the norm carries the document length (sum of tf)
        field_type.setIndexOptions(autoclass("org.apache.lucene.index.IndexOptions").DOCS_AND_FREQS)
        field_type.freeze()
        self._contents_type = field_type

        hash_map = autoclass("java.util.HashMap")
        filter_params = hash_map()
        filter_params.put("delimiter", TF_DELIMITER)
        analyzer = (autoclass("org.apache.lucene.analysis.custom.CustomAnalyzer").builder()
                    .withTokenizer("whitespace", hash_map())
                    .addTokenFilter("delimitedTermFrequency", filter_params)
                    .build())
        config = autoclass("org.apache.lucene.index.IndexWriterConfig")(analyzer)
        config.setOpenMode(autoclass("org.apache.lucene.index.IndexWriterConfig$OpenMode").CREATE)
        config.setRAMBufferSizeMB(float(ram_buffer_mb))
        path = autoclass("java.io.File")(str(index_dir)).toPath()
        directory = autoclass("org.apache.lucene.store.FSDirectory").open(path)
        self._writer = autoclass("org.apache.lucene.index.IndexWriter")(directory, config)
        self._directory = directory

    def add(self, docid: str, term_frequencies: Mapping[str, int], raw: str = "") -> None:
        """Add one document; a document without terms is kept (length 0, found by no query)."""
        tokens = []
        for term, tf in term_frequencies.items():
            if not term or any(c.isspace() for c in term) or TF_DELIMITER in term:
                raise ValueError(f"document {docid!r}: term {term!r} is empty or contains whitespace or "
                                 f"{TF_DELIMITER!r}")
            if int(tf) != tf or tf < 1:
                raise ValueError(f"document {docid!r}: term frequency of {term!r} must be a positive integer, "
                                 f"got {tf!r}")
            tokens.append(f"{term}{TF_DELIMITER}{int(tf)}")
        doc = self._document()
        doc.add(self._string_field(ID_FIELD, docid, self._store_yes))
        doc.add(self._binary_dv_field(ID_FIELD, self._bytes_ref(docid.encode("utf-8"))))
        doc.add(self._field(CONTENTS_FIELD, " ".join(tokens), self._contents_type,
                            signature=_FIELD_FROM_TEXT))
        doc.add(self._stored_field(RAW_FIELD, raw))
        self._writer.addDocument(doc)

    def close(self) -> None:
        self._writer.commit()
        self._writer.close()
        self._directory.close()

    def abort(self) -> None:
        """Close without committing (nothing loadable is left behind)."""
        self._writer.rollback()
        self._directory.close()


def merge_indexes(parts: list[str | os.PathLike], output: str | os.PathLike, max_segments: int | None = 1,
                  merge_factor: int = 10) -> None:
    """Join the Lucene indexes `parts`, in that order, into a new index at `output` (an empty or absent folder).

    Documents keep the parts' order (Lucene docids follow it): IndexWriter.addIndexes copies the parts' segments
    in order, and a LogDocMergePolicy only ever merges adjacent segments, into the place of the first (a
    TieredMergePolicy may merge non-adjacent ones, or, in forceMerge, order them by size). `max_segments`: then
    forceMerge down to that many segments (None: keep the parts' segments). Every file is read through
    NIOFSDirectory, never memory-mapped, and merges run one at a time over at most `merge_factor` segments, so the
    memory this needs does not grow with the index.
    """
    if not parts:
        raise ValueError("merge_indexes needs at least one part")
    path_of = autoclass("java.io.File")  # starts the JVM with Anserini's classpath, which importing jnius would not
    from jnius import cast

    nio = autoclass("org.apache.lucene.store.NIOFSDirectory")
    policy = autoclass("org.apache.lucene.index.LogDocMergePolicy")()
    policy.setMergeFactor(max(2, int(merge_factor)))
    config = autoclass("org.apache.lucene.index.IndexWriterConfig")()
    config.setOpenMode(autoclass("org.apache.lucene.index.IndexWriterConfig$OpenMode").CREATE)
    config.setMergePolicy(policy)
    config.setMergeScheduler(autoclass("org.apache.lucene.index.SerialMergeScheduler")())
    directory = nio(path_of(str(output)).toPath())
    # cast: pyjnius matches a list against Directory[] only when its items are typed as Directory
    sources = [cast("org.apache.lucene.store.Directory", nio(path_of(str(p)).toPath())) for p in parts]
    writer = autoclass("org.apache.lucene.index.IndexWriter")(directory, config)
    try:
        writer.addIndexes(*sources)
        if max_segments is not None:
            writer.forceMerge(int(max_segments))
        writer.commit()
        writer.close()
    except BaseException:
        writer.rollback()
        raise
    finally:
        for source in sources:
            source.close()
        directory.close()


def merge_indexes_apart(parts: list[str | os.PathLike], output: str | os.PathLike,
                        max_segments: int | None = 1) -> None:
    """`merge_indexes` in a Python process of its own, whose JVM no other library's signal handlers reach.

    For a process that runs Ray: ray.init installs handlers for SIGSEGV and its kin (Abseil's failure handler,
    Python's faulthandler) over those of a JVM started before it, and the JVM uses SIGSEGV in normal operation
    (implicit null checks, safepoints), so its first such signal then ends the process.
    """
    import subprocess
    import sys

    command = [sys.executable, "-m", "java_bridge.lucene", str(output), str(max_segments or 0), *map(str, parts)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"merging {len(parts)} Lucene indexes into {output} failed (exit code {done.returncode}): "
                           f"{done.stderr.strip()[-2000:]}")


if __name__ == "__main__":  # merge_indexes_apart's child: OUTPUT MAX_SEGMENTS (0: no forceMerge) PART...
    import sys

    merge_indexes(sys.argv[3:], sys.argv[1], int(sys.argv[2]) or None)
