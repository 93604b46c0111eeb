"""Aggretriever training: the loss against an explicit computation, the gradient path against the inference
path, and a few real training steps on SciFact train."""
from __future__ import annotations

import json
import math
import random

import pytest
import torch
from transformers import AutoTokenizer

from pyserini_ext.data import DatasetError, document_text
from pyserini_ext.models.aggretriever import Aggretriever, AggretrieverConfig, from_masked_lm
from pyserini_ext.train.aggretriever import (
    AggretrieverModelConfig,
    aggretriever_loss,
    train_aggretriever,
    training_queries,
)
from pyserini_ext.train.data import LabelledData
from pyserini_ext.train.loop import TrainConfig


def explicit_nll(queries: list[list[float]], passages: list[list[float]],
                 excluded: frozenset[tuple[int, int]] = frozenset()) -> float:
    """Mean over queries i of -log softmax_j(q_i . p_j)[i], j not in `excluded` with i, with plain floats."""
    total = 0.0
    for i, query in enumerate(queries):
        scores = {j: sum(a * b for a, b in zip(query, passage)) for j, passage in enumerate(passages)
                  if (i, j) not in excluded}
        total += math.log(sum(math.exp(s) for s in scores.values())) - scores[i]
    return total / len(queries)


def test_loss_equals_explicit_computation():
    # cls_dim = 1: column 0 is the [CLS] part, columns 1..2 the agg part; passages 2, 3 are hard negatives
    queries = [[0.5, 1.0, -0.2], [-1.0, 0.3, 0.8]]
    passages = [[0.4, 0.9, 0.1], [-0.7, 0.2, 1.1], [0.0, -0.5, 0.3], [1.2, 0.6, -0.4]]
    expected = (explicit_nll(queries, passages)
                + 0.5 * explicit_nll([q[1:] for q in queries], [p[1:] for p in passages])
                + 0.5 * explicit_nll([q[:1] for q in queries], [p[:1] for p in passages]))
    loss = aggretriever_loss(torch.tensor(queries), torch.tensor(passages), cls_dim=1)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    only_concat = aggretriever_loss(torch.tensor(queries), torch.tensor(passages), cls_dim=0)
    assert only_concat.item() == pytest.approx(explicit_nll(queries, passages), rel=1e-6)

    excluded = frozenset({(0, 1), (1, 3)})
    mask = torch.tensor([[(i, j) in excluded for j in range(4)] for i in range(2)])
    expected = (explicit_nll(queries, passages, excluded)
                + 0.5 * explicit_nll([q[1:] for q in queries], [p[1:] for p in passages], excluded)
                + 0.5 * explicit_nll([q[:1] for q in queries], [p[:1] for p in passages], excluded))
    masked = aggretriever_loss(torch.tensor(queries), torch.tensor(passages), cls_dim=1, false_negatives=mask)
    assert masked.item() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="own positive"):
        aggretriever_loss(torch.tensor(queries), torch.tensor(passages), cls_dim=1, false_negatives=torch.eye(2, 4) > 0)
    with pytest.raises(ValueError, match="at least as many passages"):
        aggretriever_loss(torch.tensor(queries), torch.tensor(passages[:1]), cls_dim=1)


@pytest.mark.parametrize("pooling", ["agg*", "agg+", "no-mlm"])
def test_gradient_path_equals_inference_path(splade_tiny_dir, pooling):
    torch.manual_seed(0)
    model = from_masked_lm(splade_tiny_dir, AggretrieverConfig(pooling=pooling))
    tokenizer = AutoTokenizer.from_pretrained(splade_tiny_dir)
    # different lengths, so one sequence is padded (max(v, 0) rule) and one is not
    inputs = tokenizer(["protein folding", "cells divide when the growth signal is strong enough"],
                       padding=True, return_tensors="pt")
    # and a hand-made row of [CLS] alone (all else masked): v is all zeros on both paths
    only_cls = torch.zeros_like(inputs["attention_mask"][:1])
    only_cls[0, 0] = 1
    inputs = {"input_ids": torch.cat([inputs["input_ids"], inputs["input_ids"][:1]]),
              "attention_mask": torch.cat([inputs["attention_mask"], only_cls])}
    with torch.no_grad():
        inference = model(inputs["input_ids"], inputs["attention_mask"])
    with_grad = model(inputs["input_ids"], inputs["attention_mask"])
    assert with_grad.requires_grad
    torch.testing.assert_close(with_grad, inference, rtol=0, atol=1e-6)
    with_grad.square().sum().backward()
    encoder_weight = model.encoder.get_input_embeddings().weight
    for name, parameter in [("tok_proj", model.tok_proj.weight), ("cls_proj", model.cls_proj.weight),
                            ("encoder", encoder_weight)]:
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, f"no gradient reaches {name}"


