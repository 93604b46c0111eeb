"""End to end on real SciFact data through Pyserini's unchanged CLIs (the demo pipeline on a subset)."""
from __future__ import annotations

import json
import random

import pytest

from pyserini_ext.demo import LEXICAL_ONLY, run_pipeline
from pyserini_ext.evaluation import evaluate, read_trec_run, write_trec_run
from pyserini_ext.repro.runner import model_tag

SUBSET_DOCS = 800


@pytest.fixture(scope="module")
def scifact_subset(scifact, tmp_path_factory):
    """The documents judged for 100 test queries plus the first others, as a BEIR folder."""
    qrels = dict(list(scifact.qrels("test").items())[:100])
    judged = {d for docs in qrels.values() for d in docs}
    keep = list(judged) + [d for d in scifact.corpus if d not in judged][: SUBSET_DOCS - len(judged)]
    root = tmp_path_factory.mktemp("scifact-subset")
    with open(root / "corpus.jsonl", "w") as f:
        for docid in keep:
            f.write(json.dumps({"_id": docid, **scifact.corpus[docid]}) + "\n")
    with open(root / "queries.jsonl", "w") as f:
        for qid in qrels:
            f.write(json.dumps({"_id": qid, "text": scifact.queries[qid]}) + "\n")
    (root / "qrels").mkdir()
    with open(root / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t{r}\n" for q, docs in qrels.items() for d, r in docs.items())
    return root, keep, qrels


@pytest.fixture(scope="module")
def pipeline(scifact_subset, tmp_path_factory):
    root, _, _ = scifact_subset
    # `make demo` encodes the corpus with aggretriever-onnx; this covers the torch encoder through the CLI
    return run_pipeline(str(root), "test", tmp_path_factory.mktemp("demo"), model=LEXICAL_ONLY, max_length=128,
                        batch_size=32, threads=2, document_encoder_class="aggretriever")


def test_demo_model_beats_random_ranking_by_far(pipeline, scifact_subset, tmp_path):
    qrels_path, runs = pipeline
    _, docs, qrels = scifact_subset
    rng = random.Random(0)
    random_run = {q: [(d, -i) for i, d in enumerate(rng.sample(docs, 1000 if len(docs) > 1000 else len(docs)))]
                  for q in qrels}
    random_scores = evaluate(qrels_path, write_trec_run(random_run, tmp_path / "random.txt"))
    agg = evaluate(qrels_path, runs["Aggretriever"])
    bm25 = evaluate(qrels_path, runs["BM25"])
    assert random_scores["ndcg_cut_10"] < 0.05
    assert agg["ndcg_cut_10"] > 0.45 and agg["ndcg_cut_10"] > 10 * random_scores["ndcg_cut_10"]
    assert agg["recall_100"] > 0.8
    assert bm25["ndcg_cut_10"] > 0.5  # sanity of the sparse side on the same subset


def test_outputs_are_named_by_the_model_files(pipeline):
    _, runs = pipeline  # a changed model folder gets new runs, never an older model's
    tag = model_tag(runs["Aggretriever"].parent / "aggretriever-lexical-only")
    assert all(path.name == f"run.{kind}.{tag}.txt" for kind, path in
               zip(("aggretriever", "hybrid", "rrf"), list(runs.values())[1:]))


@pytest.mark.parametrize("name", ["Hybrid (pyserini.search.hybrid)", "RRF (pyserini.fusion)"])
def test_fusion_output_is_a_valid_run(pipeline, scifact_subset, name):
    qrels_path, runs = pipeline
    _, docs, qrels = scifact_subset
    lines = runs[name].read_text().splitlines()
    per_query: dict[str, list[tuple[int, float, str]]] = {}
    for line in lines:
        qid, q0, docid, rank, score, _tag = line.split()
        assert q0 == "Q0"
        per_query.setdefault(qid, []).append((int(rank), float(score), docid))
    assert set(per_query) == set(qrels)
    allowed = set(docs)
    for hits in per_query.values():
        ranks = [r for r, _, _ in hits]
        scores = [s for _, s, _ in hits]
        assert ranks == list(range(1, len(hits) + 1))
        assert all(a >= b for a, b in zip(scores, scores[1:]))
        assert len({d for _, _, d in hits}) == len(hits) and {d for _, _, d in hits} <= allowed
    fused = evaluate(qrels_path, runs[name])
    assert fused["ndcg_cut_10"] > 0.45
    assert len(read_trec_run(runs[name])) == len(qrels)
