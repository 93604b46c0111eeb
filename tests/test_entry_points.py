"""Bare model names and folders recognised by config, through Pyserini's unchanged CLIs and our own.

Pyserini's `__main__` modules run in this process (`runpy`), so Pyserini, torch and the JVM load once.
"""
from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from pyserini_ext import registry
from pyserini_ext.evaluation import read_trec_run
from pyserini_ext.integration.encode import MODEL_ATTRIBUTE
from pyserini_ext.models.folder import ModelNameError, default_models, model_family, resolve_model

SHIPPED = {"aggretriever": "aggretriever", "aggretriever-onnx": "aggretriever", "deepct": "deepct",
           "aligner": "aligner"}
pytestmark = pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
TOPICS = {"q1": "insulin resistance in obese mice", "q2": "stem cell differentiation", "q3": "cancer risk"}


def run_module(module: str, argv: list[str]) -> None:
    """`python -m module argv...` in this process; fails on a non-zero exit."""
    with mock.patch.object(sys, "argv", [module, *map(str, argv)]):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            assert e.code in (None, 0), f"{module} exited with {e.code}"


@pytest.fixture(scope="module")
def corpus(scifact, tmp_path_factory):
    """A JsonCollection of 40 SciFact passages (title and text fields) and three topics."""
    from pyserini_ext.data import write_json_collection

    root = tmp_path_factory.mktemp("entry")
    docs = {d: scifact.corpus[d] for d in sorted(scifact.corpus)[:40]}
    write_json_collection(docs, root / "collection")
    (root / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in TOPICS.items()))
    return root


@pytest.mark.parametrize("name,family", SHIPPED.items())
def test_bare_name_resolves_to_the_shipped_default_of_its_family(name, family):
    folder = Path(resolve_model(name))
    assert folder.parent == registry.resources_dir() / "models"
    assert folder.name == default_models()[name]
    assert model_family(folder) == family and model_family(name) == family


def test_one_defaults_table_names_every_bare_name():
    assert set(default_models()) == set(registry.ENCODERS) & set(default_models())
    assert {"aggretriever", "aggretriever-onnx", "deepct", "aligner"} <= set(default_models())