def test_no_mlm_pooling_runs_under_bfloat16_autocast(splade_tiny_dir):
    """Training's bf16 precision: under autocast the body's states leave LayerNorm in float32 while tok_proj's
    weights come out in bfloat16; the no-mlm scatter once refused the mix (scatter(): Expected self.dtype ...)."""
    model = from_masked_lm(splade_tiny_dir, AggretrieverConfig(pooling="no-mlm"))
    tokenizer = AutoTokenizer.from_pretrained(splade_tiny_dir)
    inputs = tokenizer(["protein folding", "cells divide when the growth signal is strong enough"],
                       padding=True, return_tensors="pt")
    with torch.no_grad():
        reference = model(inputs["input_ids"], inputs["attention_mask"])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(inputs["input_ids"], inputs["attention_mask"])
    assert low.requires_grad and (low[:, model.config.cls_dim:] != 0).sum() == (reference[:, model.config.cls_dim:]
                                                                                 != 0).sum()
    torch.testing.assert_close(low.float(), reference, rtol=0.05, atol=0.05)


def test_bad_training_data_gives_clear_errors(scifact, tmp_path):
    with pytest.raises(ValueError, match="zero training pairs"):
        training_queries({"d1": {"title": "", "text": "x"}}, {"q1": "query"}, {"q1": {"d2": 1}})
    with pytest.raises(ValueError, match="batch_size >= 2"):
        train_aggretriever(AggretrieverModelConfig("splade-tiny"), LabelledData.from_dataset(scifact),
                           TrainConfig(batch_size=1), tmp_path)
    with pytest.raises(DatasetError, match="no qrels for split 'dev'"):
        LabelledData.from_dataset(scifact, split="dev")
    with pytest.raises(ValueError, match="negatives must be one of"):
        LabelledData.from_dataset(scifact, negatives="hard")
    with pytest.raises(ValueError, match="heads must be one of"):
        AggretrieverModelConfig("splade-tiny", heads="zero")


