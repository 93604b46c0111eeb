"""Independent numpy re-computation of Aggretriever's lexical vector, agg*, agg+ and the slicing rule."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from pyserini_ext.models.aggretriever import Aggretriever, AggretrieverConfig, aggregate, slice_layout


def numpy_slices(v: np.ndarray, width: int) -> np.ndarray:
    """Rows of `width` consecutive ids after the released drop/pad rule, written out by hand."""
    extra = len(v) % width
    if extra > 1000:
        v = np.concatenate([v, np.zeros(width - extra, dtype=v.dtype)])
    else:
        v = v[extra:]
    return np.stack([v[r * width:(r + 1) * width] for r in range(len(v) // width)])


def numpy_agg_star(v: np.ndarray, d: int) -> np.ndarray:
    col_max = numpy_slices(v, 2 * d).max(axis=0)
    out = np.empty(d, dtype=v.dtype)
    for j in range(d):
        pos, neg = col_max[2 * j], col_max[2 * j + 1]
        out[j] = pos if pos > neg else -neg
    return out


def numpy_agg_plus(v: np.ndarray, d: int) -> np.ndarray:
    return numpy_slices(v, d).max(axis=0)


def test_slice_layout_follows_released_rule():
    assert slice_layout(30522, 1280) == -198  # 30522 % 1280 = 1082 > 1000: pad 198 zeros to 30720
    assert slice_layout(30522, 640) == 442  # drop the first 442 ids
    assert slice_layout(100, 16) == 4


@pytest.mark.parametrize("vocab,d", [(100, 8), (30522, 640), (30522, 320), (257, 4)])
def test_aggregate_matches_numpy(vocab, d):
    rng = np.random.default_rng(vocab + d)
    lexical = rng.normal(size=(3, vocab)).astype(np.float32)
    star = aggregate(torch.from_numpy(lexical), d, full=True).numpy()
    plus = aggregate(torch.from_numpy(lexical), d, full=False).numpy()
    for row in range(3):
        np.testing.assert_array_equal(star[row], numpy_agg_star(lexical[row], d))
        np.testing.assert_array_equal(plus[row], numpy_agg_plus(lexical[row], d))


@pytest.fixture(scope="module")
def tiny_mlm():
    torch.manual_seed(1)
    config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32)
    return BertForMaskedLM(config).eval()


def numpy_lexical(logits: np.ndarray, weights: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """v[t] = max over positions 1..L-1 of softmax(logits_i)[t] * w_i * mask_i (padding gives zeros)."""
    v = np.full(logits.shape[-1], -np.inf)
    for i in range(1, logits.shape[0]):
        probs = np.exp(logits[i] - logits[i].max())
        probs /= probs.sum()
        v = np.maximum(v, probs * weights[i] * mask[i])
    return v


@pytest.mark.parametrize("pooling,decoder_bias", [("agg*", True), ("agg+", True), ("no-mlm", True), ("agg*", False)])
def test_forward_matches_numpy(tiny_mlm, pooling, decoder_bias):
    """decoder_bias False: a head without a decoder bias (the logits are then one product without the extra column)."""
    d = 8
    mlm = copy.deepcopy(tiny_mlm)
    if not decoder_bias:
        mlm.cls.predictions.decoder.bias = None
        mlm.cls.predictions.bias = None
    model = Aggretriever(mlm, AggretrieverConfig(agg_dim=d, cls_dim=4, pooling=pooling)).eval()
    torch.nn.init.normal_(model.tok_proj.weight, std=1.0)  # both signs of term weights
    model.position_chunk = 3
    input_ids = torch.tensor([[2, 17, 33, 17, 5, 3], [2, 40, 41, 3, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        got = model(input_ids, mask).numpy()
        out = mlm(input_ids=input_ids, attention_mask=mask, output_hidden_states=True)
        hidden = out.hidden_states[-1]
        weights = model.tok_proj(hidden).squeeze(-1).numpy()
        logits = out.logits.numpy().astype(np.float64)
        cls = model.cls_proj(hidden[:, 0]).numpy()
    for row in range(2):
        m = mask[row].numpy()
        if pooling == "no-mlm":  # w_i at the input id, max over valid positions; zeros elsewhere
            v = np.zeros(100)
            for i in range(1, 6):
                if m[i]:
                    v[input_ids[row, i]] = max(v[input_ids[row, i]], weights[row, i])
        else:
            v = numpy_lexical(logits[row], weights[row], m)
        agg = numpy_agg_plus(v, d) if pooling == "agg+" else numpy_agg_star(v, d)
        np.testing.assert_allclose(got[row, :4], cls[row], atol=1e-6)
        np.testing.assert_allclose(got[row, 4:], agg, atol=1e-6)
    assert got.shape == (2, 4 + d)