def test_a_shipped_folder_name_stands_for_that_folder(tmp_path, monkeypatch):
    """`--encoder aggretriever-splade-tiny` reaches the shipped folder (prebuilt indexes name the model that built
    them), and Pyserini hands it to our class; a local path of the same name wins."""
    from pyserini.search.faiss.__main__ import init_query_encoder

    from pyserini_ext.integration.encoders import AggretrieverQueryEncoder

    shipped = registry.resources_dir() / "models" / "aligner-splade-tiny"
    assert resolve_model("aligner-splade-tiny") == str(shipped)
    assert model_family("aligner-splade-tiny") == "aligner"
    with pytest.raises(ModelNameError, match="expected a deepct model, found the aligner model folder"):
        resolve_model("aligner-splade-tiny", "deepct")
    assert resolve_model("defaults.json") == "defaults.json"
    query = init_query_encoder("aggretriever-splade-tiny", None, None, None, None, "cpu", 32, "cls", False, None)
    assert isinstance(query, AggretrieverQueryEncoder)
    assert getattr(query, MODEL_ATTRIBUTE) == str(shipped.with_name("aggretriever-splade-tiny"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "aligner-splade-tiny").mkdir()
    assert resolve_model("aligner-splade-tiny") == "aligner-splade-tiny"


def test_folder_is_recognised_by_its_config_not_its_name(tmp_path):
    """Pyserini's keyword matching would take `...-splade-tiny` for SPLADE and a neutral name for `auto`."""
    from pyserini.encode.__main__ import init_encoder
    from pyserini.search.faiss.__main__ import init_query_encoder
    from pyserini.search.lucene import LuceneImpactSearcher

    from pyserini_ext.integration.encoders import (
        AggretrieverDocumentEncoder,
        AggretrieverQueryEncoder,
        AlignerDocumentEncoder,
        DeepCTDocumentEncoder,
        DeepCTQueryEncoder,
    )

    aligner = Path(resolve_model("aligner")).with_name("aligner-splade-tiny")
    assert "splade" in aligner.name and aligner.is_dir()
    neutral = tmp_path / "my-model"
    neutral.symlink_to(resolve_model("aggretriever"), target_is_directory=True)

    def document_encoder(encoder, encoder_class=None):
        return init_encoder(str(encoder), encoder_class, "cpu", "cls", False, None, False, False)

    assert isinstance(document_encoder(aligner), AlignerDocumentEncoder)
    assert isinstance(document_encoder(neutral), AggretrieverDocumentEncoder)
    assert isinstance(document_encoder("deepct"), DeepCTDocumentEncoder)
    # the keyword `aggretriever` matches first, but the bare name `aggretriever-onnx` names its own entry: the
    # Aggretriever encoder on the ONNX Runtime backend
    onnx_encoder = document_encoder("aggretriever-onnx")
    assert isinstance(onnx_encoder, AggretrieverDocumentEncoder) and onnx_encoder.runtime.backend == "onnx"
    query = init_query_encoder(str(neutral), None, None, None, None, "cpu", 32, "cls", False, None)
    assert isinstance(query, AggretrieverQueryEncoder)
    assert isinstance(LuceneImpactSearcher._init_query_encoder_from_str("deepct"), DeepCTQueryEncoder)
    with pytest.raises(ModelNameError, match="'deepct' is a deepct model; the aligner encoder"):
        document_encoder("deepct", "aligner")


def test_hub_names_of_aggretriever_models_route_to_our_class():
    import pyserini.encode as encode

    for name in ("castorini/aggretriever-distilbert", "castorini/aggretriever-cocondenser"):
        assert model_family(name) == "aggretriever"
        assert resolve_model(name) == name  # downloaded by our class, not rewritten
    assert encode.query_encoder_class_map["aggretriever"].path.startswith("pyserini_ext.")
    assert model_family("castorini/tct_colbert-v2-hnp-msmarco") is None


def test_a_missing_default_is_a_clear_error(monkeypatch, tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "defaults.json").write_text(json.dumps({"deepct": "absent"}))
    monkeypatch.setattr(registry, "resources_dir", lambda: tmp_path)
    with pytest.raises(ModelNameError, match="default 'deepct' model .*absent is missing"):
        resolve_model("deepct")
    with pytest.raises(ModelNameError, match="no shipped default model for 'aligner'"):
        resolve_model("aligner")


def test_bare_name_through_pyserini_encode_search_faiss_and_hybrid(corpus, tmp_path, one_thread):
    """`--encoder aggretriever` without `--encoder-class`, in every Pyserini command that takes it."""
    from pyserini.search.faiss import FaissSearcher

    from pyserini_ext.encode.aggretriever import AggretrieverQueryEncoder

    index = tmp_path / "faiss"
    run_module("pyserini.encode", ["input", "--corpus", corpus / "collection" / "docs.jsonl", "--fields", "title",
                                   "text", "output", "--embeddings", index, "--to-faiss",
                                   "encoder", "--encoder", "aggretriever", "--fields", "title", "text",
                                   "--max-length", 128, "--device", "cpu", "--batch-size", 16])
    dense_run, hybrid_run = tmp_path / "dense.txt", tmp_path / "hybrid.txt"
    run_module("pyserini.search.faiss", ["--index", index, "--topics", corpus / "topics.tsv", "--encoder",
                                         "aggretriever", "--output", dense_run, "--hits", 5])
    bm25 = tmp_path / "bm25"
    run_module("pyserini.index.lucene", ["--collection", "JsonCollection", "--input", corpus / "collection",
                                         "--index", bm25, "--generator", "DefaultLuceneDocumentGenerator",
                                         "--threads", 1])
    run_module("pyserini.search.hybrid", ["dense", "--index", index, "--encoder", "aggretriever",
                                          "sparse", "--index", bm25, "fusion", "--alpha", "0.5",
                                          "run", "--topics", corpus / "topics.tsv", "--output", hybrid_run,
                                          "--hits", 5])
    searcher = FaissSearcher(str(index), AggretrieverQueryEncoder(resolve_model("aggretriever")))
    dense, hybrid = read_trec_run(dense_run), read_trec_run(hybrid_run)
    for qid, text in TOPICS.items():
        expected = [(h.docid, h.score) for h in searcher.search(text, 5)]
        assert [d for d, _ in dense[qid]] == [d for d, _ in expected]
        np.testing.assert_allclose([s for _, s in dense[qid]], [s for _, s in expected], rtol=1e-4)
        assert len(hybrid[qid]) == 5


def test_deepct_through_pyserinis_own_learned_sparse_route(scifact, tmp_path, one_thread):
    """encode (JsonVectorCollection) -> index.lucene --impact --pretokenized -> search.lucene --impact, all
    unchanged Pyserini commands with the bare name `deepct`, rank exactly as our impact search on our DeepCT
    index of the same passages."""
    from pyserini.search.lucene import LuceneImpactSearcher

    from pyserini_ext.data import write_json_collection
    from pyserini_ext.encode.deepct import DeepCTQueryEncoder
    from pyserini_ext.index.deepct import build_deepct_index
    from pyserini_ext.models.deepct import DeepCTModel
    from pyserini_ext.models.deepct_terms import TermFrequencyRule

    docs = {d: scifact.corpus[d] for d in sorted(scifact.corpus)[:60]}
    write_json_collection(docs, tmp_path / "collection")
    (tmp_path / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in TOPICS.items()))
    vectors, index, run = tmp_path / "vectors", tmp_path / "impact", tmp_path / "run.txt"
    run_module("pyserini.encode", ["input", "--corpus", tmp_path / "collection" / "docs.jsonl", "--fields", "title",
                                   "text", "output", "--embeddings", vectors,
                                   "encoder", "--encoder", "deepct", "--fields", "title", "text", "--device", "cpu"])
    first = json.loads((vectors / "embeddings.jsonl").read_text().splitlines()[0])
    assert first["vector"] and all(isinstance(w, int) and w >= 1 for w in first["vector"].values())
    run_module("pyserini.index.lucene", ["--collection", "JsonVectorCollection", "--input", vectors, "--index", index,
                                         "--generator", "DefaultLuceneDocumentGenerator", "--impact",
                                         "--pretokenized", "--threads", 1])
    run_module("pyserini.search.lucene", ["--index", index, "--topics", tmp_path / "topics.tsv", "--output", run,
                                          "--impact", "--encoder", "deepct", "--hits", 10])

    model_dir = resolve_model("deepct")
    ours = tmp_path / "deepct-index"
    # the encoder writes the released code's tf rule for the impact route (encode/deepct.py), not the model's
    build_deepct_index(DeepCTModel.from_pretrained(model_dir), docs, ours, TermFrequencyRule())
    searcher = LuceneImpactSearcher(str(ours), DeepCTQueryEncoder(model_dir))
    cli = read_trec_run(run)
    for qid, text in TOPICS.items():
        expected = [(h.docid, round(h.score, 3)) for h in searcher.search(text, 10)]
        assert len(expected) >= 3 and [(d, round(s, 3)) for d, s in cli[qid]] == expected


