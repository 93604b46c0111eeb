"""The shared training loop: an interrupted run resumes to the same weights; a finished one trains no more;
bf16 autocast computes the forward pass in bfloat16 and keeps float32 weights."""
from __future__ import annotations

import pytest
import torch

from pyserini_ext.train.loop import TrainConfig, train

STEPS = 6


class Interrupted(Exception):
    pass


def run(checkpoint_dir, stop_at: int | None = None, precision: str = "fp32") -> tuple[torch.nn.Module, list[float]]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    inputs = torch.randn(STEPS + 2, 8, 4)  # an epoch longer than max_steps

    def loss_fn(module, batch):
        if stop_at is not None and batch == stop_at:
            raise Interrupted
        output = module(inputs[batch])
        assert output.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
        return output.pow(2).mean()

    config = TrainConfig(learning_rate=0.1, warmup_ratio=0.0, checkpoint_every=1, seed=1, max_steps=STEPS,
                         precision=precision)
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


def test_bf16_autocast_trains_float32_weights_close_to_fp32(tmp_path):
    reference, reference_losses = run(None)
    model, losses = run(None, precision="bf16")
    assert model.weight.dtype == torch.float32
    assert losses == pytest.approx(reference_losses, rel=0.05)  # bfloat16 keeps ~3 significant digits
    assert losses != reference_losses  # the forward pass did run in bfloat16
    torch.testing.assert_close(model.weight, reference.weight, atol=0.02, rtol=0.05)
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainConfig(precision="fp16")
