"""AligneR training: contrastive NLL over in-batch and hard negatives, top-1 alignment, salience sparsity.

Each example is (query, positive, hard negative). A batch of B examples scores every query against all 2B
documents (its own positive, the other positives, and all hard negatives) with the top-1 alignment (MaxSim) and
the training saliences u = lambda * ReLU(s), lambda the entropy top-k at alpha_q / alpha_d. Loss: cross-entropy
of the positive among the 2B documents, scores divided by a temperature.

Hard negatives (`LabelledData.negatives`): BM25 top-`bm25_depth` documents of each training query (Pyserini's
own Lucene indexer and `LuceneSearcher` over a JsonCollection written to a temporary folder), minus its judged
documents; or "random" unjudged documents (no JVM needed); or "none". With a `DistillationSet` instead, the same
scores are fitted to the teacher ensemble (listwise KL over each query's candidates plus in-batch NLL).
"""
from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace

import torch

from pyserini_ext.data import document_text
from pyserini_ext.models.aligner import DOCUMENT, QUERY, AlignerConfig, AlignerModel
from pyserini_ext.models.alignment import MAXSIM, alignment_scores
from pyserini_ext.models.backbones import BACKBONES, backbone_path
from pyserini_ext.train.data import LabelledData
from pyserini_ext.train.distill import DistillationSet, distillation_batches, distillation_loss, steps_per_epoch
from pyserini_ext.train.loop import TrainConfig, save_training_log, set_seed, train


@dataclass
class AlignerModelConfig:
    """What is trained (the first argument of `train_aligner`): the backbone, the new model's shape, the loss
    temperature."""
    model: str  # packaged backbone name, or a folder / hub name
    architecture: AlignerConfig | None = None  # saliences, sparsity, lengths (default: AlignerConfig())
    temperature: float = 0.05  # alignment scores are divided by it in either loss's softmax
    store_dtype: str = "float32"  # "float16" halves the saved encoder weights (they load back as float32)
    # > 0: the loss is also computed with every document token kept (beta_d = 100%) and added with this weight, so
    # that the tokens kept at alpha_d carry the same ranking as the whole document (pruning costs less)
    unpruned_loss_weight: float = 0.0


@dataclass
class LabelledBatch:
    query_texts: list[str]
    passage_texts: list[str]  # the B positives, then (with hard negatives) one negative per query


def training_examples(data: LabelledData, seed: int = 42) -> list[tuple[str, str, list[str]]]:
    """(qid, positive docid, hard negative pool) for every judged relevant pair whose query text is known; the
    pool is the query's BM25 ranking minus its judged documents ("bm25"), `bm25_depth` random documents
    ("random"), or empty ("none")."""
    corpus, queries, qrels = data.corpus, data.queries, data.qrels
    judged = {qid: {d for d, rel in docs.items() if rel > 0 and d in corpus} for qid, docs in qrels.items()
              if qid in queries and queries[qid].strip()}
    judged = {qid: docs for qid, docs in judged.items() if docs}
    if not judged:
        raise ValueError("no training pairs: no judged relevant document is in the corpus")
    if data.negatives == "bm25":
        ranking = data.bm25_rankings
    elif data.negatives == "random":
        rng = random.Random(seed)
        docids = list(corpus)
        ranking = {qid: rng.sample(docids, min(data.bm25_depth, len(docids))) for qid in judged}
    else:
        ranking = None
    examples = []
    for qid, positives in judged.items():
        pool = [] if ranking is None else ([d for d in ranking.get(qid, []) if d not in qrels[qid]]
                                          or [d for d in corpus if d not in positives])
        examples += [(qid, pos, pool) for pos in sorted(positives)]
    return examples


def batch_scores(model: AlignerModel, query_texts: list[str], doc_texts: list[str],
                 doc_fractions: tuple[float, ...] | None = None) -> torch.Tensor:
    """[queries, documents] top-1 alignment scores with the training saliences (entropy top-k at alpha_q/d).

    doc_fractions: score at each of these document sparsities instead of alpha_d (one encoding):
    [len(doc_fractions), queries, documents].
    """
    config = model.config
    queries = model.encode_batch(query_texts, QUERY)
    docs = model.encode_batch(doc_texts, DOCUMENT)
    query_weights, query_kept = queries.weights(config.alpha_q, soft=True, eps=config.eps,
                                                iterations=config.topk_iterations)
    scores = []
    for fraction in doc_fractions or (config.alpha_d,):
        doc_weights, doc_kept = docs.weights(fraction, soft=True, eps=config.eps, iterations=config.topk_iterations)
        scores.append(alignment_scores(queries.vectors, query_weights, query_kept, docs.vectors, doc_weights,
                                       doc_kept, MAXSIM))
    return torch.stack(scores) if doc_fractions else scores[0]