def test_old_pyserini_search_entry_point_from_an_unactivated_venv(tmp_path):
    """`python -m pyserini.search` re-runs `python -m pyserini.search.lucene` through the shell; with PATH not
    naming the venv, that `python` must still be this interpreter. A process that does not import Pyserini
    keeps its PATH."""
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "docs.jsonl").write_text('{"id": "d1", "contents": "insulin resistance"}\n'
                                               '{"id": "d2", "contents": "stem cells"}\n')
    (tmp_path / "topics.tsv").write_text("q1\tinsulin\nq2\tstem cells\n")
    env = {**os.environ, "PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    run_module("pyserini.index.lucene", ["--collection", "JsonCollection", "--input", tmp_path / "c", "--index",
                                         tmp_path / "index", "--generator", "DefaultLuceneDocumentGenerator"])
    proc = subprocess.run([sys.executable, "-m", "pyserini.search", "--index", str(tmp_path / "index"), "--topics",
                           str(tmp_path / "topics.tsv"), "--output", str(tmp_path / "run.txt"), "--bm25"],
                          env=env, capture_output=True, text=True)
    assert (tmp_path / "run.txt").is_file(), proc.stdout[-1000:] + proc.stderr[-2000:]
    run = read_trec_run(tmp_path / "run.txt")
    assert [d for d, _ in run["q1"]] == ["d1"] and [d for d, _ in run["q2"]] == ["d2"]
    plain = subprocess.run([sys.executable, "-c", "import os; print(os.environ['PATH'])"], env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert plain.endswith("/usr/bin:/bin") and "pyserini_ext" not in plain
