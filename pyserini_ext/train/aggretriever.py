"""Aggretriever training: contrastive NLL on the concatenated vector, plus the same loss on each of its parts.

As in the released training code (castorini/dhr, see ../shared/design/reference-notes.md): a batch of B queries
is scored by inner product against its B positives (each query's own positive is the label, the others are
in-batch negatives) and, optionally, one hard negative per query. The loss is
  NLL(concat) + 0.5 * NLL(agg part) + 0.5 * NLL([CLS] part),
the parts split at `cls_dim` (the model puts the [CLS] projection first). Queries are cut at 32 tokens,
passages at 128, as in the paper's training.

Tevatron-style sampling: one example per training query and epoch, its positive drawn from its judged relevant
passages. A passage of the batch that is judged relevant to a query other than its own (SciFact train: 248 of
565 relevant documents are relevant to several queries) is left out of that query's softmax rather than
counted as a negative. Hard negatives are "random other documents" (uniform over the corpus minus the query's
judged documents, no BM25 index needed), redrawn every epoch from the seed.
"""
from __future__ import annotations

import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor
from transformers import AutoTokenizer

from pyserini_ext.data import BeirDataset, document_text, load_dataset
from pyserini_ext.models.aggretriever import (
    AGG_CONFIG_NAME,
    Aggretriever,
    AggretrieverConfig,
    from_masked_lm,
    resolve_model_folder,
)
from pyserini_ext.models.backbones import BACKBONES, backbone_path
from pyserini_ext.train.loop import TrainConfig, save_training_log, set_seed, train

QUERY_MAX_LENGTH = 32
PASSAGE_MAX_LENGTH = 128
PART_WEIGHT = 0.5  # weight of the agg-only and of the [CLS]-only loss, as in the released training code


@dataclass
class TrainingQuery:
    qid: str
    text: str
    positives: list[str]  # judged relevant docids in the corpus, sorted
    judged: frozenset[str]  # every judged docid of the query (relevant or not): never drawn as a negative


def training_queries(corpus: Mapping[str, Mapping[str, str]], queries: Mapping[str, str],
                     qrels: Mapping[str, Mapping[str, int]]) -> list[TrainingQuery]:
    """Queries with text and at least one judged relevant passage in the corpus, sorted by qid."""
    examples = []
    for qid in sorted(qrels):
        text = queries.get(qid, "").strip()
        positives = sorted(d for d, rel in qrels[qid].items() if rel > 0 and d in corpus)
        if text and positives:
            examples.append(TrainingQuery(qid, text, positives, frozenset(qrels[qid])))
    if not examples:
        raise ValueError("zero training pairs: no query with text has a judged relevant document in the corpus")
    return examples


def random_negative(rng: random.Random, docids: list[str], judged: frozenset[str]) -> str:
    """A uniformly drawn document that is not judged for the query."""
    if len(judged) >= len(docids) and judged.issuperset(docids):
        raise ValueError("no random negative: every corpus document is judged for the query")
    while True:
        docid = rng.choice(docids)
        if docid not in judged:
            return docid


def nll(query_vectors: Tensor, passage_vectors: Tensor, excluded: Tensor | None = None) -> Tensor:
    """Cross-entropy of query i's positive, passage i, among all passages (inner-product scores) but those
    where `excluded[i, j]` is True."""
    scores = query_vectors @ passage_vectors.T
    if excluded is not None:
        scores = scores.masked_fill(excluded, float("-inf"))
    return torch.nn.functional.cross_entropy(scores, torch.arange(len(query_vectors), device=scores.device))


def aggretriever_loss(query_vectors: Tensor, passage_vectors: Tensor, cls_dim: int,
                      false_negatives: Tensor | None = None) -> Tensor:
    """NLL(concat) + 0.5 NLL(agg) + 0.5 NLL([CLS]); passages [0, B) are the positives, the rest negatives.

    `false_negatives[i, j]` (bool, [B, passages]) leaves passage j out of query i's softmax; it must not mark
    a query's own positive. Without a [CLS] part (cls_dim = 0) the agg part is the whole vector and only the
    concat loss remains.
    """
    queries, passages = query_vectors.shape[0], passage_vectors.shape[0]
    if passages < queries:
        raise ValueError(f"{queries} queries need at least as many passages (their positives), got {passages}")
    if false_negatives is not None:
        if false_negatives.shape != (queries, passages):
            raise ValueError(f"false_negatives must be [{queries}, {passages}], got {list(false_negatives.shape)}")
        if false_negatives.diagonal().any():
            raise ValueError("false_negatives marks a query's own positive")
    loss = nll(query_vectors, passage_vectors, false_negatives)
    if cls_dim == 0:
        return loss
    agg_loss = nll(query_vectors[:, cls_dim:], passage_vectors[:, cls_dim:], false_negatives)
    cls_loss = nll(query_vectors[:, :cls_dim], passage_vectors[:, :cls_dim], false_negatives)
    return loss + PART_WEIGHT * agg_loss + PART_WEIGHT * cls_loss


