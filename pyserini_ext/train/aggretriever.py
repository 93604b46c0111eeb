"""Aggretriever training: contrastive NLL on the concatenated vector, plus the same loss on each of its parts.

As in the released training code (castorini/dhr, see docs/references.md): a batch of B queries
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
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from transformers import AutoTokenizer

from pyserini_ext.data import document_text
from pyserini_ext.models.aggretriever import (
    AGG_CONFIG_NAME,
    Aggretriever,
    AggretrieverConfig,
    from_masked_lm,
    identity_semantic_head,
    untie_decoder,
)
from pyserini_ext.models.backbones import BACKBONES, backbone_path
from pyserini_ext.models.folder import resolve_model_folder
from pyserini_ext.train.data import LabelledData
from pyserini_ext.train.distill import DistillationSet, distillation_batches, distillation_loss, steps_per_epoch
from pyserini_ext.train.loop import TrainConfig, save_training_log, set_seed, train

QUERY_MAX_LENGTH = 32
PASSAGE_MAX_LENGTH = 128
HEAD_INITS = ("random", "lexical")
ALIGNMENT_BATCH = 32  # texts per step of the [CLS] alignment stage
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
    return concat_and_parts(lambda q, p, _: nll(q, p, false_negatives), query_vectors, passage_vectors, cls_dim)


def concat_and_parts(loss: Callable[[Tensor, Tensor, str], Tensor], query_vectors: Tensor, passage_vectors: Tensor,
                     cls_dim: int) -> Tensor:
    """loss(concat) + 0.5 loss(agg part) + 0.5 loss([CLS] part); only the concat without a [CLS] part.
    `loss(queries, passages, part)` is told which part it scores: "concat", "lexical" or "semantic"."""
    total = loss(query_vectors, passage_vectors, "concat")
    if cls_dim:
        for name, part in (("lexical", slice(cls_dim, None)), ("semantic", slice(0, cls_dim))):
            total = total + PART_WEIGHT * loss(query_vectors[:, part], passage_vectors[:, part], name)
    return total


@dataclass
class AggretrieverModelConfig:
    """What is trained (the first argument of `train_aggretriever`): the start point, new heads, text lengths."""
    model: str  # masked-LM backbone (packaged name, folder or hub name) for new heads, or an Aggretriever folder
    architecture: AggretrieverConfig | None = None  # the new heads' shape (default: Pyserini's 640 + 128)
    # new heads: "random" (as the released code draws them) or "lexical": term weight 1 and a small random [CLS]
    # projection (a zero one would be a saddle point of the bilinear score), so that the untrained model already
    # ranks by the backbone's MLM distributions
    heads: str = "random"
    query_max_length: int = QUERY_MAX_LENGTH
    passage_max_length: int = PASSAGE_MAX_LENGTH
    # passes of [CLS] alignment before the listwise stage (`align_cls_to_teacher`), for a body that was trained
    # with mean pooling (all-MiniLM-L6-v2), whose [CLS] state is a weak sentence vector; 0 skips the stage
    cls_alignment_epochs: int = 0
    store_dtype: str = "float32"  # "float16" halves the saved masked LM's weights (they load back as float32)
    # train the heads only (`freeze_body`): the body, with the word embeddings its tied MLM decoder shares, is
    # frozen and runs without dropout, so the semantic part stays the body's own pooled vector
    freeze_body: bool = False
    # the MLM head's decoder gets its own copy of the word embeddings and learns (`untie_decoder`)
    untie_decoder: bool = False
    # a semantic part as wide as the body: `identity_semantic_head` at this scale, frozen (None: a learned
    # projection). `saved_semantic_scale`: the scale written into the saved folder, the two parts' balance chosen on
    # development queries after training (None: the training scale)
    semantic_scale: float | None = None
    saved_semantic_scale: float | None = None
    # distillation only: the lexical part's own loss distils this weighting of the teachers (e.g. the lexical ones,
    # {"splade": 0.7, "bm25": 0.3}) instead of the full ensemble the concatenation learns (None: the full one)
    lexical_teacher_weights: dict[str, float] | None = None

    def __post_init__(self):
        if self.cls_alignment_epochs < 0:
            raise ValueError(f"cls_alignment_epochs must be >= 0, got {self.cls_alignment_epochs}")
        if self.heads not in HEAD_INITS:
            raise ValueError(f"heads must be one of {HEAD_INITS}, got {self.heads!r}")
        if self.saved_semantic_scale is not None and self.semantic_scale is None:
            raise ValueError("saved_semantic_scale rescales a frozen identity semantic head: set semantic_scale too")
        if min(self.query_max_length, self.passage_max_length) < 2:
            raise ValueError("query and passage max lengths must be >= 2 ([CLS] plus one token)")


def load_trainable_model(spec: AggretrieverModelConfig) -> tuple[Aggretriever, Path]:
    """An Aggretriever folder (has aggretriever_config.json) goes on training; a masked-LM backbone gets new
    heads (drawn from the current torch seed). Returns the model and the folder its tokenizer is in."""
    name = str(spec.model)
    folder = backbone_path(name) if name in BACKBONES else resolve_model_folder(spec.model)
    if (folder / AGG_CONFIG_NAME).is_file():
        if spec.architecture is not None:
            raise ValueError(f"{folder} is already an Aggretriever (its config is in {AGG_CONFIG_NAME}); "
                             "an architecture applies only to a masked-LM backbone")
        return Aggretriever.from_pretrained(folder), folder
    if spec.heads == "random":
        return from_masked_lm(folder, spec.architecture), folder
    model = from_masked_lm(folder, spec.architecture, constant_term_weight=1.0)
    if model.cls_proj is not None:
        torch.nn.init.normal_(model.cls_proj.weight, std=0.01)
        torch.nn.init.zeros_(model.cls_proj.bias)
    return model, folder


def train_aggretriever(model: AggretrieverModelConfig, data: LabelledData | DistillationSet,
                       config: TrainConfig | None = None, out_dir: str | os.PathLike | None = None,
                       checkpoint_dir: str | os.PathLike | None = None) -> tuple[Aggretriever, list[float]]:
    """Train an Aggretriever; saves a Pyserini-format folder and training_log.json in `out_dir`.

    Judged pairs (`LabelledData`): NLL of each query's positive against the batch's positives and hard
    negatives. A teacher ensemble (`DistillationSet`): listwise KL to the teacher over each query's candidates
    plus in-batch NLL. Either loss is taken on the concatenated vector plus 0.5 x the same loss on the agg and
    on the [CLS] part, as the released code weighs its NLLs. Deterministic for a given `config.seed`.
    """
    config = config or TrainConfig()
    if config.batch_size < 2:
        raise ValueError(f"contrastive training needs batch_size >= 2, got {config.batch_size}")
    set_seed(config.seed)  # new heads are initialised at load time
    aggretriever, folder = load_trainable_model(model)
    if model.semantic_scale is not None:
        identity_semantic_head(aggretriever, model.semantic_scale)
        aggretriever.cls_proj.requires_grad_(False)
    if model.untie_decoder:
        untie_decoder(aggretriever)
    if model.freeze_body:
        freeze_body(aggretriever)
    tokenizer = AutoTokenizer.from_pretrained(folder)

    def encode(texts: list[str], max_length: int) -> Tensor:
        inputs = tokenizer(texts, max_length=max_length, truncation=True, padding="longest", return_tensors="pt")
        return aggretriever(**{k: inputs[k].to(config.device) for k in ("input_ids", "attention_mask")})

    log = {}
    if model.cls_alignment_epochs:
        if not isinstance(data, DistillationSet) or aggretriever.cls_proj is None:
            raise ValueError("[CLS] alignment needs a distillation set and a model with a [CLS] part")
        alignment = align_cls_to_teacher(
            aggretriever, tokenizer, data, model, config,
            checkpoint_dir=None if checkpoint_dir is None else Path(checkpoint_dir) / "cls-alignment",
            new_heads=not (folder / AGG_CONFIG_NAME).is_file())
        log["cls_alignment_losses"] = alignment
    cls_dim = aggretriever.config.cls_dim
    if isinstance(data, LabelledData):
        make_batches, steps, batch_loss, objective_log = _labelled_objective(data, config, cls_dim)
    else:
        make_batches, steps, batch_loss, objective_log = _distillation_objective(
            data, config, cls_dim, model.lexical_teacher_weights)
    log.update(objective_log)

    def loss_fn(_, batch) -> Tensor:
        queries = encode(batch.query_texts, model.query_max_length)
        passages = encode(batch.passage_texts, model.passage_max_length)
        return batch_loss(queries, passages, batch)

    losses = train(aggretriever, make_batches, loss_fn, config, steps, desc="train aggretriever",
                   checkpoint_dir=checkpoint_dir)
    if model.saved_semantic_scale is not None:
        identity_semantic_head(aggretriever, model.saved_semantic_scale)
    if out_dir is not None:
        aggretriever.save_pretrained(out_dir, tokenizer, encoder_dtype=getattr(torch, model.store_dtype))
        save_training_log(out_dir, config, losses, base_model=str(model.model), heads=model.heads,
                          query_max_length=model.query_max_length, passage_max_length=model.passage_max_length,
                          cls_alignment_epochs=model.cls_alignment_epochs, **log)
    return aggretriever, losses


def freeze_body(model: Aggretriever) -> None:
    """Only the heads train: the MLM head's transform and bias, `tok_proj` and `cls_proj` (unless frozen apart).
    The body's dropout is switched off, so its states in training are those it encodes with."""
    head = {id(p) for p in model.mlm_head.head_parameters()}
    for parameter in model.encoder.parameters():
        parameter.requires_grad_(id(parameter) in head)
    for module in model.encoder.base_model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


