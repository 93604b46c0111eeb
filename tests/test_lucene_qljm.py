"""QL-JM and weighted queries on a plain Pyserini index, checked against hand computations."""
from __future__ import annotations

import json
import math

import pytest

from pyserini_ext.cli.lucene import main as lucene_cli
from pyserini_ext.evaluation import read_trec_run
from pyserini_ext.index.lucene import build_lucene_index
from pyserini_ext.search.lucene import ClassicLuceneSearcher, FittedQuery, fit_query_terms

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


def test_long_query_keeps_the_terms_that_can_match(plain_index, tmp_path, caplog):
    """5,000 words whose only indexed ones come last: the absent terms go, the known ones are searched."""
    topics = tmp_path / "topics.tsv"
    topics.write_text("long\t" + " ".join(f"filler{i}" for i in range(4998)) + " cherry apple\nshort\tapple cherry\n")
    run = tmp_path / "run.txt"
    assert lucene_cli(["search", "--index", str(plain_index), "--topics", str(topics), "--output", str(run),
                       "--qljm", "--hits", "10"]) == 0
    hits = read_trec_run(run)
    assert [d for d, _ in hits["long"]] == ["d2", "d1"] and hits["long"] == hits["short"]
    assert ("query long has 5000 distinct terms, more than Lucene's clause limit of 1024: dropped 4998 absent from "
            "the index and 0 lowest-weighted; searching with 2") in caplog.text


def test_long_weighted_query_keeps_the_terms_that_can_match(plain_index, caplog):
    """The DeepCT-Query path (weights from a callable) drops the absent terms the same way."""
    searcher = ClassicLuceneSearcher(plain_index)
    long_text = " ".join(f"filler{i}" for i in range(4998)) + " apple banana"
    weigh = {long_text: {**{w: 1.0 for w in long_text.split()}, "apple": 2.0},
             "short": {"apple": 2.0, "banana": 1.0}}.__getitem__
    run = searcher.search_topics({"long": long_text, "short": "short"}, k=10, query_weights=weigh, progress=False)
    assert [d for d, _ in run["long"]] == ["d1", "d2", "d3"] and run["long"] == run["short"]
    assert "dropped 4998 absent from the index and 0 lowest-weighted; searching with 2" in caplog.text


WIDE = 1200  # distinct words of one document: more than Lucene's 1024 clauses


@pytest.fixture(scope="module")
def wide_index(tmp_path_factory):
    """w0000..w0599 in one document (rare), w0600..w1199 in two (common), zebra alone in a third."""
    root = tmp_path_factory.mktemp("wide")
    (root / "docs").mkdir()
    words = [f"w{i:04d}" for i in range(WIDE)]
    docs = {"all": " ".join(words), "half": " ".join(words[WIDE // 2:]), "z": "zebra"}
    with open(root / "docs" / "docs.jsonl", "w") as f:
        for docid, text in docs.items():
            f.write(json.dumps({"id": docid, "contents": text}) + "\n")
    return build_lucene_index(root / "docs", root / "index")


def test_past_the_clause_limit_the_heaviest_then_rarest_terms_stay(wide_index, tmp_path, caplog):
    words = [f"w{i:04d}" for i in range(WIDE)]
    text = " ".join(f"filler{i}" for i in range(3000)) + " " + " ".join(words) + " zebra zebra"
    searcher = ClassicLuceneSearcher(wide_index)
    kept = searcher.fit_weights("q", searcher.text_weights(text))
    # zebra counts twice; then weight 1 each: the 600 rare (df 1) words, then 423 of the common (df 2) ones
    assert kept == {**{w: 1.0 for w in words[:1023]}, "zebra": 2.0}
    assert "dropped 3000 absent from the index and 177 lowest-weighted; searching with 1024" in caplog.text
    topics = tmp_path / "topics.tsv"
    topics.write_text(f"long\t{text}\n")
    run = tmp_path / "run.txt"
    assert lucene_cli(["search", "--index", str(wide_index), "--topics", str(topics), "--output", str(run),
                       "--bm25", "--hits", "10"]) == 0
    hits = dict(read_trec_run(run)["long"])
    assert set(hits) == {"all", "half", "z"}
    assert hits["z"] == pytest.approx(dict(searcher.search_weighted({"zebra": 2.0}, 10))["z"], abs=SCORE_TOLERANCE)
    common_kept = dict(searcher.search_weighted(dict.fromkeys(words[600:1023], 1.0), 10))
    assert hits["half"] == pytest.approx(common_kept["half"], abs=SCORE_TOLERANCE)


def test_fit_query_terms_order():
    frequencies = {"a": 3, "b": 1, "c": 1, "d": 0, "e": 5}
    weights = {"e": 1.0, "d": 9.0, "c": 1.0, "b": 1.0, "a": 2.0}
    fitted = fit_query_terms(weights, lambda terms: {t: frequencies[t] for t in terms}, 3)
    assert fitted == FittedQuery({"c": 1.0, "b": 1.0, "a": 2.0}, absent=1, past_limit=1)
    assert fit_query_terms(weights, None, 5) == FittedQuery(weights)  # within the limit: no lookup, nothing dropped
