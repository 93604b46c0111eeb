"""The ONNX Runtime backend gives the torch backend's vectors (BERT and DistilBERT, agg* and agg+)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, DistilBertConfig, DistilBertForMaskedLM

from pyserini_ext import hardware
from pyserini_ext.data.text import document_texts
from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder, AggretrieverEncoder, AggretrieverQueryEncoder
from pyserini_ext.encode.runtime import EncoderRuntime
from pyserini_ext.models.aggretriever import AggretrieverConfig, from_masked_lm, identity_semantic_head

BOUND_INT8 = 0.05  # relative L2 distance from float32; measured 0.013 (bert, agg*) and 0.016 (distilbert, agg+)
TEXTS = ["Microglia are the resident immune cells of the brain.", "", "short text",
         "Ünïcödé 🙂 漢字 " + "long " * 300]


@pytest.fixture(scope="module", params=[("bert", "agg*", "cls"), ("distilbert", "agg+", "cls"),
                                        ("bert", "agg+", "mean"), ("bert", "agg+", "full-width")],
                ids=lambda p: "-".join(p))
def model_dir(request, tmp_path_factory, splade_tiny_dir):
    """full-width: the normalised mean state through an identity projection (cls_dim = hidden = 32), scaled; its
    queries over 8 tokens have their lexical part scaled down (query_lexical_tokens), by both backends alike."""
    kind, pooling, dense_pooling = request.param
    torch.manual_seed(7)
    if kind == "bert":
        mlm = BertForMaskedLM(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64))
    else:
        mlm = DistilBertForMaskedLM(DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64))
    folder = tmp_path_factory.mktemp(kind)
    mlm.save_pretrained(folder / "mlm")
    full = dense_pooling == "full-width"
    config = AggretrieverConfig(pooling=pooling, dense_pooling="mean" if full else dense_pooling,
                                **({"cls_dim": 32, "dense_normalize": True, "query_lexical_tokens": 8} if full else {}))
    model = from_masked_lm(folder / "mlm", config)
    torch.nn.init.normal_(model.tok_proj.weight, std=0.5)
    if full:
        identity_semantic_head(model, 2.0)
    else:
        torch.nn.init.normal_(model.cls_proj.weight, std=0.5)
    return model.save_pretrained(folder / "agg", AutoTokenizer.from_pretrained(splade_tiny_dir))


def test_documents_match_torch(model_dir, tmp_path):
    expected = AggretrieverDocumentEncoder(str(model_dir), device="cpu").encode(TEXTS, max_length=128)
    # position_chunk 5: several lexical calls per sequence
    onnx = AggretrieverDocumentEncoder(str(model_dir), backend="onnx", onnx_dir=str(tmp_path / "onnx"),
                                       position_chunk=5)
    got = onnx.encode(TEXTS, max_length=128)
    assert got.shape == expected.shape and np.abs(got - expected).max() <= 1e-5
    exported = sorted(p.name for p in (tmp_path / "onnx").iterdir())
    assert exported == ["aggretriever-body.onnx", "aggretriever-vocabulary.onnx"]


def test_pooled_graph_matches_torch(model_dir, tmp_path):
    """The GPU's variant (weights and max inside the graph), checked here on the CPU."""
    expected = AggretrieverDocumentEncoder(str(model_dir), device="cpu").encode(TEXTS, max_length=128)
    runtime = EncoderRuntime("onnx", "cpu", onnx_dir=str(tmp_path), position_chunk=5)
    pooled = AggretrieverEncoder(str(model_dir), None, runtime, pooled_graph=True)
    got = pooled.encode_texts(document_texts(TEXTS, None), 128)
    assert got.shape == expected.shape and np.abs(got - expected).max() <= 1e-5
    assert (tmp_path / "aggretriever-vocabulary-pooled.onnx").is_file()


