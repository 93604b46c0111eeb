"""The shared training loop: an interrupted run resumes to the same weights; a finished one trains no more."""
from __future__ import annotations

import pytest
import torch

from pyserini_ext.train.loop import TrainConfig, train

STEPS = 6


class Interrupted(Exception):
    pass


def run(checkpoint_dir, stop_at: int | None = None) -> tuple[torch.nn.Module, list[float]]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    inputs = torch.randn(STEPS + 2, 8, 4)  # an epoch longer than max_steps

    def loss_fn(module, batch):
        if stop_at is not None and batch == stop_at:
            raise Interrupted
        return module(inputs[batch]).pow(2).mean()

    config = TrainConfig(learning_rate=0.1, warmup_ratio=0.0, checkpoint_every=1, seed=1, max_steps=STEPS)
    losses = train(model, lambda epoch: iter(range(STEPS + 2)), loss_fn, config, STEPS + 2,
                   checkpoint_dir=checkpoint_dir)
    return model, losses


def test_resume_after_an_interruption_and_after_the_end(tmp_path):
    reference, reference_losses = run(tmp_path / "straight")
    with pytest.raises(Interrupted):
        run(tmp_path / "resumed", stop_at=4)
    resumed, losses = run(tmp_path / "resumed")
    assert losses == pytest.approx(reference_losses)
    torch.testing.assert_close(resumed.weight, reference.weight)
    again, again_losses = run(tmp_path / "resumed", stop_at=STEPS)  # raises if one more batch is trained
    assert len(again_losses) == STEPS
    torch.testing.assert_close(again.weight, reference.weight)
