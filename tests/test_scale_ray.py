"""Encoding on a local 2-worker Ray cluster (two nodes, one CPU each, started here) builds the same indexes as one
process: Aggretriever's Pyserini Faiss index, a DeepCT Lucene index, an AligneR token index."""
from __future__ import annotations

import faiss
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder
from pyserini_ext.index.aggretriever import AggretrieverIndexBuilder, AggretrieverIndexSettings
from pyserini_ext.index.aligner import AlignerIndex, build_aligner_index, build_index, encode_corpus
from pyserini_ext.index.deepct import DeepCTIndexBuilder, DeepCTIndexSettings, build_deepct_index
from pyserini_ext.index.streaming import build, build_on_ray
from pyserini_ext.models.aggretriever import AggretrieverConfig, from_masked_lm, identity_semantic_head
from pyserini_ext.models.aligner import AlignerModel
from pyserini_ext.models.deepct import DeepCTModel

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    # The JVM starts before ray.init: a JVM started after it can crash the process at start (seen). ray.init puts
    # its SIGSEGV handlers over the JVM's and ray.shutdown resets them to the default (the JVM raises SIGSEGV in
    # normal operation), so both run inside jvm_signal_handlers_kept: later tests in this process use Lucene
    import pyserini.index.lucene  # noqa: F401
    from ray.cluster_utils import Cluster

    from java_bridge.signals import jvm_signal_handlers_kept

    with jvm_signal_handlers_kept():
        local = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        local.add_node(num_cpus=1)
        ray.init(address=local.address, log_to_driver=False)
    yield local
    with jvm_signal_handlers_kept():
        ray.shutdown()
        local.shutdown()


@pytest.fixture(scope="module")
def corpus(scifact):
    return dict(list(scifact.corpus.items())[:24])


@pytest.fixture(scope="module")
def models(tmp_path_factory, splade_tiny_dir):
    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(5)
    # the default Aggretriever's layout: the body's normalised mean state at full width (128) + agg+
    agg = from_masked_lm(splade_tiny_dir, AggretrieverConfig(cls_dim=128, pooling="agg+", dense_pooling="mean",
                                                             dense_normalize=True), constant_term_weight=1.0)
    identity_semantic_head(agg, 2.0)
    agg = agg.save_pretrained(root / "agg", AutoTokenizer.from_pretrained(splade_tiny_dir))
    deepct = DeepCTModel.from_backbone(splade_tiny_dir).save_pretrained(root / "deepct")
    aligner = AlignerModel.from_backbone(splade_tiny_dir).save_pretrained(root / "aligner")
    return agg, deepct, aligner


def postings(index) -> dict[str, list[tuple[int, int]]]:
    """term -> [(Lucene docid, tf)]: all a DeepCT index holds (it stores no document vectors)."""
    from pyserini.index.lucene import LuceneIndexReader

    reader = LuceneIndexReader(str(index))
    found = {t.term: [(p.docid, p.tf) for p in reader.get_postings_list(t.term, analyzer=None)]
             for t in reader.terms()}
    assert len(found) > 100 and sum(tf for hits in found.values() for _, tf in hits) > 1000
    return found


def test_two_ray_workers_build_the_single_process_indexes(cluster, corpus, models, tmp_path):
    agg_dir, deepct_dir, aligner_dir = models
    assert ray.cluster_resources()["CPU"] == 2 and len(ray.nodes()) == 2

    # Aggretriever: Pyserini's Faiss index (docid + index files), flat and IVF-PQ (trained on an actor), the bytes
    # one process writes (one passage per forward pass: vectors that do not depend on batch neighbours)
    for settings in (AggretrieverIndexSettings(max_length=128, batch_size=1),
                     AggretrieverIndexSettings(index_type="ivfpq", max_length=128, batch_size=1, nlist=2, pq_m=96,
                                               pq_bits=4)):
        out = build_on_ray(AggretrieverIndexBuilder(str(agg_dir), settings), iter(corpus.items()),
                           tmp_path / f"agg-{settings.index_type}", workers=2, chunk_docs=5, progress=False)
        one = build(AggretrieverIndexBuilder(str(agg_dir), settings), iter(corpus.items()),
                    tmp_path / f"agg-{settings.index_type}-one", chunk_docs=len(corpus), progress=False)
        assert (out / "docid").read_text().split() == list(corpus)
        assert (out / "docid").read_text() == (one / "docid").read_text()
        assert (out / "index").read_bytes() == (one / "index").read_bytes()
    encoder = AggretrieverDocumentEncoder(str(agg_dir))
    docs = list(corpus.values())
    expected = encoder.encode([d["text"] for d in docs], titles=[d["title"] for d in docs], max_length=128)
    index = faiss.read_index(str(tmp_path / "agg-flat" / "index"))
    assert np.abs(index.reconstruct_n(0, index.ntotal) - expected).max() < 1e-5

    # DeepCT: the same term frequencies in the Lucene index as build_deepct_index in one process (one window per
    # forward pass: weights that do not depend on batch neighbours)
    from pyserini.index.lucene import LuceneIndexReader

    ray_index = build_on_ray(DeepCTIndexBuilder(deepct_dir, DeepCTIndexSettings(batch_size=1)), iter(corpus.items()),
                             tmp_path / "deepct", workers=2, chunk_docs=5, progress=False)
    single = tmp_path / "deepct-single"
    build_deepct_index(DeepCTModel.from_pretrained(deepct_dir), corpus, single, batch_size=1,
                       model_name=str(deepct_dir))
    assert postings(ray_index) == postings(single)
    ray_reader, single_reader = LuceneIndexReader(str(ray_index)), LuceneIndexReader(str(single))
    assert ray_reader.stats() == single_reader.stats()
    assert [ray_reader.convert_internal_docid_to_collection_docid(i) for i in range(len(corpus))] == list(corpus)

    # AligneR: same tokens and offsets; vectors equal up to float16 rounding of batch-dependent float32 noise
    ray_folder = build_aligner_index(aligner_dir, iter(corpus.items()), tmp_path / "aligner", workers=2,
                                     chunk_docs=5, progress=False)
    model = AlignerModel.from_pretrained(aligner_dir)
    single_folder = build_index(encode_corpus(model, corpus, progress=False), tmp_path / "aligner-single",
                                progress=False)
    ray_aligner, single_aligner = AlignerIndex.open(ray_folder), AlignerIndex.open(single_folder)
    assert ray_aligner.docids == single_aligner.docids == list(corpus)
    assert np.array_equal(ray_aligner.offsets, single_aligner.offsets)
    rows = np.arange(ray_aligner.tokens)
    assert np.abs(ray_aligner.codec.decode(rows) - single_aligner.codec.decode(rows)).max() <= 2e-3


