"""Independent numpy re-computation of Aggretriever's lexical vector, agg*, agg+ and the slicing rule."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from pyserini_ext.models.aggretriever import (
    Aggretriever,
    AggretrieverConfig,
    aggregate,
    fold_slices,
    slice_layout,
    slice_max,
)


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


@pytest.mark.parametrize("pooling,decoder_bias,dense_pooling", [("agg*", True, "cls"), ("agg+", True, "cls"),
                                                                 ("no-mlm", True, "cls"), ("agg*", False, "cls"),
                                                                 ("agg+", True, "mean")])
def test_forward_matches_numpy(tiny_mlm, pooling, decoder_bias, dense_pooling):
    """decoder_bias False: a head without a decoder bias (the logits are then one product without the extra column).
    dense_pooling "mean": the semantic part projects the mean of the non-padding positions' states."""
    d = 8
    mlm = copy.deepcopy(tiny_mlm)
    if not decoder_bias:
        mlm.cls.predictions.decoder.bias = None
        mlm.cls.predictions.bias = None
    model = Aggretriever(mlm, AggretrieverConfig(agg_dim=d, cls_dim=4, pooling=pooling,
                                                 dense_pooling=dense_pooling)).eval()
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
        states = hidden.numpy().astype(np.float64)
    for row in range(2):
        m = mask[row].numpy()
        pooled_state = states[row, 0] if dense_pooling == "cls" else states[row, m == 1].mean(0)
        cls = pooled_state @ model.cls_proj.weight.detach().numpy().T + model.cls_proj.bias.detach().numpy()
        if pooling == "no-mlm":  # w_i at the input id, max over valid positions; zeros elsewhere
            v = np.zeros(100)
            for i in range(1, 6):
                if m[i]:
                    v[input_ids[row, i]] = max(v[input_ids[row, i]], weights[row, i])
        else:
            v = numpy_lexical(logits[row], weights[row], m)
        agg = numpy_agg_plus(v, d) if pooling == "agg+" else numpy_agg_star(v, d)
        np.testing.assert_allclose(got[row, :4], cls, atol=1e-5)
        np.testing.assert_allclose(got[row, 4:], agg, atol=1e-6)
    assert got.shape == (2, 4 + d)