@dataclass
class LabelledBatch:
    query_texts: list[str]
    passage_texts: list[str]  # the B positives, then (with hard negatives) one negative per query
    false_negatives: Tensor  # [B, passages]: a passage judged relevant to a query other than its own


def _labelled_objective(data: LabelledData, config: TrainConfig, cls_dim: int):
    corpus = data.corpus
    examples = training_queries(corpus, data.queries, data.qrels)
    if len(examples) < 2:
        raise ValueError("contrastive training needs at least 2 training queries, the judged pairs have 1")
    docids = sorted(corpus)
    pools = data.bm25_rankings if data.negatives == "bm25" else {}
    steps_per_epoch = max(1, len(examples) // config.batch_size)

    def negative(rng: random.Random, example: TrainingQuery) -> str:
        pool = [d for d in pools.get(example.qid, []) if d not in example.judged]
        return rng.choice(pool) if pool else random_negative(rng, docids, example.judged)

    def make_batches(epoch: int) -> Iterator[LabelledBatch]:
        rng = random.Random(config.seed + epoch)
        order = examples[:]
        rng.shuffle(order)
        for start in range(0, steps_per_epoch * config.batch_size, config.batch_size):
            chunk = order[start:start + config.batch_size]
            passages = [rng.choice(example.positives) for example in chunk]
            if data.negatives != "none":
                passages += [negative(rng, example) for example in chunk]
            false_negatives = torch.tensor([[j != i and docid in example.positives for j, docid in enumerate(passages)]
                                            for i, example in enumerate(chunk)])
            yield LabelledBatch([example.text for example in chunk],
                                [document_text(corpus[docid]) for docid in passages], false_negatives)

    def batch_loss(queries: Tensor, passages: Tensor, batch: LabelledBatch) -> Tensor:
        return aggretriever_loss(queries, passages, cls_dim, batch.false_negatives.to(queries.device))

    return make_batches, steps_per_epoch, batch_loss, data.log() | {"training_queries": len(examples)}


def _distillation_objective(data: DistillationSet, config: TrainConfig, cls_dim: int,
                            lexical_weights: Mapping[str, float] | None = None):
    other = {"lexical": dict(lexical_weights)} if lexical_weights else {}

    def batch_loss(queries: Tensor, passages: Tensor, batch) -> Tensor:
        def part_loss(q: Tensor, p: Tensor, part: str) -> Tensor:
            return distillation_loss(q @ p.T, batch.other_teachers.get(part, batch.teacher), config)

        return concat_and_parts(part_loss, queries, passages, cls_dim)

    log = {"data": "distillation", "training_queries": len(data.queries)}
    if lexical_weights:
        log["lexical_teacher_weights"] = dict(lexical_weights)
    return (lambda epoch: distillation_batches(data, config.batch_size, config.group_size, config.seed, epoch,
                                               other_weights=other),
            steps_per_epoch(data, config), batch_loss, log)


@dataclass
class TeacherTargets:
    """The teacher's vectors of the distillation set's texts in the semantic part's coordinates."""
    by_text: dict[str, dict[str, np.ndarray]]  # "queries" / "passages" -> text -> [cls_dim]


def alignment_distance(predicted: Tensor, targets: Tensor) -> Tensor:
    """Squared L2 distance of the semantic part from the teacher's projected vectors, mean over the batch."""
    predicted, targets = predicted.float(), targets.to(predicted.device)
    return (predicted - targets).pow(2).sum(-1).mean()


@dataclass
class AlignmentBatch:
    texts: list[str]
    max_length: int
    targets: Tensor  # [B, cls_dim] the teacher's vectors in the [CLS] part's coordinates


def align_cls_to_teacher(aggretriever: Aggretriever, tokenizer, data: DistillationSet, spec: AggretrieverModelConfig,
                         config: TrainConfig, checkpoint_dir: Path | None = None, new_heads: bool = True
                         ) -> list[float]:
    """Teach the [CLS] part the MiniLM teacher's geometry, cheaply, before the listwise stage.

    all-MiniLM-L6-v2 was trained with mean pooling: its [CLS] state alone ranks SciFact train queries at nDCG@10
    0.50 (dot) against 0.66 for the mean-pooled vector. With the paper's [CLS] pooling the body learns to put the
    sentence vector there (with `dense_pooling="mean"` the mean state already is near it): the semantic part,
    `cls_proj(h[CLS])` or `cls_proj(mean h)`, is regressed (MSE) onto the teacher's L2-normalised
    vector of the same text, projected on its top `cls_dim` right singular vectors (uncentred, so inner
    products of the targets approximate the teacher's cosines); a new [CLS] head on a body of the teacher's width
    (the teacher's own body) starts as that projection.
    Every query and passage of the distillation set is a training text, `spec.cls_alignment_epochs` times.
    This stage runs the body only, not the MLM head, so a step costs a fraction of a listwise step. Teacher
    vectors are cached under `checkpoint_dir`. Returns the stage's losses.
    """
    from pyserini_ext.data import document_text
    from pyserini_ext.train.distill import MiniLMTeacher, cached_encoding

    teacher = MiniLMTeacher(config.device)
    queries = sorted({query.text for query in data.queries})
    passages = [document_text(data.corpus[docid]) for docid in sorted(data.corpus)]
    cache = (checkpoint_dir or Path(tempfile.mkdtemp(prefix="pyserini-ext-cls-"))) / "teacher"
    vectors = {}
    for name, texts, length in (("queries", queries, spec.query_max_length),
                                ("passages", passages, spec.passage_max_length)):
        def encode(part: list[str], length: int = length, name: str = name) -> np.ndarray:
            return teacher.encode(part, length, desc=f"minilm {name}")

        vectors[name] = cached_encoding(encode, texts, cache, f"minilm-{name}-{length}")
    _, _, right = np.linalg.svd(np.concatenate(list(vectors.values())), full_matrices=False)
    projection = torch.from_numpy(right[:aggretriever.config.cls_dim].copy())
    targets = TeacherTargets({name: dict(zip(texts, (torch.from_numpy(vectors[name]) @ projection.T).numpy()))
                              for name, texts in (("queries", queries), ("passages", passages))})
    if new_heads and aggretriever.cls_proj.weight.shape == projection.shape:  # a body of the teacher's width
        with torch.no_grad():
            aggretriever.cls_proj.weight.copy_(projection)
            aggretriever.cls_proj.bias.zero_()
    items = [(text, spec.query_max_length, targets.by_text["queries"][text]) for text in queries]
    items += [(text, spec.passage_max_length, targets.by_text["passages"][text]) for text in passages]

    def make_batches(epoch: int) -> Iterator[AlignmentBatch]:
        rng = random.Random(config.seed + epoch)
        order = list(range(len(items)))
        rng.shuffle(order)
        order.sort(key=lambda i: items[i][1])  # queries and passages apart: each batch pads to its own length
        batches = [order[start:start + ALIGNMENT_BATCH] for start in range(0, len(order), ALIGNMENT_BATCH)]
        rng.shuffle(batches)
        for batch in batches:
            yield AlignmentBatch([items[i][0] for i in batch], items[batch[0]][1],
                                 torch.from_numpy(np.stack([items[i][2] for i in batch])))

    def loss_fn(_, batch: AlignmentBatch) -> Tensor:
        inputs = tokenizer(batch.texts, max_length=batch.max_length, truncation=True, padding="longest",
                           return_tensors="pt")
        hidden = aggretriever.mlm_head.hidden_states(inputs["input_ids"].to(config.device),
                                                     inputs["attention_mask"].to(config.device))
        return alignment_distance(aggretriever.dense(inputs["attention_mask"].to(config.device), hidden), batch.targets)

    stage = replace(config, epochs=spec.cls_alignment_epochs, max_steps=None)
    steps = -(-len(items) // ALIGNMENT_BATCH)
    return train(aggretriever, make_batches, loss_fn, stage, steps, desc="align [CLS] to the teacher",
                 checkpoint_dir=checkpoint_dir)
