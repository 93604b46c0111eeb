"""Our Aggretriever equals Pyserini's own implementation on the same random tiny checkpoints.

Pyserini's classes fail to load checkpoints on transformers 5 (their `from_pretrained` path never calls
`post_init`), so the test builds Pyserini's model directly from a config and wires its encoder object by
hand: the patch lives here only.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from pyserini.encode import _aggretriever as pyserini_agg
from transformers import AutoTokenizer, BertConfig, DistilBertConfig

from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder, AggretrieverQueryEncoder

TEXTS = [
    "Aggretriever aggregates contextualized token embeddings into a single dense vector.",
    "short",
    "",
    "Ünïcödé text, emoji 🙂 and CJK 漢字 mixed with numbers 3.14159 and a very long tail " + "word " * 80,
    "Microglia are the resident immune cells of the central nervous system.",
]
QUERIES = ["what are microglia", "dense retrieval with lexical matching", "x"]


def _pyserini_model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    common = dict(vocab_size=30522, output_hidden_states=True)
    if kind == "bert":
        config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                            **common)
        model = pyserini_agg.BertAggretrieverEncoder(config)
    else:
        config = DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, **common)
        model = pyserini_agg.DistlBertAggretrieverEncoder(config)
    # random non-zero heads, so term weights have both signs and biases matter
    for head in (model.tok_proj, model.cls_proj):
        torch.nn.init.normal_(head.weight, std=0.5)
        torch.nn.init.normal_(head.bias, std=0.1)
    return model.eval()


@pytest.fixture(scope="module", params=["bert", "distilbert"])
def checkpoint(request, tmp_path_factory, splade_tiny_dir):
    """(Pyserini's model, our checkpoint folder) with the same weights."""
    model = _pyserini_model(request.param)
    folder = tmp_path_factory.mktemp(f"agg-{request.param}")
    model.config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")  # Pyserini's checkpoint format
    AutoTokenizer.from_pretrained(splade_tiny_dir).save_pretrained(folder)
    return model, folder


def _pyserini_document_encoder(model, folder):
    encoder = pyserini_agg.AggretrieverDocumentEncoder.__new__(pyserini_agg.AggretrieverDocumentEncoder)
    encoder.model, encoder.device = model, "cpu"
    encoder.tokenizer = AutoTokenizer.from_pretrained(folder)
    return encoder


def test_documents_match_pyserini(checkpoint):
    model, folder = checkpoint
    with torch.no_grad():
        expected = _pyserini_document_encoder(model, folder).encode(TEXTS, max_length=64)
    ours = AggretrieverDocumentEncoder(str(folder), device="cpu")
    ours.model.position_chunk = 7  # force several chunks, splitting sequences across chunk borders
    got = ours.encode(TEXTS, max_length=64)
    assert got.shape == expected.shape == (len(TEXTS), 768)
    assert np.abs(got - expected).max() <= 1e-5
    assert np.abs(expected).max() > 1e-3  # not trivially zero


def test_documents_with_titles_match_pyserini(checkpoint):
    model, folder = checkpoint
    titles = ["Title one", "", "T", "Ω", "Microglia"]
    with torch.no_grad():
        expected = _pyserini_document_encoder(model, folder).encode(TEXTS, titles=titles, max_length=32)
    got = AggretrieverDocumentEncoder(str(folder), device="cpu").encode(TEXTS, titles=titles, max_length=32)
    # Pyserini joins f"{title} {text}"; ours skips the blank for an empty title, which the tokenizer ignores
    assert np.abs(got - expected).max() <= 1e-5


def test_queries_match_pyserini(checkpoint):
    model, folder = checkpoint
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ours = AggretrieverQueryEncoder(encoder_dir=str(folder), device="cpu")
    for query in QUERIES:
        inputs = tokenizer(query, max_length=32, padding="longest", truncation=True, return_tensors="pt")
        with torch.no_grad():
            expected = model(**inputs).numpy().flatten()
        got = ours.encode(query)
        assert got.shape == (768,)
        assert np.abs(got - expected).max() <= 1e-5


def test_query_max_length_is_honoured(checkpoint):
    _, folder = checkpoint
    long_query = " ".join(f"term{i}" for i in range(60))
    short = AggretrieverQueryEncoder(encoder_dir=str(folder), device="cpu", max_length=8).encode(long_query)
    default = AggretrieverQueryEncoder(encoder_dir=str(folder), device="cpu").encode(long_query)
    longer = AggretrieverQueryEncoder(encoder_dir=str(folder), device="cpu", max_length=128).encode(long_query)
    assert np.abs(short - default).max() > 1e-4
    assert np.abs(longer - default).max() > 1e-4
    # a Pyserini-layout checkpoint's queries: 32 tokens, as Pyserini's own Aggretriever query encoder
    thirty_two = AggretrieverQueryEncoder(encoder_dir=str(folder), device="cpu", max_length=32).encode(long_query)
    np.testing.assert_array_equal(default, thirty_two)
