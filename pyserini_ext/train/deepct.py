"""DeepCT training: query-term-recall targets on the first piece of each word, masked MSE.

Target of a passage word t (Dai & Callan): recall(t) = |{q in Q : t in q}| / |Q| over the passage's relevant
queries Q. Words are the tokenizer's words on both sides (lower-cased, punctuation split off; see
models/deepct.py), matched exactly (no stemming). Passages are cut to their first `max_length` pieces
(128 by default, as in the paper); [CLS], [SEP], padding and continuation pieces carry no loss.
"""
from __future__ import annotations

import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

from pyserini_ext.data.text import document_text
from pyserini_ext.models.backbones import BACKBONES, backbone_path
from pyserini_ext.models.deepct import DeepCTModel, pack_windows, split_words, window_inputs
from pyserini_ext.models.deepct_terms import TermFrequencyRule
from pyserini_ext.train.data import LabelledData
from pyserini_ext.train.distill import DistillationSet
from pyserini_ext.train.loop import TrainConfig, save_training_log, set_seed, train


@dataclass
class DeepCTExample:
    docid: str
    words: list[str]  # the passage words kept (first window)
    targets: list[float]  # one per word
    inputs: dict[str, torch.Tensor]  # one window: input_ids, attention_mask ([1, L])
    first_positions: list[int]


def term_recall(passage_words: list[str], queries: list[list[str]], weights: list[float] | None = None) -> list[float]:
    """recall(t) for each passage word: the (weighted) fraction of the queries that contain t."""
    if not queries:
        raise ValueError("term recall needs at least one relevant query")
    weights = weights or [1.0] * len(queries)
    query_sets = [set(q) for q in queries]
    total = sum(weights)
    return [sum(w for q, w in zip(query_sets, weights) if word in q) / total for word in passage_words]


def make_examples(tokenizer, corpus: Mapping[str, Mapping[str, str]], queries: Mapping[str, str],
                  qrels: Mapping[str, Mapping[str, int]], max_length: int = 128) -> list[DeepCTExample]:
    """The paper's target: one example per judged-relevant passage (relevance > 0), recall over its judged
    queries, on its first `max_length`-piece window."""
    relevant_queries: dict[str, list[tuple[str, float]]] = {}
    for qid, judged in qrels.items():
        if qid not in queries:
            raise KeyError(f"qrels name query {qid!r}, which is not in the queries")
        for docid, rel in judged.items():
            if rel > 0:
                relevant_queries.setdefault(docid, []).append((queries[qid], 1.0))
    return weighted_recall_examples(tokenizer, corpus, relevant_queries, max_length)


def teacher_recall_examples(tokenizer, data, max_length: int = 128, min_mass: float = 0.5,
                            min_probability: float = 0.05) -> list[DeepCTExample]:
    """Targets from the teachers (`data`, a train.distill.DistillationSet): a passage's relevant queries are the
    training queries (labelled and pseudo) whose teacher ensemble gives it probability p >= `min_probability`
    among their candidates, each weighing p; passages whose total p is below `min_mass` are left out (too
    little evidence). So a passage learns from many queries, including those made from other passages."""
    relevant_queries = {docid: [(data.queries[i].text, p) for i, p in found]
                        for docid, found in data.relevant_queries(min_probability=min_probability).items()
                        if sum(p for _, p in found) >= min_mass}
    return weighted_recall_examples(tokenizer, data.corpus, relevant_queries, max_length)


def weighted_recall_examples(tokenizer, corpus: Mapping[str, Mapping[str, str]],
                             relevant_queries: Mapping[str, list[tuple[str, float]]],
                             max_length: int = 128) -> list[DeepCTExample]:
    """One example per passage of `relevant_queries` (docid -> [(query text, weight)]): weighted term recall of
    the words of its first `max_length`-piece window."""
    examples = []
    for docid in sorted(relevant_queries):
        if docid not in corpus:
            raise KeyError(f"qrels name passage {docid!r}, which is not in the corpus")
        windows = pack_windows(split_words(tokenizer, document_text(corpus[docid])), max_length)
        if not windows:
            continue  # empty passage: nothing to learn from
        texts, weights = zip(*relevant_queries[docid])
        query_words = [[w.text for w in split_words(tokenizer, text)] for text in texts]
        words = [w.text for w in windows[0]]
        inputs, firsts = window_inputs(tokenizer, windows[:1])
        examples.append(DeepCTExample(docid, words, term_recall(words, query_words, list(weights)), inputs,
                                      firsts[0]))
    if not examples:
        raise ValueError("no training examples: no relevant passage with text")
    return examples