def test_bfloat16_on_cpu_adds_the_decoder_bias_in_the_kernel(tiny_mlm):
    """bfloat16 on CPU leaves the bias out of the product (128 inner rows suit AMX tiles) and adds it to each block
    of logits: a large bias must still shape every distribution as the head's own logits say."""
    mlm = copy.deepcopy(tiny_mlm)
    with torch.no_grad():
        mlm.cls.predictions.decoder.bias.normal_(std=3.0)
    model = Aggretriever(mlm, AggretrieverConfig(agg_dim=8, cls_dim=0, pooling="agg*")).eval().to(torch.bfloat16)
    torch.nn.init.normal_(model.tok_proj.weight, std=1.0)
    model.position_chunk = 3
    input_ids = torch.tensor([[2, 17, 33, 17, 5, 3], [2, 40, 41, 3, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        got = model(input_ids, mask).float().numpy()
        hidden = model.mlm_head.hidden_states(input_ids, mask)
        logits = model.mlm_head.logits(hidden).double().numpy()
        weights = model.tok_proj(hidden).squeeze(-1).float().numpy()
        bias = mlm.cls.predictions.decoder.bias.double().numpy()
    assert model.mlm_head._decoder_columns.shape[0] == 16  # the product ran without the bias row
    for row in range(2):
        m = mask[row].numpy()
        expected = numpy_agg_star(numpy_lexical(logits[row], weights[row], m), 8)
        np.testing.assert_allclose(got[row], expected, rtol=3e-2, atol=2e-3)
        without_bias = numpy_agg_star(numpy_lexical(logits[row] - bias, weights[row], m), 8)
        assert np.abs(without_bias - expected).max() > 0.05  # the check above would see a lost bias


@pytest.mark.parametrize("pooling", ["agg*", "agg+"])
@pytest.mark.parametrize("vocab", [3660, 1100])
def test_encoding_without_v_matches_v_on_a_padded_vocabulary(pooling, vocab):
    """Encoding pools each position's slice extrema instead of building v; with 3,660 (or 1,100) ids and 640
    dims, agg*'s 1,280-wide slices need the released rule's zero padding after a partial last row (or a partial row
    alone), agg+ drops ids: each equals slicing v itself."""
    torch.manual_seed(2)
    config = BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32)
    model = Aggretriever(BertForMaskedLM(config), AggretrieverConfig(agg_dim=640, cls_dim=0, pooling=pooling)).eval()
    torch.nn.init.normal_(model.tok_proj.weight, std=1.0)
    model.position_chunk = 4
    input_ids = torch.randint(5, vocab, (3, 9))
    mask = torch.ones_like(input_ids)
    mask[1, 5:] = 0
    mask[2, 1:] = 0  # [CLS] alone
    with torch.no_grad():
        got = model(input_ids, mask).numpy()
        hidden = model.mlm_head.hidden_states(input_ids, mask)
        logits = model.mlm_head.logits(hidden).numpy().astype(np.float64)
        weights = model.tok_proj(hidden).squeeze(-1).numpy()
    assert (weights[:2, 1:] < 0).any() and (weights[:2, 1:] > 0).any()
    for row in range(3):
        v = numpy_lexical(logits[row], weights[row], mask[row].numpy())
        expected = numpy_agg_plus(v, 640) if pooling == "agg+" else numpy_agg_star(v, 640)
        np.testing.assert_allclose(got[row], expected, atol=1e-6)
    np.testing.assert_array_equal(got[2], 0)


@pytest.fixture
def fresh_compile_state(monkeypatch):
    """block_slice_maxima's compiled kernel and failure flag, reset for the test and restored after it."""
    import pyserini_ext.models.aggretriever.kernel as agg

    monkeypatch.setattr(agg, "_compiled_slice_maxima", None)
    monkeypatch.setattr(agg, "_compile_failed", False)
    monkeypatch.delenv("PYSERINI_EXT_COMPILE", raising=False)
    return agg


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_block_kernel_equals_eager_on_a_real_vocabulary(fresh_compile_state, dtype):
    """Full 64-row blocks of BERT's 30,522 logits go through torch.compile; agg*'s padded slices and agg+'s dropped
    ids, both weight signs: the same values as eager torch and as a float64 softmax."""
    agg = fresh_compile_state
    rng = torch.Generator().manual_seed(3)
    logits = (torch.randn(64, 30522, generator=rng) * 4).to(dtype)
    weights = torch.randn(64, generator=rng)
    for width in (1280, 640):
        got = agg.block_slice_maxima(logits, weights, width, full_block=True)
        assert agg._compiled_slice_maxima is not None and not agg._compile_failed
        eager = agg.position_slice_maxima(logits, weights, width)
        probs = torch.softmax(logits.double(), -1) * weights.double()[:, None]
        expected = torch.stack([slice_max(row[None], width)[0] for row in probs])
        np.testing.assert_allclose(got.numpy(), eager.numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-7)
    assert got.dtype == torch.float32


def test_compile_failure_falls_back_to_eager_with_a_warning(fresh_compile_state):
    """No working C++ compiler: inductor fails for real; the block is encoded eagerly, once with a warning."""
    import torch._inductor.config as inductor_config

    agg = fresh_compile_state
    torch._dynamo.reset()
    logits, weights = torch.randn(48, 5000), torch.rand(48)  # a shape no other test compiles
    with (inductor_config.patch({"cpp.cxx": ("/nonexistent/g++",), "fx_graph_cache": False}),
          pytest.warns(UserWarning, match="torch.compile could not build")):
        got = agg.block_slice_maxima(logits, weights, 640, full_block=True)
    assert agg._compile_failed
    np.testing.assert_array_equal(got.numpy(), agg.position_slice_maxima(logits, weights, 640).numpy())
    torch._dynamo.reset()


@pytest.mark.parametrize("pooling", ["agg*", "agg+"])
@pytest.mark.parametrize("vocab", [3660, 1100, 2000])
@pytest.mark.parametrize("block_rows", [None, 3])
def test_training_path_equals_autograd_through_v(pooling, vocab, block_rows, monkeypatch):
    """Training takes `weighted_softmax_slice_max` (a sparse backward); in float64 its values and the gradients of
    every parameter equal autograd's through v = max_i w_i softmax(l_i) (`lexical`) and `slice_max`, with negative
    weights, padded sequences, a [CLS]-only one, and vocabularies that drop ids (2000, 3660 for agg+) or pad them;
    in one block of rows and in blocks of 3."""
    import pyserini_ext.models.aggretriever.kernel as agg

    if block_rows:
        monkeypatch.setattr(agg, "_row_blocks", lambda logits: [(a, min(a + block_rows, len(logits)))
                                                                for a in range(0, len(logits), block_rows)])
    torch.manual_seed(5)
    config = BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32)
    model = Aggretriever(BertForMaskedLM(config), AggretrieverConfig(agg_dim=640, cls_dim=8, pooling=pooling))
    model = model.double().train()
    torch.nn.init.normal_(model.tok_proj.weight, std=1.0)
    for module in model.modules():  # no dropout: both passes must see the same network
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    input_ids = torch.randint(5, vocab, (4, 9))
    mask = torch.ones_like(input_ids)
    mask[1, 5:] = 0
    mask[2, 1:] = 0  # [CLS] alone
    mask[3, 7:] = 0
    probe = torch.randn(4, 8 + 640, dtype=torch.float64)

    def loss_and_grads(reference: bool):
        model.zero_grad()
        if reference:
            hidden = model.mlm_head.hidden_states(input_ids, mask)
            width = 640 if pooling == "agg+" else 1280
            agg = fold_slices(slice_max(model.lexical(input_ids, mask, hidden), width), pooling != "agg+")
            out = torch.cat((model.dense(mask, hidden), agg), dim=-1)
        else:
            out = model(input_ids, mask)
        (out * probe).sum().backward()
        return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    got, got_grads = loss_and_grads(reference=False)
    expected, expected_grads = loss_and_grads(reference=True)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert got_grads.keys() == expected_grads.keys()
    assert got_grads["tok_proj.weight"].abs().sum() > 0
    for name in expected_grads:
        torch.testing.assert_close(got_grads[name], expected_grads[name], rtol=1e-9, atol=1e-12, msg=name)


def test_training_path_runs_under_bfloat16_autocast(tiny_mlm):
    """Under autocast the logits come in bfloat16: the values are float32 and close to float32's, the gradients
    reach the heads."""
    model = Aggretriever(copy.deepcopy(tiny_mlm), AggretrieverConfig(agg_dim=8, cls_dim=4, pooling="agg+")).train()
    input_ids = torch.randint(5, tiny_mlm.config.vocab_size, (2, 6))
    mask = torch.ones_like(input_ids)
    mask[1, 4:] = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    exact = model(input_ids, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(input_ids, mask)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, exact, rtol=5e-2, atol=5e-2)
    low.sum().backward()
    assert model.tok_proj.weight.grad.abs().sum() > 0
