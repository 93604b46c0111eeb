"""AligneR maths and model: entropy top-k, alignment scoring, salience, model folder round trip, bad input."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyserini_ext.errors import ModelFolderError
from pyserini_ext.models.aligner import DOCUMENT, QUERY, AlignerConfig, AlignerModel
from pyserini_ext.models.alignment import (
    MAXSIM,
    Alignment,
    alignment_scores,
    entropy_topk,
    hard_topk_mask,
    salience_keep_count,
)
from pyserini_ext.models.backbones import backbone_path


@pytest.fixture(autouse=True)
def one_torch_thread():
    # torch's 2-thread OpenMP pool is ~100x slower than 1 thread on this shared 2-core machine
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# ---- entropy-regularised top-k -----------------------------------------------------------------------------
@pytest.mark.parametrize("eps", [1.0, 0.1, 0.01, 0.002])
def test_entropy_topk_sums_to_k_and_stays_in_unit_interval(eps):
    torch.manual_seed(0)
    scores = torch.randn(6, 40, dtype=torch.float64)
    k = torch.tensor([1, 2, 5, 10, 20, 39])
    lam = entropy_topk(scores, k, eps=eps)
    assert torch.allclose(lam.sum(-1), k.double(), atol=1e-6)
    assert lam.min() >= 0 and lam.max() <= 1 + 1e-12


def test_entropy_topk_tends_to_hard_topk_as_eps_shrinks():
    torch.manual_seed(1)
    scores = torch.randn(4, 30, dtype=torch.float64)
    k = torch.tensor([1, 3, 7, 15])
    hard = hard_topk_mask(scores, k, torch.ones_like(scores, dtype=torch.bool)).double()
    distances = [(entropy_topk(scores, k, eps=eps) - hard).abs().max().item() for eps in (1.0, 0.1, 0.01, 1e-3, 1e-4)]
    assert distances == sorted(distances, reverse=True)  # monotone approach
    assert distances[0] > 0.3 and distances[-1] < 1e-6


def test_entropy_topk_respects_mask_and_passes_gradients():
    torch.manual_seed(2)
    scores = torch.randn(3, 20, requires_grad=True)
    mask = torch.ones(3, 20, dtype=torch.bool)
    mask[1, 12:] = False
    lam = entropy_topk(scores, torch.tensor([4, 12, 2]), eps=0.1, mask=mask)
    assert lam[1, 12:].abs().max() == 0
    assert torch.allclose(lam.sum(-1), torch.tensor([4.0, 12.0, 2.0]), atol=1e-4)
    (lam * torch.linspace(-1, 1, 20)).sum().backward()
    assert scores.grad is not None and torch.isfinite(scores.grad).all() and scores.grad.abs().sum() > 0.1
    assert scores.grad[1, 12:].abs().max() == 0


def test_entropy_topk_rejects_impossible_k():
    with pytest.raises(ValueError, match="exceeds"):
        entropy_topk(torch.zeros(1, 3), 4)
    with pytest.raises(ValueError, match="whole number"):
        entropy_topk(torch.zeros(1, 3), 1.5)
    with pytest.raises(ValueError, match="eps"):
        entropy_topk(torch.zeros(1, 3), 1, eps=0)


# ---- alignment scores ---------------------------------------------------------------------------------------
def _random_tokens(n_seq: int, length: int, dim: int = 16, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    vectors = torch.nn.functional.normalize(torch.randn(n_seq, length, dim, generator=generator), dim=-1)
    mask = torch.ones(n_seq, length, dtype=torch.bool)
    return vectors, mask


def test_top1_alignment_equals_brute_force_maxsim():
    queries, query_mask = _random_tokens(3, 5, seed=1)
    docs, doc_mask = _random_tokens(7, 9, seed=2)
    query_mask[0, 3:] = False
    doc_mask[2, 4:] = False
    scores = alignment_scores(queries, torch.ones(3, 5), query_mask, docs, torch.ones(7, 9), doc_mask, MAXSIM)
    for qi in range(3):
        q = queries[qi][query_mask[qi]]
        for di in range(7):
            d = docs[di][doc_mask[di]]
            maxsim = sum(max(float(q[i] @ d[j]) for j in range(len(d))) for i in range(len(q)))
            assert scores[qi, di].item() == pytest.approx(maxsim / len(q), abs=1e-5)


def _hand_example():
    # 1 query token, 1 document of 4 tokens with similarities 0.9, 0.5, 0.1, -0.3 (2-d unit vectors)
    angles = torch.tensor([0.9, 0.5, 0.1, -0.3]).acos()
    doc = torch.stack([angles.cos(), angles.sin()], dim=-1)[None]
    query = torch.tensor([[[1.0, 0.0]]])
    return query, doc


@pytest.mark.parametrize("alignment, expected", [
    (Alignment(k=1), 0.9),
    (Alignment(k=2), (0.9 + 0.5) / 2),
    (Alignment(k=3), (0.9 + 0.5 + 0.1) / 3),
    (Alignment(k=10), (0.9 + 0.5 + 0.1 - 0.3) / 4),  # k > m aligns every token
    (Alignment(k=None, p=0.5), (0.9 + 0.5) / 2),  # floor(0.5 * 4) = 2
    (Alignment(k=None, p=0.6), (0.9 + 0.5) / 2),  # floor(2.4) = 2
    (Alignment(k=None, p=0.01), 0.9),  # max(floor(0.04), 1) = 1
    (Alignment(k=None, p=1.0), (0.9 + 0.5 + 0.1 - 0.3) / 4),
])
def test_topk_and_topp_against_hand_example(alignment, expected):
    query, doc = _hand_example()
    score = alignment_scores(query, torch.ones(1, 1), torch.ones(1, 1), doc, torch.ones(1, 4), torch.ones(1, 4),
                             alignment)
    assert score.item() == pytest.approx(expected, abs=1e-6)


def test_salience_weights_the_aligned_pairs():
    query, doc = _hand_example()
    query = torch.cat([query, torch.tensor([[[0.0, 1.0]]])], dim=1)  # second query token, orthogonal to the first
    doc_weights = torch.tensor([[2.0, 1.0, 0.5, 1.0]])
    query_weights = torch.tensor([[3.0, 1.0]])
    score = alignment_scores(query, query_weights, torch.ones(1, 2), doc, doc_weights, torch.ones(1, 4),
                             Alignment(k=2))
    sines = (1 - torch.tensor([0.9, 0.5, 0.1, -0.3]) ** 2).sqrt()  # similarities of the second query token
    # token 1 (u=3) aligns to doc tokens 0 (0.9, u=2) and 1 (0.5, u=1); token 2 (u=1) to doc tokens 2 and 3
    numerator = 3 * (2 * 0.9 + 1 * 0.5) + 1 * (0.5 * sines[2] + 1.0 * sines[3])
    normaliser = 3 * (2 + 1) + 1 * (0.5 + 1.0)  # Z = sum(A) = sum of u^q u^d over aligned pairs
    assert score.item() == pytest.approx((numerator / normaliser).item(), abs=1e-6)
    # only relative salience matters: scaling every weight leaves the score unchanged
    rescaled = alignment_scores(query, 5 * query_weights, torch.ones(1, 2), doc, 7 * doc_weights, torch.ones(1, 4),
                                Alignment(k=2))
    assert rescaled.item() == pytest.approx(score.item(), abs=1e-6)
    # a zero-salience query token does not count at all
    only_first = alignment_scores(query, torch.tensor([[3.0, 0.0]]), torch.ones(1, 2), doc, doc_weights,
                                  torch.ones(1, 4), Alignment(k=2))
    assert only_first.item() == pytest.approx((2 * 0.9 + 0.5) / 3, abs=1e-6)


def test_alignment_parse_and_validation():
    assert Alignment.parse("k=4") == Alignment(k=4)
    assert Alignment.parse("p=1.5%") == Alignment(k=None, p=0.015)
    assert str(Alignment(k=None, p=0.005)) == "p=0.5%"
    with pytest.raises(ValueError, match="exactly one"):
        Alignment(k=2, p=0.1)
    with pytest.raises(ValueError, match="k >= 1"):
        Alignment(k=0)
    with pytest.raises(ValueError, match="cannot parse"):
        Alignment.parse("top3")


def test_alignment_rejects_empty_sequences():
    vectors, mask = _random_tokens(1, 3)
    with pytest.raises(ValueError, match="document has no"):
        alignment_scores(vectors, torch.ones(1, 3), mask, vectors, torch.ones(1, 3), torch.zeros(1, 3), MAXSIM)
    with pytest.raises(ValueError, match="query has no"):
        alignment_scores(vectors, torch.ones(1, 3), torch.zeros(1, 3), vectors, torch.ones(1, 3), mask, MAXSIM)


def test_salience_keep_count():
    assert salience_keep_count(torch.tensor([10, 3, 1, 0]), 0.4).tolist() == [4, 2, 1, 0]
    with pytest.raises(ValueError):
        salience_keep_count(torch.tensor([3]), 0.0)


# ---- model ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return AlignerModel.from_backbone(backbone_path("splade-tiny"), AlignerConfig(doc_max_length=64)).eval()


def test_model_outputs_unit_vectors_and_salience(model):
    encoded = model.encode_batch(["gene expression in mouse cells", "a"], QUERY)
    lengths = encoded.mask.sum(-1)
    assert encoded.vectors.shape[-1] == 128
    norms = encoded.vectors[encoded.mask].norm(dim=-1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)
    weights, kept = encoded.weights(0.5)
    assert kept.sum(-1).tolist() == [(int(n) + 1) // 2 for n in lengths]
    assert (weights[~kept] == 0).all() and (weights >= 0).all()
    soft, _ = encoded.weights(0.5, soft=True, eps=0.002)
    assert torch.allclose(soft, weights, atol=1e-3)  # eps -> 0: the soft training weights match pruning


def test_model_folder_round_trip(model, tmp_path):
    model.save_pretrained(tmp_path / "m")
    loaded = AlignerModel.from_pretrained(tmp_path / "m")
    assert loaded.fingerprint() == model.fingerprint()
    texts = ["protein folding", "vitamin D and bone density"]
    a, b = model.encode_texts(texts, DOCUMENT), loaded.encode_texts(texts, DOCUMENT)
    for (va, sa), (vb, sb) in zip(a, b):
        assert (va == vb).all() and (sa == sb).all()


def test_model_folder_with_float16_encoder_weights(model, tmp_path):
    """A shipped folder may store the encoder in float16 (half the bytes); it loads back as float32 and encodes
    within float16 rounding of the original."""
    model.save_pretrained(tmp_path / "full")
    model.save_pretrained(tmp_path / "half", encoder_dtype=torch.float16)
    full, half = (tmp_path / "full" / "model.safetensors").stat().st_size, \
        (tmp_path / "half" / "model.safetensors").stat().st_size
    assert 0.45 < half / full < 0.55
    loaded = AlignerModel.from_pretrained(tmp_path / "half")
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    assert loaded.fingerprint() != model.fingerprint()  # the rounded weights are another model
    texts = ["protein folding", "vitamin D and bone density"]
    for (va, sa), (vb, sb) in zip(model.encode_texts(texts, DOCUMENT), loaded.encode_texts(texts, DOCUMENT)):
        assert va.shape == vb.shape
        assert 0 < np.abs(va - vb).max() < 5e-3 and np.abs(sa - sb).max() < 5e-3


def test_model_bad_input(model, tmp_path):
    with pytest.raises(ValueError, match="empty query"):
        model.encode_texts(["ok", "   "], QUERY)
    with pytest.raises(ValueError, match="empty document"):
        model.encode_texts([""], DOCUMENT)
    with pytest.raises(ValueError, match="exceeds the encoder's limit of 512"):
        model.encode_texts(["x"], DOCUMENT, max_length=1000)
    long_doc = "cell " * 2000  # far beyond the model limit: truncated to doc_max_length
    (vectors, scores), = model.encode_texts([long_doc], DOCUMENT)
    assert vectors.shape == (64, 128) and scores.shape == (64,)
    with pytest.raises(ModelFolderError, match="expected an aligner model, found not a model folder"):
        AlignerModel.from_pretrained(tmp_path)


def test_training_scores_at_several_document_sparsities(model):
    """The unpruned loss term scores the same encoding with every document token kept: equal to a search at
    beta_d = 100%, and the alpha_d row equal to the usual training score."""
    from pyserini_ext.models.alignment import MAXSIM, alignment_scores
    from pyserini_ext.train.aligner import batch_scores

    queries = ["protein folding in cells", "bone density"]
    docs = ["vitamin D raises bone density in older adults", "misfolded proteins aggregate in neurons and cells"]
    with torch.no_grad():
        both = batch_scores(model, queries, docs, (model.config.alpha_d, 1.0))
        assert both.shape == (2, 2, 2)
        assert torch.allclose(both[0], batch_scores(model, queries, docs), atol=1e-6)
        q, d = model.encode_batch(queries, QUERY), model.encode_batch(docs, DOCUMENT)
        q_weights, q_kept = q.weights(model.config.alpha_q, soft=True, eps=model.config.eps,
                                      iterations=model.config.topk_iterations)
        unpruned = alignment_scores(q.vectors, q_weights, q_kept, d.vectors, *d.weights(1.0), MAXSIM)
    assert torch.allclose(both[1], unpruned, atol=1e-5)
    assert not torch.allclose(both[0], both[1], atol=1e-3)
