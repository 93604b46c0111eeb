"""QL-JM and weighted queries on a plain Pyserini index, checked against hand computations."""
from __future__ import annotations

import json
import math

import pytest

from pyserini_ext.cli.lucene import main as lucene_cli
from pyserini_ext.evaluation import read_trec_run
from pyserini_ext.index.lucene import build_lucene_index
from pyserini_ext.search.lucene import ClassicLuceneSearcher

# stopword-free, stem-stable words so the hand computation sees the indexed terms as written
SCORE_TOLERANCE = 1.5e-4  # Anserini's SimpleSearcher rounds scores to 4 decimals
DOCS = {"d1": "apple apple banana", "d2": "apple cherry cherry cherry", "d3": "banana date"}


@pytest.fixture(scope="module")
def plain_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("qljm")
    (root / "docs").mkdir()
    with open(root / "docs" / "docs.jsonl", "w") as f:
        for docid, text in DOCS.items():
            f.write(json.dumps({"id": docid, "contents": text}) + "\n")
    return build_lucene_index(root / "docs", root / "index")


def jm_by_hand(query: list[str], doc: list[str], lambda_: float) -> float:
    """Lucene's LMJelinekMercerSimilarity: sum_t log(1 + (1-λ) tf/|d| / (λ (ttf(t)+1)/(|C|+1)))."""
    collection = [w for text in DOCS.values() for w in text.split()]
    score = 0.0
    for term in query:
        tf = doc.count(term)
        if tf:
            p_collection = (collection.count(term) + 1) / (len(collection) + 1)
            score += math.log(1 + (1 - lambda_) * tf / len(doc) / (lambda_ * p_collection))
    return score


@pytest.mark.parametrize("lambda_", [0.1, 0.7])
def test_qljm_scores_match_hand_computation(plain_index, lambda_):
    searcher = ClassicLuceneSearcher(plain_index)
    searcher.set_qljm(lambda_)
    hits = {h.docid: h.score for h in searcher.search("apple cherry", 10)}
    expected = {d: jm_by_hand(["apple", "cherry"], t.split(), lambda_) for d, t in DOCS.items()}
    assert set(hits) == {"d1", "d2"}
    for docid, score in hits.items():
        assert score == pytest.approx(expected[docid], abs=SCORE_TOLERANCE)
    searcher.set_bm25(0.9, 0.4)  # switching back leaves a working BM25 searcher
    assert searcher.search("apple cherry", 10)[0].score != pytest.approx(hits["d2"])


def test_weighted_query_is_boosted_sum_of_term_scores(plain_index):
    searcher = ClassicLuceneSearcher(plain_index)
    searcher.set_bm25(1.2, 0.75)
    single = {t: {h.docid: h.score for h in searcher.search(t, 10)} for t in ("apple", "banana")}
    weighted = dict(searcher.search_weighted(searcher.analyze_weights({"Apples": 2.0, "banana": 0.5}), 10))
    for docid in ("d1", "d2", "d3"):
        expected = 2.0 * single["apple"].get(docid, 0.0) + 0.5 * single["banana"].get(docid, 0.0)
        assert weighted[docid] == pytest.approx(expected, abs=SCORE_TOLERANCE)
    assert searcher.analyze_weights({"the": 1.0, "zebra": 0.0}) == {}
    assert searcher.search_weighted({}, 10) == []
    assert searcher.search_weighted({"unknownterm": 1.0}, 10) == []


def test_bad_parameters_are_rejected(plain_index, tmp_path):
    searcher = ClassicLuceneSearcher(plain_index)
    with pytest.raises(ValueError, match="lambda"):
        searcher.set_qljm(0.0)
    with pytest.raises(ValueError, match="k1"):
        searcher.set_bm25(-1.0, 0.4)
    with pytest.raises(FileNotFoundError):
        ClassicLuceneSearcher(tmp_path / "missing")


def test_cli_writes_qljm_run(plain_index, tmp_path):
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tapple cherry\nq2\tthe of\n")
    run = tmp_path / "run.txt"
    assert lucene_cli(["search", "--index", str(plain_index), "--topics", str(topics), "--output", str(run),
                       "--qljm", "--lambda", "0.1", "--hits", "10"]) == 0
    hits = read_trec_run(run)
    assert [d for d, _ in hits["q1"]] == ["d2", "d1"]
    expected = jm_by_hand(["apple", "cherry"], DOCS["d2"].split(), 0.1)
    assert hits["q1"][0][1] == pytest.approx(expected, abs=SCORE_TOLERANCE)
    assert "q2" not in hits  # stopword-only query: no hits (and a warning), not an error


def test_query_beyond_lucenes_clause_limit_is_cut_with_a_warning(plain_index, tmp_path, caplog):
    """A 5,000-word query would fail the whole batch inside Anserini; it is cut to the clause limit instead."""
    topics = tmp_path / "topics.tsv"
    topics.write_text("long\tcherry apple " + " ".join(f"filler{i}" for i in range(4998)) + "\nshort\tapple cherry\n")
    run = tmp_path / "run.txt"
    assert lucene_cli(["search", "--index", str(plain_index), "--topics", str(topics), "--output", str(run),
                       "--qljm", "--hits", "10"]) == 0
    hits = read_trec_run(run)
    assert hits["long"] == hits["short"]  # the fillers match nothing; the first 1024 terms keep cherry and apple
    assert "query long has more than 1024 distinct terms" in caplog.text and "first 1024 of 5000 words" in caplog.text
    searcher = ClassicLuceneSearcher(plain_index)
    heavy = searcher.fit_weighted_query("q", {f"t{i:04d}": float(i) for i in range(2000)})
    assert len(heavy) == 1024 and min(heavy.values()) == 2000 - 1024
