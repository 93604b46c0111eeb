"""The one training loop shape shared by the three models (model-specific parts are the batches and the loss).

Compact on purpose, in the spirit of Tevatron: AdamW with linear warm-up/decay, gradient clipping, seeded,
tqdm progress, a loss curve written next to the saved model.
"""
from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm


@dataclass
class TrainConfig:
    learning_rate: float = 5e-5
    epochs: int = 1
    max_steps: int | None = None  # stop early (after this many optimiser steps) when set
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 42
    device: str = "cpu"
    log_every: int = 10


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(model: torch.nn.Module,
          make_batches: Callable[[int], Iterable],
          loss_fn: Callable[[torch.nn.Module, object], torch.Tensor],
          config: TrainConfig,
          steps_per_epoch: int,
          desc: str = "train") -> list[float]:
    """Train `model` in place; returns the per-step loss curve.

    `make_batches(epoch)` yields batches (already on `config.device` or moved by `loss_fn`);
    `loss_fn(model, batch)` returns a scalar loss. Seeding happens before the first batch is made.
    """
    set_seed(config.seed)
    total = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    if total <= 0:
        raise ValueError("nothing to train on: 0 steps (empty training data?)")
    model.to(config.device).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                  lr=config.learning_rate, weight_decay=config.weight_decay)
    warmup = int(total * config.warmup_ratio)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / max(1, warmup) if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))
    losses: list[float] = []
    with tqdm(total=total, desc=desc) as bar:
        for epoch in range(config.epochs):
            for batch in make_batches(epoch):
                loss = loss_fn(model, batch)
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
                if len(losses) >= total:
                    model.eval()
                    return losses
    model.eval()
    return losses


def save_training_log(out_dir: str | os.PathLike, config: TrainConfig, losses: list[float], **extra) -> Path:
    path = Path(out_dir) / "training_log.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"config": asdict(config), "losses": losses, **extra}, indent=1))
    return path
