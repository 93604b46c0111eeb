"""DeepCT-Index through the real JVM/Lucene: equal scores with the pseudo-document index, bad input,
DeepCT-Query and the `deepct` impact-searcher encoder, and an end-to-end train -> index -> search -> eval run."""
from __future__ import annotations

import json
import logging
import random
import subprocess
import sys

import pytest

from pyserini_ext.data import document_text, write_topics, write_trec_qrels
from pyserini_ext.encode.deepct import DeepCTQueryEncoder, DeepCTQueryWeigher
from pyserini_ext.errors import ModelFolderError
from pyserini_ext.evaluation import evaluate, read_trec_run, write_trec_run
from pyserini_ext.index.deepct import (
    build_deepct_index,
    read_index_metadata,
    write_term_frequency_index,
)
from pyserini_ext.index.lucene import build_lucene_index
from pyserini_ext.models.backbones import backbone_path
from pyserini_ext.models.deepct import DeepCTModel
from pyserini_ext.models.deepct_terms import (
    AnalyzerSettings,
    TermFrequencyRule,
    merge_word_weights,
    pseudo_document,
    term_frequency,
    word_term_frequencies,
)
from pyserini_ext.search.lucene import ClassicLuceneSearcher
from pyserini_ext.train.data import LabelledData
from pyserini_ext.train.deepct import DeepCTModelConfig, train_deepct
from pyserini_ext.train.loop import TrainConfig, set_seed


@pytest.fixture(scope="module")
def small_corpus(scifact):
    docids = sorted(scifact.corpus)[:60]
    return {d: scifact.corpus[d] for d in docids}


@pytest.fixture(scope="module")
def word_tfs(untrained_deepct, small_corpus):
    texts = [document_text(small_corpus[d]) for d in small_corpus]
    weights = untrained_deepct.word_weights(texts)
    return {d: word_term_frequencies(merge_word_weights(w)) for d, w in zip(small_corpus, weights)}


@pytest.fixture(scope="module")
def twin_indexes(word_tfs, tmp_path_factory):
    """The DeepCT index, and Pyserini's own index of the pseudo-documents (each word repeated tf times)."""
    root = tmp_path_factory.mktemp("twins")
    (root / "pseudo").mkdir()
    with open(root / "pseudo" / "docs.jsonl", "w") as f:
        for docid, tfs in word_tfs.items():
            f.write(json.dumps({"id": docid, "contents": pseudo_document(tfs)}) + "\n")
    pseudo = build_lucene_index(root / "pseudo", root / "index.pseudo")
    write_term_frequency_index(((d, tfs, "") for d, tfs in word_tfs.items()), root / "index.deepct")
    return root / "index.deepct", pseudo


@pytest.mark.parametrize("model", [("bm25", 0.9, 0.4), ("bm25", 10.0, 0.9), ("qljm", 0.1), ("qljm", 0.7),
                                   ("qld", 1000.0)])
def test_scores_equal_pseudo_document_index(twin_indexes, scifact, model):
    deepct_index, pseudo_index = twin_indexes
    searchers = [ClassicLuceneSearcher(deepct_index), ClassicLuceneSearcher(pseudo_index)]
    for searcher in searchers:
        getattr(searcher, f"set_{model[0]}")(*model[1:])
    queries = list(scifact.split_queries("test").values())[:15]
    compared = 0
    for query in queries:
        ours, theirs = ([(h.docid, h.score) for h in s.search(query, 100)] for s in searchers)
        assert dict(ours) == pytest.approx(dict(theirs), abs=1e-6), query
        compared += len(ours)
    assert compared > 100  # the queries really match documents


def test_index_statistics_equal_pseudo_document_index(twin_indexes, word_tfs):
    from pyserini.index.lucene import LuceneIndexReader

    stats = [LuceneIndexReader(str(i)).stats() for i in twin_indexes]
    assert stats[0] == stats[1]
    assert stats[0]["documents"] == len(word_tfs)
    assert read_index_metadata(twin_indexes[0])["total_tf"] == stats[0]["total_terms"]