def test_index_commands_take_ray_workers(cluster, corpus, models, tmp_path):
    """`--workers 2` on `aggretriever index` and `deepct index` builds what the one-process command builds."""
    import json

    from pyserini_ext.cli.aggretriever import main as aggretriever_cli
    from pyserini_ext.cli.deepct import main as deepct_cli

    agg_dir, deepct_dir, _ = models
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": d, **doc}) + "\n" for d, doc in corpus.items()))
    common = ["--model", str(agg_dir), "--corpus", str(path), "--max-length", "128", "--chunk-docs", "5",
              "--batch-size", "1"]
    assert aggretriever_cli(["index", *common, "--output", str(tmp_path / "agg-ray"), "--workers", "2"]) == 0
    assert aggretriever_cli(["index", *common, "--output", str(tmp_path / "agg-one")]) == 0
    assert (tmp_path / "agg-ray" / "docid").read_text() == (tmp_path / "agg-one" / "docid").read_text()
    assert faiss.read_index(str(tmp_path / "agg-ray" / "index")).ntotal == len(corpus)
    assert (tmp_path / "agg-ray" / "index").read_bytes() == (tmp_path / "agg-one" / "index").read_bytes()

    common = ["--model", str(deepct_dir), "--corpus", str(path), "--stemmer", "none", "--chunk-docs", "5",
              "--batch-size", "1"]
    assert deepct_cli(["index", *common, "--output", str(tmp_path / "deepct-ray"), "--workers", "2"]) == 0
    assert deepct_cli(["index", *common, "--output", str(tmp_path / "deepct-one")]) == 0
    on_ray = postings(tmp_path / "deepct-ray")
    assert on_ray == postings(tmp_path / "deepct-one")
    assert "cells" in on_ray and "cell" in on_ray  # unstemmed, as --stemmer none asks


JVM_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE")
SIGNAL_CHECK = """
import signal, sys
import pyserini.index.lucene  # starts the JVM
import ray
from java_bridge.signals import handler_library, jvm_signal_handlers_kept
names = sys.argv[1].split(",")
def owners():
    return ",".join(str(handler_library(getattr(signal, n))) for n in names)
print("jvm", owners())
if sys.argv[2] == "kept":
    with jvm_signal_handlers_kept():
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    print("init", owners())
    with jvm_signal_handlers_kept():
        ray.shutdown()
else:
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    print("init", owners())
    ray.shutdown()
print("shutdown", owners())
"""


@pytest.mark.parametrize("kept", [True, False])
def test_ray_init_and_shutdown_keep_the_jvm_signal_handlers(kept, tmp_path):
    """Without jvm_signal_handlers_kept, ray.init replaces the JVM's SIGSEGV handler with Ray's and ray.shutdown
    leaves the default action (the CI crash: Lucene after a Ray build in one process); with it, libjvm's stay."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a Ray of its own, not this module's cluster
    done = subprocess.run([sys.executable, "-c", SIGNAL_CHECK, ",".join(JVM_SIGNALS), "kept" if kept else "plain"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.split(" ")[0] in
                 ("jvm", "init", "shutdown"))
    assert lines["jvm"] == ",".join(["libjvm.so"] * len(JVM_SIGNALS))
    if kept:
        assert lines["init"] == lines["shutdown"] == lines["jvm"]
    else:
        assert "libjvm.so" not in lines["init"].split(",")[0] and lines["shutdown"].split(",")[0] == "None"