def encode(model: Aggretriever, tokenizer, texts: list[str], max_length: int) -> torch.Tensor:
    inputs = tokenizer(texts, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(inputs["input_ids"], inputs["attention_mask"])


def fixed_batch_loss(model: Aggretriever, tokenizer, scifact, count: int = 8) -> float:
    """The training loss on the first `count` training queries and their first positives (no negatives)."""
    examples = training_queries(scifact.corpus, scifact.queries, scifact.qrels("train"))[:count]
    query_vectors = encode(model, tokenizer, [e.text for e in examples], 32)
    passage_vectors = encode(model, tokenizer, [document_text(scifact.corpus[e.positives[0]]) for e in examples], 64)
    return aggretriever_loss(query_vectors, passage_vectors, model.config.cls_dim).item()


def judged_vs_random_mrr(model: Aggretriever, tokenizer, scifact, queries: int = 30, negatives: int = 9,
                         passage_max_length: int = 64) -> float:
    """MRR of a judged relevant document among it and `negatives` random unjudged ones (SciFact test queries)."""
    qrels = scifact.qrels("test")
    docids = sorted(scifact.corpus)
    qids = sorted(qrels)[:queries]
    candidates = []
    for qid in qids:
        positive = next(d for d, rel in sorted(qrels[qid].items()) if rel > 0)
        drawn = [d for d in random.Random(qid).sample(docids, negatives + 5) if d not in qrels[qid]]
        candidates.append([positive] + drawn[:negatives])
    query_vectors = encode(model, tokenizer, [scifact.queries[q] for q in qids], 32)
    flat = [d for row in candidates for d in row]
    doc_vectors = torch.cat([encode(model, tokenizer, [document_text(scifact.corpus[d]) for d in flat[i:i + 50]],
                                    passage_max_length)
                             for i in range(0, len(flat), 50)]).reshape(len(qids), negatives + 1, -1)
    scores = torch.einsum("qd,qcd->qc", query_vectors, doc_vectors)
    ranks = 1 + (scores[:, 1:] > scores[:, :1]).sum(1)
    return (1.0 / ranks).mean().item()


@pytest.fixture(scope="module")
def trained(splade_tiny_dir, scifact, tmp_path_factory):
    """30 steps of 8 queries on SciFact train (about 20 s here), and the untrained model they started from."""
    config = TrainConfig(learning_rate=3e-4, max_steps=30, seed=42, batch_size=8)
    torch.manual_seed(config.seed)  # the same new heads as train_aggretriever draws
    untrained = from_masked_lm(splade_tiny_dir)
    out = tmp_path_factory.mktemp("aggretriever-train") / "model"
    model, losses = train_aggretriever(AggretrieverModelConfig("splade-tiny", passage_max_length=64),
                                       LabelledData.from_dataset(scifact), config, out)
    return untrained, model, losses, out


def test_short_training_lowers_the_loss_and_saves(trained, splade_tiny_dir, scifact):
    untrained, model, losses, out = trained
    assert len(losses) == 30 and all(math.isfinite(x) for x in losses)
    tokenizer = AutoTokenizer.from_pretrained(splade_tiny_dir)
    before, after = fixed_batch_loss(untrained, tokenizer, scifact), fixed_batch_loss(model, tokenizer, scifact)
    print(f"fixed-batch loss: untrained {before:.4f}, trained {after:.4f}; "
          f"curve mean of first 5 {sum(losses[:5]) / 5:.4f}, of last 5 {sum(losses[-5:]) / 5:.4f}")
    assert after < before
    assert sum(losses[-5:]) < sum(losses[:5])
    reloaded = Aggretriever.from_pretrained(out)
    assert fixed_batch_loss(reloaded, tokenizer, scifact) == pytest.approx(after, rel=1e-5)
    log = json.loads((out / "training_log.json").read_text())
    assert log["losses"] == losses and log["config"]["batch_size"] == 8 and log["config"]["max_steps"] == 30


def test_short_training_ranks_judged_documents_higher(trained, splade_tiny_dir, scifact):
    # Measured here: 0.66 untrained -> 0.88 after these 30 steps. The lexical-only demo model is a stronger
    # baseline: beating it takes an epoch (test_one_epoch_beats_the_demo_model, slow).
    untrained, model, _, _ = trained
    tokenizer = AutoTokenizer.from_pretrained(splade_tiny_dir)
    before = judged_vs_random_mrr(untrained, tokenizer, scifact)
    after = judged_vs_random_mrr(model, tokenizer, scifact)
    print(f"judged vs 9 random, MRR on 30 SciFact test queries: untrained {before:.3f}, trained {after:.3f}")
    assert after > before + 0.1


@pytest.mark.slow
def test_one_epoch_beats_the_demo_model(splade_tiny_dir, scifact, tmp_path):
    """One epoch on SciFact train (101 steps of 8, about 2 min here) against the untrained lexical-only model."""
    model, _ = train_aggretriever(AggretrieverModelConfig("splade-tiny"), LabelledData.from_dataset(scifact),
                                  TrainConfig(learning_rate=3e-4, batch_size=8), tmp_path / "model")
    demo = from_masked_lm(splade_tiny_dir, constant_term_weight=1.0, zero_cls=True)
    tokenizer = AutoTokenizer.from_pretrained(splade_tiny_dir)
    demo_mrr, trained_mrr = (judged_vs_random_mrr(m, tokenizer, scifact, queries=100, passage_max_length=128)
                             for m in (demo, model))
    print(f"judged vs 9 random, MRR on 100 SciFact test queries: demo {demo_mrr:.3f}, one epoch {trained_mrr:.3f}")
    assert trained_mrr > demo_mrr


def test_train_command(tmp_path, capsys):
    from pyserini_ext.cli.aggretriever import main

    out = tmp_path / "model"
    assert main(["train", "--model", "splade-tiny", "--dataset", "scifact", "--output", str(out), "--max-steps", "2",
                 "--batch-size", "2", "--passage-max-length", "32", "--negatives", "none"]) == 0
    assert "(2 steps)" in capsys.readouterr().out
    log = json.loads((out / "training_log.json").read_text())
    assert log["negatives"] == "none" and log["data"] == "scifact/train" and log["passage_max_length"] == 32
    assert len(log["losses"]) == 2 and log["config"]["batch_size"] == 2
    assert Aggretriever.from_pretrained(out).dim == 768
