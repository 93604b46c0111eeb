"""The full-width layout: the semantic part is the body's own mean-pooled, L2-normalised state (all-MiniLM-L6-v2 as
sentence-transformers runs it) times a scale, beside the lexical part; trained with the body frozen."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder, AggretrieverQueryEncoder
from pyserini_ext.models.aggretriever import (
    Aggretriever,
    AggretrieverConfig,
    from_masked_lm,
    identity_semantic_head,
)
from pyserini_ext.models.folder import resolve_model
from pyserini_ext.train.aggretriever import AggretrieverModelConfig, train_aggretriever
from pyserini_ext.train.data import LabelledData
from pyserini_ext.train.distill import MiniLMTeacher
from pyserini_ext.train.loop import TrainConfig

FULL_WIDTH = AggretrieverConfig(cls_dim=384, pooling="agg+", dense_pooling="mean", dense_normalize=True,
                                query_max_length=512)
TEXTS = ["Microglia are the resident immune cells of the brain.", "insulin resistance", "x " * 80]


@pytest.fixture(scope="module")
def full_width(minilm_dir, tmp_path_factory):
    torch.manual_seed(0)
    model = from_masked_lm(minilm_dir, FULL_WIDTH, constant_term_weight=1.0)
    identity_semantic_head(model, 3.0)
    return model.save_pretrained(tmp_path_factory.mktemp("full") / "m", AutoTokenizer.from_pretrained(minilm_dir))


def test_semantic_part_is_the_teacher_vector_times_the_scale(full_width):
    vectors = AggretrieverDocumentEncoder(str(full_width)).encode(TEXTS, max_length=64)
    teacher = MiniLMTeacher().encode(TEXTS, 64)
    assert vectors.shape == (3, 384 + 640)
    np.testing.assert_allclose(vectors[:, :384], 3.0 * teacher, rtol=0, atol=2e-6)
    query = AggretrieverQueryEncoder(str(full_width)).encode(TEXTS[1])
    np.testing.assert_allclose(query[:384] @ vectors[:, :384].T, 9.0 * (teacher[1] @ teacher.T), rtol=0, atol=1e-5)
    assert (vectors[:, 384:] > 0).any()


def test_layout_round_trips_and_pyserini_layout_is_unchanged(full_width):
    loaded = Aggretriever.from_pretrained(full_width)
    assert (loaded.config.cls_dim, loaded.config.dense_pooling, loaded.config.dense_normalize, loaded.dim) == (
        384, "mean", True, 1024)
    torch.testing.assert_close(loaded.cls_proj.weight, 3.0 * torch.eye(384))
    assert AggretrieverConfig().dense_normalize is False  # Pyserini's layout: [CLS], 128, no normalisation


def test_query_length_comes_from_the_model_folder(full_width):
    long_query = " ".join(f"word{i}" for i in range(40))  # over 32 tokens
    assert Aggretriever.from_pretrained(full_width).config.query_max_length == 512
    default = AggretrieverQueryEncoder(str(full_width)).encode(long_query)
    np.testing.assert_array_equal(default, AggretrieverQueryEncoder(str(full_width), max_length=512).encode(long_query))
    assert np.abs(default - AggretrieverQueryEncoder(str(full_width), max_length=32).encode(long_query)).max() > 1e-3
    shipped = Aggretriever.from_pretrained(resolve_model("aggretriever")).config
    assert (shipped.dense_pooling, shipped.query_max_length) == ("mean", 512)
    # the shipped default scales a long query's lexical part (issue 56: n0 = 24, chosen on the development sets)
    assert shipped.query_lexical_tokens == 24
    from pyserini_ext.train.recipes import RECIPES
    assert RECIPES["aggretriever"].model.architecture.query_lexical_tokens == 24
    assert AggretrieverConfig().query_max_length == 32  # Pyserini's layout: as Pyserini encodes queries
    with pytest.raises(ValueError, match="query_max_length must be >= 2"):
        AggretrieverConfig(query_max_length=1)


def test_identity_head_needs_the_body_width(minilm_dir):
    model = from_masked_lm(minilm_dir, AggretrieverConfig(cls_dim=128, dense_pooling="mean"))
    with pytest.raises(ValueError, match="cls_dim == the body's width 384"):
        identity_semantic_head(model)
    with pytest.raises(ValueError, match="saved_semantic_scale"):
        AggretrieverModelConfig("all-minilm-l6-v2", saved_semantic_scale=2.0)


def test_frozen_body_training_moves_only_the_lexical_heads(minilm_dir, scifact, tmp_path):
    spec = AggretrieverModelConfig("all-minilm-l6-v2", architecture=FULL_WIDTH, heads="lexical", freeze_body=True,
                                   semantic_scale=3.0, saved_semantic_scale=2.0, passage_max_length=32)
    torch.manual_seed(0)
    start = from_masked_lm(minilm_dir, FULL_WIDTH, constant_term_weight=1.0)
    model, losses = train_aggretriever(spec, LabelledData.from_dataset(scifact, negatives="none"),
                                       TrainConfig(learning_rate=1e-3, batch_size=2, max_steps=3), tmp_path / "m")
    assert len(losses) == 3 and all(np.isfinite(losses))
    before, after = start.state_dict(), model.state_dict()
    body = [k for k in after if k.startswith("encoder.bert.")]
    assert body and all(torch.equal(before[k], after[k]) for k in body)
    transform = "encoder.cls.predictions.transform.dense.weight"
    assert not torch.equal(before[transform], after[transform])
    assert not torch.equal(before["tok_proj.weight"], after["tok_proj.weight"])
    saved = AggretrieverDocumentEncoder(str(tmp_path / "m")).encode(TEXTS, max_length=64)
    np.testing.assert_allclose(saved[:, :384], 2.0 * MiniLMTeacher().encode(TEXTS, 64), rtol=0, atol=2e-6)


def test_untied_decoder_learns_and_round_trips(minilm_dir, scifact, tmp_path):
    spec = AggretrieverModelConfig("all-minilm-l6-v2", architecture=FULL_WIDTH, heads="lexical", freeze_body=True,
                                   semantic_scale=3.0, untie_decoder=True, passage_max_length=32)
    model, _ = train_aggretriever(spec, LabelledData.from_dataset(scifact, negatives="none"),
                                  TrainConfig(learning_rate=1e-3, batch_size=2, max_steps=2), tmp_path / "m")
    embeddings, decoder = model.encoder.get_input_embeddings().weight, model.mlm_head.decode.weight
    assert decoder is not embeddings and not torch.equal(decoder, embeddings)
    loaded = Aggretriever.from_pretrained(tmp_path / "m")
    torch.testing.assert_close(loaded.mlm_head.decode.weight, decoder.detach(), rtol=0, atol=0)
    assert loaded.mlm_head.decode.weight is not loaded.encoder.get_input_embeddings().weight
    ids, mask = torch.tensor([[101, 2054, 2003, 102]]), torch.ones(1, 4, dtype=torch.long)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask), model.eval()(ids, mask), rtol=0, atol=1e-6)


def test_init_and_train_commands_make_the_default_layout(splade_tiny_dir, tmp_path):
    """`aggretriever init --full-width` + `train --freeze-body --semantic-scale`: the default model's recipe on any
    body (here splade-tiny, width 128): the body stays as it was, the saved semantic part is its normalised mean
    state times the saved scale."""
    from pyserini_ext.cli.aggretriever import main

    assert main(["init", "--model", str(splade_tiny_dir), "--output", str(tmp_path / "init"), "--full-width",
                 "--semantic-scale", "2", "--pooling", "agg+"]) == 0
    start = Aggretriever.from_pretrained(tmp_path / "init")
    assert (start.config.cls_dim, start.config.dense_normalize, start.dim) == (128, True, 128 + 640)
    assert main(["train", "--model", str(tmp_path / "init"), "--dataset", "scifact", "--output", str(tmp_path / "m"),
                 "--max-steps", "2", "--batch-size", "2", "--passage-max-length", "32", "--negatives", "none",
                 "--freeze-body", "--semantic-scale", "2", "--saved-semantic-scale", "3"]) == 0
    trained = Aggretriever.from_pretrained(tmp_path / "m")
    before, after = start.state_dict(), trained.state_dict()
    body = [k for k in after if k.startswith("encoder.bert.")]
    assert body and all(torch.equal(before[k], after[k]) for k in body)
    assert not torch.equal(before["tok_proj.weight"], after["tok_proj.weight"])
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "m")
    inputs = tokenizer(TEXTS, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        vectors = trained(inputs["input_ids"], inputs["attention_mask"])
        hidden = trained.mlm_head.hidden_states(inputs["input_ids"], inputs["attention_mask"])
    mask = inputs["attention_mask"].unsqueeze(-1).float()
    mean = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    torch.testing.assert_close(vectors[:, :128], 3.0 * mean, atol=1e-5, rtol=1e-5)


def test_long_queries_have_their_lexical_part_scaled_down(full_width, tmp_path):
    """query_lexical_tokens = n0: a query of n > n0 tokens has its lexical part times n0 / n, its semantic part and
    every document vector unchanged; queries of n0 tokens or fewer are untouched."""
    import json
    import shutil

    gated = tmp_path / "gated"
    shutil.copytree(full_width, gated)
    settings = json.loads((gated / "aggretriever_config.json").read_text())
    (gated / "aggretriever_config.json").write_text(json.dumps({**settings, "query_lexical_tokens": 8}))
    assert Aggretriever.from_pretrained(gated).config.query_lexical_tokens == 8
    plain, scaled = AggretrieverQueryEncoder(str(full_width)), AggretrieverQueryEncoder(str(gated))
    long_query = " ".join(["insulin"] * 32)  # 32 tokens: factor 8 / 32
    short_query = "insulin resistance"
    np.testing.assert_array_equal(scaled.encode(short_query), plain.encode(short_query))
    before, after = plain.encode(long_query), scaled.encode(long_query)
    np.testing.assert_array_equal(after[:384], before[:384])
    np.testing.assert_allclose(after[384:], before[384:] * 0.25, rtol=1e-6, atol=0)
    assert np.abs(before[384:]).max() > 0.01
    np.testing.assert_array_equal(AggretrieverDocumentEncoder(str(gated)).encode([long_query]),
                                  AggretrieverDocumentEncoder(str(full_width)).encode([long_query]))
    np.testing.assert_allclose(AggretrieverConfig(query_lexical_tokens=24).query_lexical_scales([3, 24, 48, 96]),
                               [1.0, 1.0, 0.5, 0.25])
    np.testing.assert_array_equal(AggretrieverConfig().query_lexical_scales([1, 500]), [1.0, 1.0])
    with pytest.raises(ValueError, match="query_lexical_tokens must be >= 1"):
        AggretrieverConfig(query_lexical_tokens=0)
