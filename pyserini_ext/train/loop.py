"""The one training loop shape shared by the three models (model-specific parts are the batches and the loss).

Compact on purpose, in the spirit of Tevatron: AdamW with transformers' linear warm-up/decay schedule, gradient
clipping, seeded, tqdm progress, a loss curve written next to the saved model. With a checkpoint folder, the
model, optimiser, schedule and loss curve are saved every `checkpoint_every` steps (atomically) and a new run
with the same settings resumes from there: batches are a pure function of (seed, epoch), so the steps already
done are replayed without computing them.
"""
from __future__ import annotations

import json
import os
import random
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from pyserini_ext import hardware
from pyserini_ext.encode.runtime import precision_name

PRECISIONS = ("float32", "bfloat16")  # training's part of encode.runtime.PRECISIONS (the same names)


@dataclass
class TrainConfig:
    """How any of the three models is trained (the third argument of every `train_<model>`)."""
    learning_rate: float = 5e-5  # the pretrained body (parameters under `encoder.`)
    head_learning_rate: float | None = None  # the new heads (all other parameters); None: learning_rate
    batch_size: int = 16  # queries per step (DeepCT: passages per step)
    epochs: int = 1
    max_steps: int | None = None  # stop early (after this many optimiser steps) when set
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 42
    device: str = "cpu"
    log_every: int = 10
    checkpoint_every: int = 100
    # distillation data only (train.distill.DistillationSet): the candidate group of each query and the loss
    group_size: int = 4  # candidates per query: the teacher-best and group_size - 1 others
    kl_weight: float = 1.0  # listwise KL to the teacher ensemble over each query's group
    in_batch_weight: float = 1.0  # NLL of the teacher-best among all passages of the batch
    teacher_temperature: float = 1.0  # on the ensemble's z-scores
    # "bfloat16": the forward pass and loss under bfloat16 autocast (CPUs with AVX512-BF16/AMX, CUDA); the
    # weights, gradients and optimiser state stay float32. Where the device has no bfloat16 kernels, training runs
    # float32 with a warning (`precision_used`), since there bfloat16 would be tens of times slower. The old
    # spellings "fp32" / "bf16" are read as "float32" / "bfloat16" (saved training logs hold them)
    precision: str = "float32"
    # dropout on the attention probabilities while training; None keeps the backbone's own (BERT: 0.1). Any
    # non-zero value sends PyTorch's attention down its unfused path (scores materialised, a dropout mask drawn
    # per score), several times slower on a CPU (docs/journal/training.md)
    attention_dropout: float | None = None

    def __post_init__(self):
        if self.batch_size < 1 or self.group_size < 1:
            raise ValueError(f"batch_size and group_size must be >= 1, got {self.batch_size}, {self.group_size}")
        self.precision = precision_name(self.precision)
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.attention_dropout is not None and not 0 <= self.attention_dropout < 1:
            raise ValueError(f"attention_dropout must be in [0, 1), got {self.attention_dropout}")


def precision_used(config: TrainConfig) -> str:
    """The precision training really runs at: bfloat16 only where the device has bfloat16 kernels."""
    if config.precision == "bfloat16" and not hardware.native_bfloat16(config.device):
        return "float32"
    return config.precision


def autocast(config: TrainConfig) -> torch.autocast:
    """The context a training forward pass runs in (a no-op at float32)."""
    return torch.autocast(torch.device(config.device).type, dtype=torch.bfloat16,
                          enabled=precision_used(config) == "bfloat16")


def set_attention_dropout(model: torch.nn.Module, probability: float) -> int:
    """Set the attention-probability dropout of every transformers self-attention module in `model` (their
    `dropout` is what the attention kernel is given in training mode); returns how many were set."""
    modules = [m for m in model.modules() if type(m).__name__.endswith("SelfAttention")
               and isinstance(getattr(m, "dropout", None), torch.nn.Dropout)]
    if not modules:
        raise ValueError(f"attention_dropout is set, but {type(model).__name__} has no self-attention module with "
                         "a dropout to set")
    for module in modules:
        module.dropout.p = probability
    return len(modules)