def collate(examples: list[DeepCTExample], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Batch tensors: input_ids, attention_mask, targets and loss mask (1 on each word's first piece)."""
    width = max(e.inputs["input_ids"].shape[1] for e in examples)
    batch = {
        "input_ids": torch.full((len(examples), width), pad_token_id, dtype=torch.long),
        "attention_mask": torch.zeros((len(examples), width), dtype=torch.long),
        "targets": torch.zeros((len(examples), width)),
        "mask": torch.zeros((len(examples), width)),
    }
    for row, example in enumerate(examples):
        length = example.inputs["input_ids"].shape[1]
        batch["input_ids"][row, :length] = example.inputs["input_ids"][0]
        batch["attention_mask"][row, :length] = example.inputs["attention_mask"][0]
        batch["targets"][row, example.first_positions] = torch.tensor(example.targets)
        batch["mask"][row, example.first_positions] = 1.0
    return batch


def masked_mse(predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the positions where mask == 1."""
    count = mask.sum()
    if count == 0:
        raise ValueError("masked MSE over an empty mask")
    return ((predictions - targets) ** 2 * mask).sum() / count


def deepct_loss(model: DeepCTModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    return masked_mse(model(batch["input_ids"], batch["attention_mask"]), batch["targets"], batch["mask"])


@dataclass
class DeepCTModelConfig:
    """What is trained (the first argument of `train_deepct`): the start point and the window length."""
    model: str  # BERT-family backbone (packaged name, folder or hub name) for a new head, or a DeepCT folder
    max_length: int = 128  # pieces per passage window, as in the paper
    # teacher-recall targets only: a passage is a training example when the teachers give it a total
    # probability >= teacher_min_mass over the training queries (less is too little evidence)
    teacher_min_mass: float = 0.5
    store_dtype: str = "float32"  # "float16" halves the saved weights (they load back as float32)
    # the tf rule the saved folder names for its index (deepct_config.json `index_tf`; the CLI can override it);
    # None: the start folder's rule, or the released code's for a backbone
    index_tf: TermFrequencyRule | None = None


def train_deepct(model: DeepCTModelConfig, data: LabelledData | DistillationSet, config: TrainConfig | None = None,
                 out_dir: str | os.PathLike | None = None,
                 checkpoint_dir: str | os.PathLike | None = None) -> tuple[DeepCTModel, list[float]]:
    """Train DeepCT; saves the model and training_log.json in `out_dir`.

    Targets: the paper's query term recall over judged pairs (`LabelledData`; its `negatives` play no part), or
    the teacher-weighted recall of `teacher_recall_examples` (a `DistillationSet`). Deterministic for a given
    seed: the head is initialised and the data shuffled from `config.seed`.
    """
    config = config or TrainConfig()
    set_seed(config.seed)  # the regression head is initialised at load time
    name = str(model.model)
    deepct = DeepCTModel.from_backbone(backbone_path(name) if name in BACKBONES else name, max_length=model.max_length)
    if isinstance(data, LabelledData):
        examples = make_examples(deepct.tokenizer, data.corpus, data.queries, data.qrels, model.max_length)
        log = data.log()
    else:
        examples = teacher_recall_examples(deepct.tokenizer, data, model.max_length, min_mass=model.teacher_min_mass)
        log = {"data": "distillation", "target": "teacher-recall", "training_queries": len(data.queries)}
    batch_size = config.batch_size
    steps_per_epoch = (len(examples) + batch_size - 1) // batch_size

    def make_batches(epoch: int) -> Iterator[dict[str, torch.Tensor]]:
        order = list(range(len(examples)))
        random.Random(config.seed + epoch).shuffle(order)
        for start in range(0, len(order), batch_size):
            yield collate([examples[i] for i in order[start:start + batch_size]], deepct.tokenizer.pad_token_id)

    losses = train(deepct, make_batches, deepct_loss, config, steps_per_epoch, desc="train deepct",
                   checkpoint_dir=checkpoint_dir)
    deepct.index_tf = model.index_tf or deepct.index_tf
    if out_dir is not None:
        deepct.save_pretrained(out_dir, encoder_dtype=getattr(torch, model.store_dtype), base_model=name,
                              training_examples=len(examples), **log)
        save_training_log(out_dir, config, losses, max_length=model.max_length, training_examples=len(examples),
                          **log)
    return deepct, losses