def test_bad_documents_are_kept_and_counted(untrained_deepct, tmp_path, caplog):
    corpus = {"empty": {"title": "", "text": ""}, "stop": {"title": "", "text": "the of and , . !"},
              "ok": {"title": "Insulin", "text": "insulin resistance in mice"}}
    with caplog.at_level(logging.WARNING):
        report = build_deepct_index(untrained_deepct, corpus, tmp_path / "idx")
    assert (report.documents, report.empty_documents) == (3, 2)
    assert "2 of 3 documents have no term with tf >= 1" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # every weight rounds to 0
        report = build_deepct_index(untrained_deepct, corpus, tmp_path / "idx0", TermFrequencyRule(scale=0.001))
    assert (report.documents, report.empty_documents) == (3, 3)
    assert "3 of 3 documents" in caplog.text
    searcher = ClassicLuceneSearcher(tmp_path / "idx0")
    assert searcher.num_docs == 3 and searcher.doc("empty") is not None and searcher.search("insulin") == []
    with pytest.raises(FileExistsError):
        build_deepct_index(untrained_deepct, corpus, tmp_path / "idx")
    with pytest.raises(ValueError, match="unknown tf mode"):
        build_deepct_index(untrained_deepct, corpus, tmp_path / "bad", TermFrequencyRule(mode="cube"))
    assert not (tmp_path / "bad").exists()


def test_index_follows_the_models_tf_rule(untrained_deepct, tmp_path):
    """A model folder names its index's tf rule (deepct_config.json `index_tf`); the index uses it unless told
    otherwise, records it, and with merge "sum" a repeated word's tf is the sum over its occurrences."""
    from pyserini.index.lucene import LuceneIndexReader

    rule = TermFrequencyRule(scale=1000.0, mode="sqrt", merge="sum")
    model = untrained_deepct
    folder = DeepCTModel(model.encoder, model.tokenizer, model.max_length, rule).save_pretrained(tmp_path / "model")
    model = DeepCTModel.from_pretrained(folder)
    assert model.index_tf == rule
    text = "insulin resistance: insulin and insulin receptors"
    occurrences = [w for word, w in model.word_weights([text])[0] if word == "insulin"]
    assert len(occurrences) == 3 and len(set(occurrences)) == 3  # context gives each occurrence its own weight
    corpus = {"d": {"title": "", "text": text}}
    build_deepct_index(model, corpus, tmp_path / "sum")
    build_deepct_index(model, corpus, tmp_path / "max", model.index_tf.with_overrides(merge="max"))
    assert {k: read_index_metadata(tmp_path / "sum")[k] for k in ("scale", "mode", "merge")} == \
        {"scale": 1000.0, "mode": "sqrt", "merge": "sum"}
    assert read_index_metadata(tmp_path / "max")["merge"] == "max"
    tf = {name: LuceneIndexReader(str(tmp_path / name)).get_term_counts("insulin", analyzer=None)[1]
          for name in ("sum", "max")}
    assert tf == {"sum": sum(term_frequency(w, 1000.0, "sqrt") for w in occurrences),
                  "max": term_frequency(max(occurrences), 1000.0, "sqrt")}
    settings = json.loads((folder / "deepct_config.json").read_text())
    (folder / "deepct_config.json").write_text(json.dumps({**settings, "index_tf": {"merge": "mean"}}))
    with pytest.raises(ModelFolderError, match="unusable index_tf.*unknown tf merge"):
        DeepCTModel.from_pretrained(folder)


def test_interrupted_build_leaves_nothing(untrained_deepct, tmp_path):
    def documents():
        yield "d1", {"insulin": 3}, ""
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_term_frequency_index(documents(), tmp_path / "idx")
    assert list(tmp_path.iterdir()) == []


def test_analyzer_option(untrained_deepct, tmp_path):
    corpus = {"d": {"title": "", "text": "the running mice"}}
    build_deepct_index(untrained_deepct, corpus, tmp_path / "porter", TermFrequencyRule(scale=1000))
    build_deepct_index(untrained_deepct, corpus, tmp_path / "none", TermFrequencyRule(scale=1000),
                       analyzer=AnalyzerSettings("none", keep_stopwords=True))
    from pyserini.index.lucene import LuceneIndexReader

    assert {t.term for t in LuceneIndexReader(str(tmp_path / "porter")).terms()} == {"run", "mice"}
    assert {t.term for t in LuceneIndexReader(str(tmp_path / "none")).terms()} == {"the", "running", "mice"}
    assert ClassicLuceneSearcher(tmp_path / "none").search("running")[0].docid == "d"  # settings from metadata