def parameter_groups(model: torch.nn.Module, config: TrainConfig) -> list[dict]:
    """AdamW groups: the pretrained body (`encoder.*`) at config.learning_rate, new heads at head_learning_rate."""
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if config.head_learning_rate is None:
        return [{"params": [p for _, p in trainable]}]
    body = [p for n, p in trainable if n.startswith("encoder.")]
    heads = [p for n, p in trainable if not n.startswith("encoder.")]
    return [{"params": body}, {"params": heads, "lr": config.head_learning_rate}]


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(model: torch.nn.Module,
          make_batches: Callable[[int], Iterable],
          loss_fn: Callable[[torch.nn.Module, object], torch.Tensor],
          config: TrainConfig,
          steps_per_epoch: int,
          desc: str = "train",
          checkpoint_dir: str | os.PathLike | None = None) -> list[float]:
    """Train `model` in place; returns the per-step loss curve.

    `make_batches(epoch)` yields batches (already on `config.device` or moved by `loss_fn`);
    `loss_fn(model, batch)` returns a scalar loss. Seeding happens before the first batch is made.
    """
    from transformers import get_linear_schedule_with_warmup

    if precision_used(config) != config.precision:
        warnings.warn(hardware.slow_bfloat16_warning(config.device, "training"), stacklevel=2)
    set_seed(config.seed)
    total = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    if total <= 0:
        raise ValueError("nothing to train on: 0 steps (empty training data?)")
    model.to(config.device).train()
    if config.attention_dropout is not None:
        set_attention_dropout(model, config.attention_dropout)
    optimizer = torch.optim.AdamW(parameter_groups(model, config), lr=config.learning_rate,
                                  weight_decay=config.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(total * config.warmup_ratio), total)
    losses: list[float] = []
    checkpoint = Path(checkpoint_dir) / "checkpoint.pt" if checkpoint_dir is not None else None
    if checkpoint is not None and checkpoint.is_file():
        state = torch.load(checkpoint, map_location=config.device, weights_only=False)
        if state["total"] != total or state["seed"] != config.seed:
            raise ValueError(f"{checkpoint} was written by a run with {state['total']} steps and seed "
                             f"{state['seed']}, not {total} and {config.seed}: remove it or use another folder")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        losses = state["losses"]
        torch.set_rng_state(state["torch_rng"])
    done = len(losses)
    if done >= total:  # a finished run: nothing left to train (another step would run past the schedule)
        model.eval()
        return losses

    def save_checkpoint() -> None:
        tmp = checkpoint.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "losses": losses, "total": total, "seed": config.seed,
                    "torch_rng": torch.get_rng_state()}, tmp)
        tmp.replace(checkpoint)

    step = 0
    with tqdm(total=total, initial=done, desc=desc) as bar:
        for epoch in range(config.epochs):
            for batch in make_batches(epoch):
                step += 1
                if step <= done:
                    continue  # replayed from the checkpoint
                with autocast(config):
                    loss = loss_fn(model, batch).float()
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"loss became {loss.item()} at step {len(losses)}")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                losses.append(loss.item())
                bar.update(1)
                if len(losses) % config.log_every == 0:
                    bar.set_postfix(loss=f"{np.mean(losses[-config.log_every:]):.4f}")
                if checkpoint is not None and (len(losses) % config.checkpoint_every == 0 or len(losses) >= total):
                    checkpoint.parent.mkdir(parents=True, exist_ok=True)
                    save_checkpoint()
                if len(losses) >= total:
                    model.eval()
                    return losses
    model.eval()
    return losses


def save_training_log(out_dir: str | os.PathLike, config: TrainConfig, losses: list[float], **extra) -> Path:
    path = Path(out_dir) / "training_log.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"config": asdict(config), "precision_used": precision_used(config), "losses": losses,
                                **extra}, indent=1))
    return path
