"""Backends and precisions of the DeepCT and AligneR encoders on real SciFact text (see encode/runtime.py).

float32 on ONNX Runtime matches torch to 1e-4 (the parity bound); bfloat16 (torch autocast on CPU) and int8 (ONNX
Runtime dynamic quantisation) stay within the measured bounds below; invalid combinations are errors.

The int8 bounds hold on CPUs with and without VNNI: without it (AVX2, e.g. AMD EPYC Zen 3) ONNX Runtime's
uint8 x int8 products saturate their 16-bit sums now and then, which roughly doubles the worst differences
(measured there: DeepCT 0.155 of the largest weight, AligneR pooled 0.054; with VNNI, Zen 4: < 0.15 and < 0.05).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from pyserini.encode import document_encoder_class_map, query_encoder_class_map

from pyserini_ext import registry
from pyserini_ext.encode.aligner import AlignerDocumentEncoder, AlignerQueryEncoder
from pyserini_ext.encode.deepct import DeepCTQueryEncoder, RuntimeDeepCTModel
from pyserini_ext.encode.runtime import EncoderRuntime, default_position_chunk
from pyserini_ext.models.aligner import AlignerModel
from pyserini_ext.models.deepct import DeepCTModel

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def texts(scifact):
    docs = [f"{d['title']} {d['text']}" for d in list(scifact.corpus.values())[:8]]
    return docs, list(scifact.queries.values())[:8]


@pytest.fixture(scope="module")
def deepct_dir(tmp_path_factory, splade_tiny_dir):
    torch.manual_seed(3)
    model = DeepCTModel.from_backbone(splade_tiny_dir)
    torch.nn.init.normal_(model.encoder.classifier.weight, std=0.5)
    return model.save_pretrained(tmp_path_factory.mktemp("deepct") / "model")


@pytest.fixture(scope="module")
def aligner_dir(tmp_path_factory, splade_tiny_dir):
    torch.manual_seed(3)
    return AlignerModel.from_backbone(splade_tiny_dir).save_pretrained(tmp_path_factory.mktemp("aligner") / "model")


def _weights(runs):
    return [w for run in runs for _, w in run], [word for run in runs for word, _ in run]


@pytest.mark.parametrize("precision, bound", [("float32", 1e-4), ("int8", 0.2)])
def test_deepct_onnx_word_weights(deepct_dir, texts, tmp_path, precision, bound):
    docs, queries = texts
    expected, expected_words = _weights(RuntimeDeepCTModel(deepct_dir).word_weights(docs + queries))
    onnx = RuntimeDeepCTModel(deepct_dir, EncoderRuntime("onnx", precision=precision, onnx_dir=str(tmp_path)))
    got, words = _weights(onnx.word_weights(docs + queries))
    assert words == expected_words and len(words) > 1000
    diff = np.abs(np.array(got) - np.array(expected)).max()
    if precision == "int8":  # relative to the largest weight; and it really is quantised
        diff /= np.abs(expected).max()
        assert diff > 1e-4
    assert diff <= bound


def test_deepct_bfloat16_on_cpu(deepct_dir, texts, bfloat16_kernels):
    docs, _ = texts
    expected, _ = _weights(RuntimeDeepCTModel(deepct_dir).word_weights(docs))
    got, _ = _weights(RuntimeDeepCTModel(deepct_dir, EncoderRuntime(precision="bfloat16")).word_weights(docs))
    # relative to the largest weight (~7): measured absolute diffs < 0.1 with AVX512-BF16 kernels, 0.123 without
    assert 1e-6 < np.abs(np.array(got) - np.array(expected)).max() / np.abs(expected).max() <= 0.03


def test_deepct_onnx_is_a_pyserini_query_encoder(deepct_dir, texts, tmp_path):
    query = texts[1][0]
    onnx = query_encoder_class_map["deepct-onnx"](str(deepct_dir), onnx_dir=str(tmp_path))
    assert onnx.weigher.model.runtime.backend == "onnx"
    assert onnx.encode(query) == DeepCTQueryEncoder(str(deepct_dir)).encode(query) != {}


@pytest.mark.parametrize("side", ["document", "query"])
def test_aligner_onnx_tokens_and_pooled(aligner_dir, texts, tmp_path, side):
    docs, queries = texts
    cls, batch = (AlignerDocumentEncoder, docs) if side == "document" else (AlignerQueryEncoder, queries)
    torch_encoder = cls(str(aligner_dir))
    onnx = cls(str(aligner_dir), backend="onnx", onnx_dir=str(tmp_path))
    for (v, w), (ov, ow) in zip(torch_encoder.encode_tokens(batch, beta=0.5), onnx.encode_tokens(batch, beta=0.5)):
        assert v.shape == ov.shape and np.abs(v - ov).max() <= 1e-4 and np.abs(w - ow).max() <= 1e-4
    assert np.abs(torch_encoder.pooled(batch, None, False) - onnx.pooled(batch, None, False)).max() <= 1e-4
    int8 = cls(str(aligner_dir), backend="onnx", precision="int8", onnx_dir=str(tmp_path))
    pooled_diff = np.abs(torch_encoder.pooled(batch, None, False) - int8.pooled(batch, None, False)).max()
    assert 1e-4 < pooled_diff <= 0.08
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"aligner-{side}.int8.onnx", f"aligner-{side}.onnx"]


def test_aligner_bfloat16_on_cpu(aligner_dir, texts, bfloat16_kernels):
    docs, _ = texts
    expected = AlignerDocumentEncoder(str(aligner_dir)).encode(docs)
    got = AlignerDocumentEncoder(str(aligner_dir), precision="bfloat16").encode(docs)
    assert got.dtype == np.float32 and 1e-5 < np.abs(got - expected).max() <= 0.05


def test_registered_onnx_names_bind_the_backend():
    for name in ("aggretriever-onnx", "aligner-onnx"):
        assert document_encoder_class_map[name].options == {"backend": "onnx"}
        assert registry.encoder_class(name, "query").keywords == {"backend": "onnx"}
    assert query_encoder_class_map["deepct-onnx"].options == {"backend": "onnx"}


@pytest.mark.parametrize("options, message", [
    ({"backend": "tensorrt"}, "unknown backend"),
    ({"precision": "int4"}, "unknown precision"),
    ({"precision": "int8"}, "use backend='onnx'"),
    ({"backend": "onnx", "precision": "bfloat16"}, "runs on the torch backend"),
    ({"position_chunk": 0}, "position_chunk"),
])
def test_invalid_runtimes_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        EncoderRuntime(**options)


def test_position_chunk_is_picked_per_device_unless_given():
    assert EncoderRuntime().position_chunk == 64
    # the same ~8 MB of logits per block in bfloat16 (runtime.py)
    assert default_position_chunk(torch.device("cpu"), "bfloat16") == 128
    assert EncoderRuntime(position_chunk=7).position_chunk == 7
    assert default_position_chunk(torch.device("cuda")) == 1024  # measured on an H200 (runtime.py)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_cuda_without_cuda_is_an_error(aligner_dir):
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        AlignerQueryEncoder(str(aligner_dir), device="cuda:0")


def test_index_commands_take_the_backend_and_precision(deepct_dir, aligner_dir, scifact, tmp_path, capsys):
    """`deepct index` and `aligner index` encode on the runtime their --backend/--precision name."""
    import json
    import re

    from pyserini_ext.cli.aligner import main as aligner_cli
    from pyserini_ext.cli.deepct import main as deepct_cli
    from pyserini_ext.index.aligner import EncodedCorpus

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": d, "contents": f"{doc['title']} {doc['text']}"}) + "\n"
                              for d, doc in list(scifact.corpus.items())[:12]))
    total_tf = {}
    for backend in ("torch", "onnx"):
        assert deepct_cli(["index", "--model", str(deepct_dir), "--corpus", str(corpus), "--backend", backend,
                           "--output", str(tmp_path / f"deepct-{backend}")]) == 0
        total_tf[backend] = int(re.search(r"total tf (\d+)", capsys.readouterr().out).group(1))
    assert total_tf["torch"] > 1000 and abs(total_tf["onnx"] - total_tf["torch"]) <= 2  # rounding at 1e-4

    encodings = {}
    for backend, precision in [("torch", "float32"), ("onnx", "float32"), ("onnx", "int8")]:
        path = tmp_path / f"aligner-{backend}-{precision}.npz"
        assert aligner_cli(["index", "--model", str(aligner_dir), "--corpus", str(corpus), "--backend", backend,
                            "--precision", precision, "--encoded", str(path),
                            "--output", str(tmp_path / f"aligner-{backend}-{precision}")]) == 0
        encodings[backend, precision] = EncodedCorpus.load(path).vectors.astype(np.float32)
    reference = encodings["torch", "float32"]
    assert np.abs(encodings["onnx", "float32"] - reference).max() <= 1e-3  # float16 store of the cache
    assert np.abs(encodings["onnx", "int8"] - reference).max() > 1e-3
    with pytest.raises(SystemExit):  # a usage error, before any work
        aligner_cli(["index", "--model", str(aligner_dir), "--corpus", str(corpus), "--precision", "int8",
                     "--output", str(tmp_path / "refused")])
    assert "use backend='onnx'" in capsys.readouterr().err and not (tmp_path / "refused").exists()