def test_deepct_query_and_impact_searcher(twin_indexes, untrained_deepct, word_tfs, caplog):
    from pyserini.search.lucene import LuceneImpactSearcher

    from pyserini_ext.registry import encoder_class

    deepct_index, pseudo_index = twin_indexes
    encoder = encoder_class("deepct", "query")(untrained_deepct)
    assert isinstance(encoder, DeepCTQueryEncoder)
    query = "insulin resistance in mice"
    weights = encoder.encode(query)
    assert weights and all(isinstance(w, int) and w >= 1 for w in weights.values())
    impact = LuceneImpactSearcher(str(deepct_index), encoder)
    hits = impact.search(query, 5)
    assert hits
    # impact scoring: sum over query terms of query weight x the document's DeepCT tf
    analyzed = ClassicLuceneSearcher(deepct_index).word_analyzer
    top_tfs = analyzed.term_weights(word_tfs[hits[0].docid])
    assert hits[0].score == pytest.approx(sum(w * top_tfs.get(t, 0) for t, w in weights.items()), rel=1e-4)
    assert encoder.encode("zzqxj vvkkw") == {} or impact.search("zzqxj vvkkw", 5) == []

    weigher = DeepCTQueryWeigher(untrained_deepct)
    topics = {"q1": query, "q2": "the of", "q3": ""}
    for index in (deepct_index, pseudo_index):
        searcher = ClassicLuceneSearcher(index)
        with caplog.at_level(logging.WARNING):
            run = searcher.search_topics(topics, k=10, query_weights=weigher)
        assert run["q1"] and run["q2"] == [] and run["q3"] == []
        assert "2 of 3 queries matched no document" in caplog.text


@pytest.mark.slow
def test_end_to_end_trained_beats_untrained(scifact, tmp_path):
    """Train two epochs (72 steps) on SciFact train, index a SciFact subset (the judged documents of all test
    queries plus 1000 others) with the trained model and with the same model before training (same seed, same
    head initialisation), search the test queries with BM25 through the unchanged Pyserini command, evaluate
    with trec_eval: training must help."""
    seed = 1
    model, losses = train_deepct(DeepCTModelConfig("splade-tiny"), LabelledData.from_dataset(scifact),
                                 TrainConfig(epochs=2, learning_rate=1e-4, seed=seed, batch_size=16),
                                 tmp_path / "model")
    assert len(losses) == 72 and sum(losses[-10:]) < sum(losses[:10])
    assert json.loads((tmp_path / "model" / "training_log.json").read_text())["losses"] == losses
    set_seed(seed)
    untrained = DeepCTModel.from_backbone(backbone_path("splade-tiny"))
    qrels = scifact.qrels("test")
    judged = {d for j in qrels.values() for d in j}
    docids = sorted(judged) + random.Random(0).sample(sorted(set(scifact.corpus) - judged), 1000)
    corpus = {d: scifact.corpus[d] for d in docids}
    topics = write_topics({q: scifact.queries[q] for q in qrels}, tmp_path / "topics.tsv")
    qrels_file = write_trec_qrels(qrels, tmp_path / "qrels.txt")
    scores = {}
    for name, m in (("trained", model), ("untrained", untrained)):
        build_deepct_index(m, corpus, tmp_path / name)
        run = tmp_path / f"{name}.run"
        subprocess.run([sys.executable, "-m", "pyserini.search.lucene", "--index", str(tmp_path / name),
                        "--topics", str(topics), "--output", str(run), "--bm25", "--k1", "10", "--b", "0.9",
                        "--hits", "100"], check=True, capture_output=True)
        assert set(read_trec_run(run)) <= set(qrels)
        scores[name] = evaluate(qrels_file, run)
    print(scores)
    assert scores["trained"]["ndcg_cut_10"] > scores["untrained"]["ndcg_cut_10"] + 0.02, scores  # seen: 0.779 vs 0.736
    # QL-JM over the same DeepCT index, through our searcher, evaluates too
    searcher = ClassicLuceneSearcher(tmp_path / "trained")
    searcher.set_qljm(0.1)
    run = write_trec_run(searcher.search_topics({q: scifact.queries[q] for q in qrels}, k=100), tmp_path / "jm.run")
    assert evaluate(qrels_file, run)["ndcg_cut_10"] > 0.3
