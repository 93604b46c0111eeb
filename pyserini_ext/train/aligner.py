"""AligneR training: contrastive NLL over in-batch and hard negatives, top-1 alignment, salience sparsity.

Each example is (query, positive, hard negative). A batch of B examples scores every query against all 2B
documents (its own positive, the other positives, and all hard negatives) with the top-1 alignment (MaxSim) and
the training saliences u = lambda * ReLU(s), lambda the entropy top-k at alpha_q / alpha_d. Loss: cross-entropy
of the positive among the 2B documents, scores divided by a temperature.

Hard negatives: BM25 top-`depth` documents of each training query (Pyserini's own Lucene indexer and
`LuceneSearcher` over a JsonCollection written to a temporary folder), minus its judged documents; or, with
negatives="random", uniformly drawn unjudged documents (no JVM needed).
"""
from __future__ import annotations

import math
import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass

import torch

from pyserini_ext.data import document_text
from pyserini_ext.models.aligner import DOCUMENT, QUERY, AlignerConfig, AlignerModel
from pyserini_ext.models.alignment import MAXSIM, alignment_scores
from pyserini_ext.models.backbones import BACKBONES, backbone_path
from pyserini_ext.train.loop import TrainConfig, save_training_log, set_seed, train

NEGATIVE_SOURCES = ("bm25", "random")


@dataclass
class AlignerLossConfig:
    temperature: float = 0.05
    batch_size: int = 16


def bm25_negatives(corpus: Mapping[str, Mapping[str, str]], queries: Mapping[str, str], depth: int = 30,
                   threads: int = 1) -> dict[str, list[str]]:
    """qid -> BM25 ranking (top `depth` docids) with Pyserini over a temporary Lucene index of `corpus`."""
    from pyserini_ext.train.distill import bm25_rankings
    return {qid: [docid for docid, _ in hits] for qid, hits in bm25_rankings(corpus, queries, depth, threads).items()}


def training_examples(corpus: Mapping[str, Mapping[str, str]], queries: Mapping[str, str],
                      qrels: Mapping[str, Mapping[str, int]], negatives: str = "bm25", depth: int = 30,
                      seed: int = 42) -> list[tuple[str, str, list[str]]]:
    """(qid, positive docid, negative docid pool) for every judged relevant pair whose query text is known."""
    if negatives not in NEGATIVE_SOURCES:
        raise ValueError(f"negatives must be one of {NEGATIVE_SOURCES}, got {negatives!r}")
    judged = {qid: {d for d, rel in docs.items() if rel > 0 and d in corpus} for qid, docs in qrels.items()
              if qid in queries and queries[qid].strip()}
    judged = {qid: docs for qid, docs in judged.items() if docs}
    if not judged:
        raise ValueError("no training pairs: no judged relevant document is in the corpus")
    if negatives == "bm25":
        ranking = bm25_negatives(corpus, {q: queries[q] for q in judged}, depth)
    else:
        rng = random.Random(seed)
        docids = list(corpus)
        ranking = {qid: rng.sample(docids, min(depth, len(docids))) for qid in judged}
    examples = []
    for qid, positives in judged.items():
        pool = [d for d in ranking.get(qid, []) if d not in qrels[qid]] or [d for d in corpus if d not in positives]
        examples += [(qid, pos, pool) for pos in sorted(positives)]
    return examples


def batch_scores(model: AlignerModel, query_texts: list[str], doc_texts: list[str]) -> torch.Tensor:
    """[queries, documents] top-1 alignment scores with the training saliences (entropy top-k at alpha_q/d)."""
    config = model.config
    queries = model.encode_batch(query_texts, QUERY)
    docs = model.encode_batch(doc_texts, DOCUMENT)
    query_weights, query_kept = queries.weights(config.alpha_q, soft=True, eps=config.eps,
                                                iterations=config.topk_iterations)
    doc_weights, doc_kept = docs.weights(config.alpha_d, soft=True, eps=config.eps,
                                         iterations=config.topk_iterations)
    return alignment_scores(queries.vectors, query_weights, query_kept, docs.vectors, doc_weights, doc_kept,
                            MAXSIM)


def contrastive_loss(model: AlignerModel, batch: tuple[list[str], list[str]], temperature: float) -> torch.Tensor:
    """NLL of each query's positive (document i of the first half) among all documents of the batch."""
    query_texts, doc_texts = batch
    scores = batch_scores(model, query_texts, doc_texts)
    labels = torch.arange(len(query_texts), device=scores.device)
    return torch.nn.functional.cross_entropy(scores / temperature, labels)


