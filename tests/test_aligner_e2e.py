"""AligneR end to end on real SciFact data: a briefly trained model beats the untrained one; the compressed index
keeps most of the exact index's top 10; the CLI writes runs that the evaluation reads."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pyserini_ext.cli.aligner import main as aligner_cli
from pyserini_ext.data import write_json_collection, write_topics, write_trec_qrels
from pyserini_ext.evaluation import evaluate, read_trec_run
from pyserini_ext.index.aligner import build_index, encode_corpus
from pyserini_ext.models.aligner import AlignerConfig, AlignerModel
from pyserini_ext.models.alignment import DEFAULT_BETA_Q
from pyserini_ext.models.backbones import backbone_path
from pyserini_ext.search.aligner import AlignerSearcher
from pyserini_ext.train.aligner import AlignerModelConfig, train_aligner
from pyserini_ext.train.data import LabelledData
from pyserini_ext.train.loop import TrainConfig

N_QUERIES, N_OTHER_DOCS, TRAIN_STEPS = 60, 500, 40


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def sample(scifact, scifact_sample):
    return (scifact, *scifact_sample(N_QUERIES, N_OTHER_DOCS))


@pytest.fixture(scope="module")
def models(scifact, tmp_path_factory):
    dataset = scifact
    config = AlignerConfig(doc_max_length=128)
    folder = tmp_path_factory.mktemp("aligner") / "trained"
    trained, losses = train_aligner(
        AlignerModelConfig("splade-tiny", config), LabelledData.from_dataset(dataset, "train", negatives="random"),
        TrainConfig(learning_rate=1e-4, max_steps=TRAIN_STEPS, batch_size=16), folder)
    torch.manual_seed(0)
    untrained = AlignerModel.from_backbone(backbone_path("splade-tiny"), AlignerConfig(doc_max_length=128))
    return trained.eval(), untrained.eval(), losses, folder


@pytest.fixture(scope="module")
def trained_encoding(models, sample):
    return encode_corpus(models[0], sample[3], progress=False)


def _mean_ndcg(model: AlignerModel, encoded, sample, tmp_path, beta_qs: tuple[float, ...]) -> list[float]:
    _, queries, qrels, _ = sample
    folder = build_index(encoded, tmp_path, progress=False)
    figures = []
    for beta_q in beta_qs:
        hits = AlignerSearcher(folder, model, beta_q=beta_q).batch_search(list(queries.values()), list(queries), k=10)
        run = {q: [(h.docid, h.score) for h in hits[q]] for q in queries}
        figures.append(evaluate({q: qrels[q] for q in queries}, run, ("ndcg_cut_10",))["ndcg_cut_10"])
    return figures


def test_trained_beats_untrained(models, trained_encoding, sample, tmp_path):
    trained, untrained, losses, _ = models
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    betas = (DEFAULT_BETA_Q, 0.5)
    trained_ndcg = _mean_ndcg(trained, trained_encoding, sample, tmp_path / "trained", betas)
    untrained_encoding = encode_corpus(untrained, sample[3], progress=False)
    untrained_ndcg = _mean_ndcg(untrained, untrained_encoding, sample, tmp_path / "untrained", betas)
    # measured (60 queries, 560 documents, 40 steps): every query token kept (the default), untrained 0.721,
    # trained 0.764; half of them, chosen by the query salience head, untrained 0.596, trained 0.749 (so the
    # salience head learned which query tokens matter)
    assert trained_ndcg[0] > untrained_ndcg[0] + 0.03
    assert trained_ndcg[1] > untrained_ndcg[1] + 0.08


def test_compressed_index_keeps_the_exact_top10(models, trained_encoding, sample, tmp_path):
    trained, encoded = models[0], trained_encoding
    queries = sample[1]
    exact = AlignerSearcher(build_index(encoded, tmp_path / "exact", progress=False), trained)
    compressed = AlignerSearcher(build_index(encoded, tmp_path / "pq", codec="residual-pq", candidates="ivfpq",
                                             nlist=32, train_size=10000, progress=False), trained, nprobe=8)
    overlaps = []
    for query in queries.values():
        truth = {h.docid for h in exact.search(query, k=10)}
        overlaps.append(len(truth & {h.docid for h in compressed.search(query, k=10)}) / 10)
    # measured 0.845 (residual PQ32 codes + IVF32-PQ candidates, nprobe 8: 79 bytes/token vs 258 for float16)
    assert np.mean(overlaps) >= 0.75
    assert compressed.index.bytes_per_token() < 0.5 * exact.index.bytes_per_token()


def test_cli_index_search_and_trec_eval(models, sample, tmp_path, capsys):
    _, queries, qrels, corpus = sample
    folder = models[3]
    collection = write_json_collection(corpus, tmp_path / "collection").parent
    topics = write_topics(queries, tmp_path / "topics.tsv")
    qrels_path = write_trec_qrels(qrels, tmp_path / "qrels.txt")
    assert aligner_cli(["index", "--corpus", str(collection), "--model", str(folder), "--output",
                        str(tmp_path / "index"), "--beta-d", "0.4"]) == 0
    assert aligner_cli(["search", "--index", str(tmp_path / "index"), "--topics", str(topics), "--output",
                        str(tmp_path / "run.txt"), "--hits", "100"]) == 0
    run = read_trec_run(tmp_path / "run.txt")
    assert set(run) == set(queries) and all(len(hits) == 100 for hits in run.values())
    scores = evaluate(qrels_path, tmp_path / "run.txt")
    assert scores["ndcg_cut_10"] > 0.3 and scores["recall_100"] > 0.5
    capsys.readouterr()
    with pytest.raises(SystemExit):
        aligner_cli(["search", "--index", str(tmp_path / "index"), "--output", str(tmp_path / "x.txt")])
    with pytest.raises(SystemExit) as refused:  # neither --corpus nor --dataset: a usage error
        aligner_cli(["index", "--model", str(folder), "--output", str(tmp_path / "i2")])
    assert refused.value.code == 2
    pruned = json.loads((tmp_path / "index" / "metadata.json").read_text())
    assert (pruned["beta_d"], pruned["reduction"], pruned["duplicate_cosine"]) == (0.4, "pool", None)
    # the compressed index from the command line: PQ32x6 residual codes = 24 bytes + the centroid id
    assert aligner_cli(["index", "--corpus", str(collection), "--model", str(folder), "--output",
                        str(tmp_path / "pq"), "--beta-d", "0.4", "--codec", "residual-pq", "--candidates", "centroid",
                        "--pq-m", "32", "--pq-bits", "6", "--nlist", "16"]) == 0
    metadata = json.loads((tmp_path / "pq" / "metadata.json").read_text())
    assert (metadata["pq_m"], metadata["pq_bits"], metadata["nlist"]) == (32, 6, 16)
    assert np.load(tmp_path / "pq" / "codes.npy").shape == (metadata["counts"]["tokens"], 1 + 24)