def train_aligner(model: AlignerModelConfig, data: LabelledData | DistillationSet, config: TrainConfig | None = None,
                  out_dir: str | os.PathLike | None = None,
                  checkpoint_dir: str | os.PathLike | None = None) -> tuple[AlignerModel, list[float]]:
    """Train AligneR; saves the model folder and training_log.json in `out_dir`.

    Judged pairs (`LabelledData`): NLL of each query's positive among the batch's positives and hard negatives.
    A teacher ensemble (`DistillationSet`): listwise KL to the teacher over each query's candidates plus
    in-batch NLL. Scores: the salience-weighted top-1 alignment / `model.temperature`.
    """
    config = config or TrainConfig()
    set_seed(config.seed)  # new heads
    name = str(model.model)
    # the folder records where its body came from: a packaged backbone by its name, never this machine's path
    aligner = AlignerModel.from_backbone(backbone_path(name) if name in BACKBONES else name,
                                         replace(model.architecture, backbone=model.architecture.backbone or name))
    objective = _labelled_objective if isinstance(data, LabelledData) else _distillation_objective
    make_batches, steps, batch_loss, log = objective(data, config)

    fractions = (aligner.config.alpha_d, 1.0) if model.unpruned_loss_weight > 0 else (aligner.config.alpha_d,)
    loss_weights = (1.0, model.unpruned_loss_weight)

    def loss_fn(aligner: AlignerModel, batch) -> torch.Tensor:
        scores = batch_scores(aligner, batch.query_texts, batch.passage_texts, fractions) / model.temperature
        return sum(weight * batch_loss(s, batch) for weight, s in zip(loss_weights, scores))

    losses = train(aligner, make_batches, loss_fn, config, steps, desc="train aligner", checkpoint_dir=checkpoint_dir)
    if out_dir is not None:
        aligner.save_pretrained(out_dir, encoder_dtype=getattr(torch, model.store_dtype))
        save_training_log(out_dir, config, losses, backbone=name, temperature=model.temperature,
                          unpruned_loss_weight=model.unpruned_loss_weight,
                          last10_mean_loss=float(sum(losses[-10:]) / len(losses[-10:])), **log)
    return aligner, losses


def _labelled_objective(data: LabelledData, config: TrainConfig):
    examples = training_examples(data, seed=config.seed)
    if len(examples) < 2:
        raise ValueError("contrastive training needs at least 2 (query, positive) pairs")
    batch_size = config.batch_size
    steps_per_epoch = max(1, len(examples) // batch_size)

    def make_batches(epoch: int) -> Iterator[LabelledBatch]:
        rng = random.Random(config.seed + epoch)
        order = examples[:]
        rng.shuffle(order)
        for start in range(0, steps_per_epoch * batch_size, batch_size):
            chunk = order[start:start + batch_size]
            if len(chunk) < 2:
                return
            positives = [document_text(data.corpus[pos]) for _, pos, _ in chunk]
            hard = [document_text(data.corpus[rng.choice(pool)]) for _, _, pool in chunk if pool]
            yield LabelledBatch([data.queries[qid] for qid, _, _ in chunk], positives + hard)

    def batch_loss(scores: torch.Tensor, _) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(scores, torch.arange(len(scores), device=scores.device))

    return make_batches, steps_per_epoch, batch_loss, data.log() | {"examples": len(examples)}


def _distillation_objective(data: DistillationSet, config: TrainConfig):
    return (lambda epoch: distillation_batches(data, config.batch_size, config.group_size, config.seed, epoch),
            steps_per_epoch(data, config), lambda scores, batch: distillation_loss(scores, batch.teacher, config),
            {"data": "distillation", "training_queries": len(data.queries)})
