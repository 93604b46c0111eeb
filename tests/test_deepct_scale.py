"""The streaming DeepCT build (index/deepct.py's DeepCTIndexBuilder) through the real model, JVM and Lucene: built in
chunks, it is the index one piece gives (same Lucene docids, postings, statistics, BM25 hits and tie order); an
interrupted build leaves nothing that opens and resumes to the same index; the CLI writes it in parts too, and
the unchanged `python -m pyserini.search.lucene --bm25` searches it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyserini_ext.data import document_text
from pyserini_ext.data.text import sanitize_texts
from pyserini_ext.evaluation import read_trec_run
from pyserini_ext.index.deepct import (
    DeepCTIndexBuilder,
    DeepCTIndexSettings,
    build_deepct_index,
    read_index_metadata,
    write_term_frequency_index,
)
from pyserini_ext.index.streaming import build, work_folder

MODEL = Path(__file__).resolve().parents[1] / "resources" / "models" / "deepct-splade-tiny"
# one window per forward pass: a window's weights then do not depend on which others share its batch (padding
# changes float rounding), so builds cut into other chunks must give the very same tf
ONE_BY_ONE = DeepCTIndexSettings(batch_size=1)
QUERIES = ["insulin resistance in obese mice", "stem cell differentiation", "vitamin D bone density",
           "protein folding", "tumour growth and p53", "xylophonic"]


@pytest.fixture(scope="module")
def corpus(scifact) -> dict[str, dict[str, str]]:
    """40 SciFact passages, an empty one, and two copies of one text far apart (a one-term query ties them)."""
    docids = sorted(scifact.corpus)[:40]
    docs = {d: scifact.corpus[d] for d in docids[:20]}
    docs["twin-b"] = {"title": "", "text": "xylophonic insulin resistance"}
    docs["empty"] = {"title": "", "text": ""}
    docs.update({d: scifact.corpus[d] for d in docids[20:]})
    docs["twin-a"] = dict(docs["twin-b"])
    return docs


def index_contents(index: Path) -> dict:
    """Everything a DeepCT index holds that search sees: the Lucene docid order, each document's {term: tf} (from
    the postings: the index stores no document vectors), the statistics, and BM25 hits with scores, in order."""
    from pyserini.index.lucene import LuceneIndexReader
    from pyserini.search.lucene import LuceneSearcher

    reader = LuceneIndexReader(str(index))
    docids = [reader.convert_internal_docid_to_collection_docid(i) for i in range(reader.stats()["documents"])]
    vectors: dict[str, dict[str, int]] = {d: {} for d in docids}
    for term in reader.terms():
        for posting in reader.get_postings_list(term.term, analyzer=None):
            vectors[docids[posting.docid]][term.term] = posting.tf
    searcher = LuceneSearcher(str(index))
    hits = {q: [(h.docid, h.score) for h in searcher.search(q, 30)] for q in QUERIES}
    searcher.close()
    return {"docids": docids, "vectors": vectors, "stats": reader.stats(), "hits": hits}


@pytest.fixture(scope="module")
def one_piece(untrained_deepct, corpus, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("one") / "index"
    build_deepct_index(untrained_deepct, corpus, out, chunk_docs=len(corpus), batch_size=1)
    return out, index_contents(out)


def test_chunked_build_is_the_one_piece_index(untrained_deepct, corpus, one_piece, tmp_path):
    out, expected = one_piece
    assert read_index_metadata(out)["parts"] == 1
    chunked = build_deepct_index(untrained_deepct, iter(corpus.items()), tmp_path / "chunked", chunk_docs=6,
                                 batch_size=1)
    got = index_contents(tmp_path / "chunked")
    assert read_index_metadata(tmp_path / "chunked")["parts"] == 8
    assert (chunked.documents, chunked.empty_documents) == (len(corpus), 1)
    assert got == expected
    assert expected["docids"] == list(corpus)  # Lucene docids follow the stream
    assert not work_folder(tmp_path / "chunked").exists()
    # the twins tie (same tf and length), and come in the one-piece order: Anserini breaks ties by the docid string,
    # so twin-a (the later Lucene docid) comes first (its tie adjuster rounds scores to 4 places, then steps 1e-6)
    (first, first_score), (second, second_score) = got["hits"]["xylophonic"]
    assert (first, second) == ("twin-a", "twin-b") and round(first_score, 4) == round(second_score, 4) > 0

    # the index one Lucene writer gives from the same term frequencies (the pre-streaming build)
    rule = untrained_deepct.index_tf
    texts = sanitize_texts((document_text(doc) for doc in corpus.values()), "corpus")
    weights = untrained_deepct.word_weights(texts, batch_size=1)
    write_term_frequency_index(((d, rule.term_frequencies(w), "") for d, w in zip(corpus, weights)),
                               tmp_path / "single-writer")
    single = index_contents(tmp_path / "single-writer")
    assert {k: single[k] for k in ("docids", "vectors", "stats")} == {k: got[k] for k in ("docids", "vectors", "stats")}
    assert single["hits"] == got["hits"]


class FailingBuilder(DeepCTIndexBuilder):
    """Fails on its second chunk, once, and counts the chunks it writes."""
    written: list[str] = []
    fail = True

    def write_part(self, documents, part, prepared):
        FailingBuilder.written.append(documents[0][0])
        if FailingBuilder.fail and len(FailingBuilder.written) == 2:
            raise RuntimeError("disk full")
        return super().write_part(documents, part, prepared)


def test_interrupted_build_leaves_nothing_that_opens_and_resumes(untrained_deepct, corpus, one_piece, tmp_path):
    from pyserini.search.lucene import LuceneSearcher

    out = tmp_path / "index"
    docs = list(corpus.items())
    with pytest.raises(RuntimeError, match="disk full"):
        build(FailingBuilder(untrained_deepct, ONE_BY_ONE), iter(docs), out, chunk_docs=10, progress=False)
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["index.building"]
    with pytest.raises(FileNotFoundError):
        read_index_metadata(work_folder(out))
    with pytest.raises(Exception, match="(?i)no segments|not found|does not exist"):
        LuceneSearcher(str(work_folder(out)))
    FailingBuilder.fail, FailingBuilder.written = False, []
    build(FailingBuilder(untrained_deepct, ONE_BY_ONE), iter(docs), out, chunk_docs=10, progress=False)
    assert FailingBuilder.written == [docs[10][0], docs[20][0], docs[30][0], docs[40][0]]  # chunk 1 was kept
    assert index_contents(out) == one_piece[1]
    assert not work_folder(out).exists()


def test_settings_go_into_the_metadata_and_bad_ones_fail_first(tmp_path):
    with pytest.raises(ValueError, match="unknown tf mode"):
        DeepCTIndexSettings(mode="cube")
    with pytest.raises(ValueError, match="batch size"):
        DeepCTIndexSettings(batch_size=0)
    settings = DeepCTIndexSettings(scale=50.0, max_length=9999, batch_size=8)
    builder = DeepCTIndexBuilder(MODEL, settings)
    assert builder.max_length == 512  # capped at the model's position limit
    assert (builder.rule.scale, builder.rule.mode, builder.rule.merge) == (50.0, "sqrt", "sum")  # the model's rest
    docs = [("a", {"title": "Insulin", "text": "insulin resistance in mice"}), ("b", {"title": "", "text": "bone"})]
    build(builder, docs, tmp_path / "index", chunk_docs=1, progress=False)
    info = read_index_metadata(tmp_path / "index")
    assert DeepCTIndexSettings(**info["settings"]) == settings
    assert (info["scale"], info["mode"], info["max_length"], info["documents"]) == (50.0, "sqrt", 512, 2)


def test_cli_builds_in_parts_and_pyserini_searches_it(corpus, tmp_path):
    from pyserini.search.lucene import LuceneSearcher

    from pyserini_ext.cli.deepct import main as deepct_cli

    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": d, **doc}) + "\n" for d, doc in corpus.items()))
    assert deepct_cli(["index", "--model", str(MODEL), "--corpus", str(path), "--output", str(tmp_path / "cli"),
                       "--chunk-docs", "16", "--batch-size", "1"]) == 0
    info = read_index_metadata(tmp_path / "cli")
    assert (info["parts"], info["documents"], info["model"]) == (3, len(corpus), str(MODEL))
    build_deepct_index(MODEL, iter(corpus.items()), tmp_path / "api", chunk_docs=len(corpus), batch_size=1)
    assert index_contents(tmp_path / "cli") == index_contents(tmp_path / "api")

    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"q{i}\t{q}\n" for i, q in enumerate(QUERIES)))
    run = tmp_path / "run.txt"
    subprocess.run([sys.executable, "-m", "pyserini.search.lucene", "--index", str(tmp_path / "cli"), "--topics",
                    str(topics), "--output", str(run), "--bm25", "--hits", "10"], check=True, capture_output=True)
    searcher = LuceneSearcher(str(tmp_path / "api"))
    for i, query in enumerate(QUERIES):
        expected = [(h.docid, round(h.score, 4)) for h in searcher.search(query, 10)]
        assert expected and [(d, round(s, 4)) for d, s in read_trec_run(run)[f"q{i}"]] == expected