def test_int8_documents_near_float32(model_dir, tmp_path):
    """int8 quantises the body and the vocabulary product with its bias kept out of the int8 matrix."""
    expected = AggretrieverDocumentEncoder(str(model_dir), device="cpu").encode(TEXTS, max_length=128)
    int8 = AggretrieverDocumentEncoder(str(model_dir), backend="onnx", precision="int8", onnx_dir=str(tmp_path))
    got = int8.encode(TEXTS, max_length=128)
    relative = np.linalg.norm(got - expected, axis=1) / np.linalg.norm(expected, axis=1)
    assert got.shape == expected.shape and 1e-4 < relative.max() <= BOUND_INT8
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "aggretriever-body.int8.onnx", "aggretriever-body.onnx", "aggretriever-vocabulary-separate-bias.int8.onnx",
        "aggretriever-vocabulary-separate-bias.onnx"]


def test_queries_match_torch(model_dir, tmp_path):
    torch_encoder = AggretrieverQueryEncoder(encoder_dir=str(model_dir), device="cpu")
    onnx_encoder = AggretrieverQueryEncoder(encoder_dir=str(model_dir), backend="onnx", onnx_dir=str(tmp_path / "onnx"))
    for query in ("what are microglia", "x", "a b c " * 40):
        assert np.abs(onnx_encoder.encode(query) - torch_encoder.encode(query)).max() <= 1e-5


def test_bfloat16_without_bfloat16_kernels_encodes_float32_with_a_warning(model_dir, monkeypatch):
    """Where the CPU has no bfloat16 kernels, bfloat16 would run tens of times slower than float32: float32 runs."""
    monkeypatch.setattr(hardware, "native_bfloat16", lambda device: False)
    expected = AggretrieverDocumentEncoder(str(model_dir), device="cpu").encode(TEXTS, max_length=128)
    with pytest.warns(UserWarning, match="has no bfloat16 kernels"):
        encoder = AggretrieverDocumentEncoder(str(model_dir), device="cpu", precision="bfloat16")
    assert {p.dtype for p in encoder.model.parameters()} == {torch.float32}
    np.testing.assert_array_equal(encoder.encode(TEXTS, max_length=128), expected)


def test_bfloat16_on_cpu_runs_bfloat16_weights(model_dir, bfloat16_kernels):
    """torch bfloat16 holds the model in bfloat16 (no per-chunk weight casts); the vectors stay close to float32."""
    expected = AggretrieverDocumentEncoder(str(model_dir), device="cpu").encode(TEXTS, max_length=128)
    encoder = AggretrieverDocumentEncoder(str(model_dir), device="cpu", precision="bfloat16")
    assert {p.dtype for p in encoder.model.parameters()} == {torch.bfloat16}
    got = encoder.encode(TEXTS, max_length=128)
    assert got.dtype == np.float32 and got.shape == expected.shape
    relative = np.linalg.norm(got - expected, axis=1) / np.linalg.norm(expected, axis=1)
    assert 1e-5 < relative.max() <= 0.05


def test_changed_settings_re_export_the_graphs(model_dir, tmp_path):
    """A graph exported before the model's config changed (here `dense_pooling`) is stale: it is exported again."""
    folder = Path(shutil.copytree(model_dir, tmp_path / "model"))
    onnx_dir = str(tmp_path / "onnx")
    AggretrieverDocumentEncoder(str(folder), backend="onnx", onnx_dir=onnx_dir).encode(TEXTS, max_length=128)
    config_path = folder / "aggretriever_config.json"
    settings = json.loads(config_path.read_text())
    settings["dense_pooling"] = "cls" if settings.get("dense_pooling", "cls") == "mean" else "mean"
    config_path.write_text(json.dumps(settings))
    later = os.stat(tmp_path / "onnx" / "aggretriever-body.onnx").st_mtime + 5
    os.utime(config_path, (later, later))
    expected = AggretrieverDocumentEncoder(str(folder), device="cpu").encode(TEXTS, max_length=128)
    got = AggretrieverDocumentEncoder(str(folder), backend="onnx", onnx_dir=onnx_dir).encode(TEXTS, max_length=128)
    assert np.abs(got - expected).max() <= 1e-5