def train_aligner(backbone: str | os.PathLike, corpus: Mapping[str, Mapping[str, str]],
                  queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], out_dir: str | os.PathLike,
                  model_config: AlignerConfig | None = None, train_config: TrainConfig | None = None,
                  loss_config: AlignerLossConfig | None = None, negatives: str = "bm25",
                  examples: list[tuple[str, str, list[str]]] | None = None) -> tuple[AlignerModel, list[float]]:
    """Train an AligneR model from a backbone folder; saves the model folder and training_log.json in out_dir."""
    train_config = train_config or TrainConfig()
    loss_config = loss_config or AlignerLossConfig()
    if examples is None:
        examples = training_examples(corpus, queries, qrels, negatives, seed=train_config.seed)
    model = AlignerModel.from_backbone(backbone, model_config)
    batch_size = loss_config.batch_size
    if len(examples) < 2:
        raise ValueError("contrastive training needs at least 2 (query, positive) pairs")
    steps_per_epoch = max(1, len(examples) // batch_size)

    def make_batches(epoch: int) -> Iterator[tuple[list[str], list[str]]]:
        rng = random.Random(train_config.seed + epoch)
        order = examples[:]
        rng.shuffle(order)
        for start in range(0, steps_per_epoch * batch_size, batch_size):
            chunk = order[start:start + batch_size]
            if len(chunk) < 2:
                return
            query_texts = [queries[qid] for qid, _, _ in chunk]
            positives = [document_text(corpus[pos]) for _, pos, _ in chunk]
            hard = [document_text(corpus[rng.choice(pool)]) for _, _, pool in chunk]
            yield query_texts, positives + hard

    losses = train(model, make_batches, lambda m, b: contrastive_loss(m, b, loss_config.temperature),
                   train_config, steps_per_epoch, desc="train aligner")
    model.save_pretrained(out_dir)
    save_training_log(out_dir, train_config, losses, negatives=negatives, examples=len(examples),
                      temperature=loss_config.temperature, batch_size=batch_size,
                      first_loss=losses[0], last_loss=float(sum(losses[-10:]) / len(losses[-10:])),
                      log_batch=math.log(2 * batch_size))
    return model, losses


def distill_aligner(backbone: str | os.PathLike, data, out_dir: str | os.PathLike,
                    model_config: AlignerConfig | None = None, train_config: TrainConfig | None = None,
                    distill_config=None, temperature: float = 0.05,
                    checkpoint_dir: str | os.PathLike | None = None) -> tuple[AlignerModel, list[float]]:
    """Distil the teacher ensemble of `data` (a train.distill.DistillationSet) into AligneR: listwise KL over each
    query's candidates plus in-batch NLL on the salience-weighted alignment scores / `temperature`. The new
    heads learn at `distill_config.head_learning_rate`, the pretrained encoder at `train_config.learning_rate`."""
    from pyserini_ext.train.distill import DistillTrainConfig, distillation_batches, distillation_loss, steps_per_epoch

    train_config = train_config or TrainConfig()
    distill_config = distill_config or DistillTrainConfig()
    set_seed(train_config.seed)  # new heads
    name = str(backbone)
    model = AlignerModel.from_backbone(backbone_path(name) if name in BACKBONES else backbone, model_config)
    body = [p for n, p in model.named_parameters() if n.startswith("encoder.")]
    heads = [p for n, p in model.named_parameters() if not n.startswith("encoder.")]
    groups = [{"params": body}, {"params": heads, "lr": distill_config.head_learning_rate}]

    def loss_fn(model: AlignerModel, batch) -> torch.Tensor:
        scores = batch_scores(model, batch.query_texts, batch.passage_texts) / temperature
        return distillation_loss(scores, batch.teacher, distill_config)

    losses = train(model, lambda epoch: distillation_batches(data, distill_config.batch_size,
                                                             distill_config.group_size, train_config.seed, epoch),
                   loss_fn, train_config, steps_per_epoch(data, distill_config), desc="distil aligner",
                   parameter_groups=groups, checkpoint_dir=checkpoint_dir)
    model.save_pretrained(out_dir)
    save_training_log(out_dir, train_config, losses, distillation=asdict(distill_config), temperature=temperature,
                      training_queries=len(data.queries), backbone=str(backbone))
    return model, losses