def load_trainable_model(backbone_or_model_dir: str | os.PathLike,
                         model_config: AggretrieverConfig | None = None) -> tuple[Aggretriever, Path]:
    """An Aggretriever folder (has aggretriever_config.json) goes on training; a masked-LM backbone (folder,
    hub name or packaged name) gets new heads. Returns the model and the folder its tokenizer is in."""
    name = str(backbone_or_model_dir)
    folder = backbone_path(name) if name in BACKBONES else resolve_model_folder(backbone_or_model_dir)
    if (folder / AGG_CONFIG_NAME).is_file():
        if model_config is not None:
            raise ValueError(f"{folder} is already an Aggretriever (its config is in {AGG_CONFIG_NAME}); "
                             "model_config applies only to a masked-LM backbone")
        return Aggretriever.from_pretrained(folder), folder
    return from_masked_lm(folder, model_config), folder


def train_aggretriever(backbone_or_model_dir: str | os.PathLike, dataset: str | os.PathLike | BeirDataset,
                       out_dir: str | os.PathLike, train_config: TrainConfig | None = None,
                       model_config: AggretrieverConfig | None = None, split: str = "train", batch_size: int = 8,
                       hard_negatives: bool = True, query_max_length: int = QUERY_MAX_LENGTH,
                       passage_max_length: int = PASSAGE_MAX_LENGTH) -> tuple[Aggretriever, list[float]]:
    """Train on a BEIR dataset's `split` qrels; saves a Pyserini-format folder and training_log.json in out_dir.

    Deterministic for a given `train_config.seed`: new heads, sampling and negatives all come from it.
    """
    train_config = train_config or TrainConfig()
    if batch_size < 2:
        raise ValueError(f"contrastive training needs batch_size >= 2, got {batch_size}")
    if min(query_max_length, passage_max_length) < 2:
        raise ValueError("query and passage max lengths must be >= 2 ([CLS] plus one token)")
    if not isinstance(dataset, BeirDataset):
        dataset = load_dataset(dataset)
    corpus = dataset.corpus
    examples = training_queries(corpus, dataset.queries, dataset.qrels(split))
    if len(examples) < 2:
        raise ValueError(f"contrastive training needs at least 2 training queries, the {split} split has 1")
    set_seed(train_config.seed)  # new heads are initialised at load time
    model, folder = load_trainable_model(backbone_or_model_dir, model_config)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    docids = sorted(corpus)
    steps_per_epoch = max(1, len(examples) // batch_size)

    def tokenize(texts: list[str], max_length: int) -> dict[str, Tensor]:
        inputs = tokenizer(texts, max_length=max_length, truncation=True, padding="longest", return_tensors="pt")
        return {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}

    def make_batches(epoch: int) -> Iterator[tuple[dict[str, Tensor], dict[str, Tensor], Tensor]]:
        rng = random.Random(train_config.seed + epoch)
        order = examples[:]
        rng.shuffle(order)
        for start in range(0, steps_per_epoch * batch_size, batch_size):
            chunk = order[start:start + batch_size]
            passages = [rng.choice(example.positives) for example in chunk]
            if hard_negatives:
                passages += [random_negative(rng, docids, example.judged) for example in chunk]
            false_negatives = torch.tensor([[j != i and docid in example.positives for j, docid in enumerate(passages)]
                                            for i, example in enumerate(chunk)])
            yield (tokenize([example.text for example in chunk], query_max_length),
                   tokenize([document_text(corpus[docid]) for docid in passages], passage_max_length), false_negatives)

    def loss_fn(model: Aggretriever, batch: tuple[dict[str, Tensor], dict[str, Tensor], Tensor]) -> Tensor:
        query_inputs, passage_inputs, false_negatives = batch
        queries, passages = ({k: v.to(train_config.device) for k, v in side.items()}
                             for side in (query_inputs, passage_inputs))
        return aggretriever_loss(model(**queries), model(**passages), model.config.cls_dim,
                                 false_negatives.to(train_config.device))

    losses = train(model, make_batches, loss_fn, train_config, steps_per_epoch, desc="train aggretriever")
    model.save_pretrained(out_dir, tokenizer)
    save_training_log(out_dir, train_config, losses, base_model=str(backbone_or_model_dir), dataset=dataset.name,
                      split=split, training_queries=len(examples), batch_size=batch_size,
                      hard_negatives=hard_negatives, query_max_length=query_max_length,
                      passage_max_length=passage_max_length)
    return model, losses


def distill_aggretriever(backbone_or_model_dir: str | os.PathLike, data, out_dir: str | os.PathLike,
                         train_config: TrainConfig | None = None, model_config: AggretrieverConfig | None = None,
                         distill_config=None, query_max_length: int = QUERY_MAX_LENGTH,
                         passage_max_length: int = PASSAGE_MAX_LENGTH,
                         checkpoint_dir: str | os.PathLike | None = None) -> tuple[Aggretriever, list[float]]:
    """Distil the teacher ensemble of `data` (a train.distill.DistillationSet) into an Aggretriever.

    What the MLM head knows is kept: new heads start as the lexical-only model (term weight 1, so the untrained
    model already ranks by the backbone's MLM distributions) with a small random [CLS] projection (a zero one
    would be a saddle point of the bilinear score), the heads learn at `head_learning_rate` and the backbone at
    the lower `train_config.learning_rate`. Loss = L(concat) + 0.5 L(agg) + 0.5 L([CLS]) with L the
    distillation loss (listwise KL to the teacher + in-batch NLL), as the released code weighs its NLLs.
    """
    from pyserini_ext.train.distill import DistillTrainConfig, distillation_batches, distillation_loss, steps_per_epoch

    train_config = train_config or TrainConfig()
    distill_config = distill_config or DistillTrainConfig()
    set_seed(train_config.seed)
    name = str(backbone_or_model_dir)
    folder = backbone_path(name) if name in BACKBONES else resolve_model_folder(backbone_or_model_dir)
    if (folder / AGG_CONFIG_NAME).is_file():
        model = Aggretriever.from_pretrained(folder)
    else:
        model = from_masked_lm(folder, model_config, constant_term_weight=1.0)
        if model.cls_proj is not None:
            torch.nn.init.normal_(model.cls_proj.weight, std=0.01)
            torch.nn.init.zeros_(model.cls_proj.bias)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    heads = [p for n, p in model.named_parameters() if not n.startswith("encoder.")]
    body = [p for n, p in model.named_parameters() if n.startswith("encoder.")]
    groups = [{"params": body}, {"params": heads, "lr": distill_config.head_learning_rate}]
    cls_dim = model.config.cls_dim

    def tokenize(texts: list[str], max_length: int) -> dict[str, Tensor]:
        inputs = tokenizer(texts, max_length=max_length, truncation=True, padding="longest", return_tensors="pt")
        return {k: inputs[k].to(train_config.device) for k in ("input_ids", "attention_mask")}

    def loss_fn(model: Aggretriever, batch) -> Tensor:
        queries = model(**tokenize(batch.query_texts, query_max_length))
        passages = model(**tokenize(batch.passage_texts, passage_max_length))
        loss = distillation_loss(queries @ passages.T, batch.teacher, distill_config)
        if cls_dim:
            for part in (slice(cls_dim, None), slice(0, cls_dim)):
                loss = loss + PART_WEIGHT * distillation_loss(queries[:, part] @ passages[:, part].T, batch.teacher,
                                                              distill_config)
        return loss

    losses = train(model, lambda epoch: distillation_batches(data, distill_config.batch_size,
                                                             distill_config.group_size, train_config.seed, epoch),
                   loss_fn, train_config, steps_per_epoch(data, distill_config), desc="distil aggretriever",
                   parameter_groups=groups, checkpoint_dir=checkpoint_dir)
    model.save_pretrained(out_dir, tokenizer)
    save_training_log(out_dir, train_config, losses, base_model=name, distillation=asdict(distill_config),
                      training_queries=len(data.queries), query_max_length=query_max_length,
                      passage_max_length=passage_max_length)
    return model, losses
