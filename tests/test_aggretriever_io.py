"""Aggretriever checkpoints (save/load, conversion, broken folders), pre-encoded queries and odd input."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from pyserini_ext.cli.__main__ import main as cli
from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder
from pyserini_ext.errors import ModelFolderError
from pyserini_ext.integration.encoders import AggretrieverQueryEncoder  # Pyserini's: pre-encoded queries too
from pyserini_ext.models.aggretriever import (
    Aggretriever,
    AggretrieverConfig,
    CheckpointError,
    convert_training_checkpoint,
    from_masked_lm,
)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory, splade_tiny_dir):
    torch.manual_seed(3)
    mlm = BertForMaskedLM(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32))
    folder = tmp_path_factory.mktemp("mlm")
    mlm.save_pretrained(folder)
    AutoTokenizer.from_pretrained(splade_tiny_dir).save_pretrained(folder)
    return folder


def test_save_load_round_trip_any_dims(tiny_folder, tmp_path):
    model = from_masked_lm(tiny_folder, AggretrieverConfig(agg_dim=96, cls_dim=32, pooling="agg+"))
    torch.nn.init.normal_(model.tok_proj.weight)
    model.save_pretrained(tmp_path / "m", AutoTokenizer.from_pretrained(tiny_folder))
    loaded = Aggretriever.from_pretrained(tmp_path / "m")
    assert (loaded.config.agg_dim, loaded.config.cls_dim, loaded.config.pooling) == (96, 32, "agg+")
    ids, mask = torch.tensor([[101, 2054, 2003, 102]]), torch.ones(1, 4, dtype=torch.long)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask), model(ids, mask))
    assert loaded(ids, mask).shape == (1, 128)


def test_float16_save_stores_the_tied_projection_once(tiny_folder, tmp_path):
    from safetensors import safe_open

    model = from_masked_lm(tiny_folder)
    model.save_pretrained(tmp_path / "m", AutoTokenizer.from_pretrained(tiny_folder), encoder_dtype=torch.float16)
    with safe_open(str(tmp_path / "m" / "model.safetensors"), "pt") as stored:
        keys = set(stored.keys())
        assert stored.get_tensor("encoder.bert.embeddings.word_embeddings.weight").dtype == torch.float16
        assert stored.get_tensor("tok_proj.weight").dtype == torch.float32
    assert "encoder.cls.predictions.decoder.weight" not in keys
    loaded = Aggretriever.from_pretrained(tmp_path / "m")
    assert loaded.encoder.cls.predictions.decoder.weight is loaded.encoder.get_input_embeddings().weight
    assert loaded.encoder.cls.predictions.decoder.weight.dtype == torch.float32
    ids, mask = torch.tensor([[101, 2054, 2003, 102]]), torch.ones(1, 4, dtype=torch.long)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask), model(ids, mask), rtol=0, atol=2e-3)


def test_plain_masked_lm_folder_is_rejected_naming_the_missing_heads(tiny_folder):
    with pytest.raises(CheckpointError, match="expected an aggretriever model, found a BertForMaskedLM model "
                                              "without our heads"):
        Aggretriever.from_pretrained(tiny_folder)


def test_corrupt_weights_file_is_named(tmp_path, tiny_folder):
    from_masked_lm(tiny_folder).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="model.safetensors: unreadable weights"):
        Aggretriever.from_pretrained(tmp_path)


def test_missing_folder_and_unreachable_hub_name():
    with pytest.raises(ModelFolderError, match="neither a local folder nor downloadable"):
        Aggretriever.from_pretrained("castorini/no-such-aggretriever-model")


def test_training_repo_checkpoint_converts(tiny_folder, tmp_path):
    """castorini/dhr layout: masked LM via save_pretrained + TermWeightTrans.pt and pooler.pt (tied)."""
    src = tmp_path / "dhr"
    BertForMaskedLM.from_pretrained(tiny_folder).save_pretrained(src)
    AutoTokenizer.from_pretrained(tiny_folder).save_pretrained(src)
    torch.manual_seed(5)
    heads = {"TermWeightTrans.pt": torch.nn.Linear(16, 1), "pooler.pt": torch.nn.Linear(16, 128)}
    for name, linear in heads.items():
        state = {f"linear_{s}.{p}": t for s in ("q", "p") for p, t in linear.state_dict().items()}
        torch.save(state, src / name)
    out = convert_training_checkpoint(src, tmp_path / "converted")
    model = Aggretriever.from_pretrained(out)
    torch.testing.assert_close(model.tok_proj.weight, heads["TermWeightTrans.pt"].weight)
    torch.testing.assert_close(model.cls_proj.bias, heads["pooler.pt"].bias)
    (src / "pooler.pt").unlink()
    with pytest.raises(CheckpointError, match="missing pooler.pt"):
        convert_training_checkpoint(src, tmp_path / "again")


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory, splade_tiny_dir):
    folder = tmp_path_factory.mktemp("demo")
    model = from_masked_lm(splade_tiny_dir, constant_term_weight=1.0, zero_cls=True)
    return model.save_pretrained(folder, AutoTokenizer.from_pretrained(splade_tiny_dir))


def test_odd_documents_encode_to_finite_vectors(demo_model):
    encoder = AggretrieverDocumentEncoder(str(demo_model), device="cpu")
    huge = " ".join(f"word{i % 997}" for i in range(10_000))
    docs = ["", "   ", huge, "\u200b\u200d\ufeff zero-width", "Ω≈ç√∫ 🙂 \U0001d518\U0001d52b", "normal text"]
    vectors = encoder.encode(docs, max_length=512)
    assert vectors.shape == (len(docs), 768) and np.isfinite(vectors).all()
    assert np.abs(vectors[:, :128]).max() == 0  # demo model: [CLS] part zeroed
    # the 10,000-word document is cut at 512 tokens: same vector as its first 512 tokens alone
    tokenizer = encoder.tokenizer
    head = tokenizer.decode(tokenizer(huge, max_length=512, truncation=True)["input_ids"][1:-1])
    np.testing.assert_allclose(encoder.encode([head], max_length=512)[0], vectors[2], atol=1e-5)


def test_lexical_demo_model_matches_shared_terms(demo_model):
    encoder = AggretrieverDocumentEncoder(str(demo_model), device="cpu")
    query = AggretrieverQueryEncoder(encoder_dir=str(demo_model), device="cpu").encode("microglia immune cells")
    docs = encoder.encode(["Microglia are the immune cells of the brain.", "Stock markets fell sharply today."])
    assert docs[0] @ query > 1.5 * (docs[1] @ query)


def test_pre_encoded_queries_load(tmp_path):
    pd.DataFrame({"text": ["what is x", "what is y"],
                  "embedding": [np.arange(768, dtype=np.float32), np.ones(768, dtype=np.float32)]}
                 ).to_pickle(tmp_path / "embedding.pkl")
    encoder = AggretrieverQueryEncoder(encoded_query_dir=str(tmp_path))
    np.testing.assert_array_equal(encoder.encode("what is y"), np.ones(768, dtype=np.float32))
    with pytest.raises(KeyError, match="not among the pre-encoded queries"):
        encoder.encode("unknown query")
    with pytest.raises(ValueError, match="needs a model"):
        AggretrieverQueryEncoder()


def test_cuda_request_without_cuda_is_a_clear_error(demo_model):
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        AggretrieverDocumentEncoder(str(demo_model), device="cuda")


def test_init_command_writes_a_mean_pooling_model(splade_tiny_dir, tmp_path):
    """`aggretriever init --dense-pooling mean`: the folder keeps the setting and the semantic part projects the
    mean of the non-padding states."""
    cli(["aggretriever", "init", "--model", str(splade_tiny_dir), "--output", str(tmp_path / "agg"),
         "--dense-pooling", "mean"])
    model = Aggretriever.from_pretrained(tmp_path / "agg")
    assert model.config.dense_pooling == "mean"
    inputs = AutoTokenizer.from_pretrained(tmp_path / "agg")(["microglia in the brain", "short"], padding=True,
                                                             return_tensors="pt")
    with torch.no_grad():
        vectors = model(inputs["input_ids"], inputs["attention_mask"])
        hidden = model.mlm_head.hidden_states(inputs["input_ids"], inputs["attention_mask"])
    for row in range(2):
        states = hidden[row, inputs["attention_mask"][row].bool()]
        expected = model.cls_proj(states.mean(0))
        torch.testing.assert_close(vectors[row, :model.config.cls_dim], expected, atol=1e-5, rtol=1e-5)
