"""The shared training loop: an interrupted run resumes to the same weights; a finished one trains no more;
bf16 autocast computes the forward pass in bfloat16 and keeps float32 weights, and falls back to fp32 (with a
warning, and recorded in the training log) where the device has no bfloat16 kernels."""
from __future__ import annotations

import json

import pytest
import torch

from pyserini_ext import hardware
from pyserini_ext.train.loop import TrainConfig, save_training_log, train

STEPS = 6


class Interrupted(Exception):
    pass


def run(checkpoint_dir, stop_at: int | None = None, precision: str = "fp32",
        computed_in: torch.dtype | None = None) -> tuple[torch.nn.Module, list[float]]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    inputs = torch.randn(STEPS + 2, 8, 4)  # an epoch longer than max_steps

    def loss_fn(module, batch):
        if stop_at is not None and batch == stop_at:
            raise Interrupted
        output = module(inputs[batch])
        assert output.dtype == (computed_in or (torch.bfloat16 if precision == "bf16" else torch.float32))
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


def test_bf16_autocast_trains_float32_weights_close_to_fp32(tmp_path, bfloat16_kernels):
    reference, reference_losses = run(None)
    model, losses = run(None, precision="bf16")
    assert model.weight.dtype == torch.float32
    assert losses == pytest.approx(reference_losses, rel=0.05)  # bfloat16 keeps ~3 significant digits
    assert losses != reference_losses  # the forward pass did run in bfloat16
    torch.testing.assert_close(model.weight, reference.weight, atol=0.02, rtol=0.05)
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainConfig(precision="fp16")


def test_bf16_without_bfloat16_kernels_trains_fp32_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "native_bfloat16", lambda device: False)
    reference, reference_losses = run(None)
    with pytest.warns(UserWarning, match="has no bfloat16 kernels"):
        model, losses = run(None, precision="bf16", computed_in=torch.float32)
    assert losses == reference_losses
    torch.testing.assert_close(model.weight, reference.weight, atol=0, rtol=0)
    log = json.loads(save_training_log(tmp_path, TrainConfig(precision="bf16"), losses).read_text())
    assert (log["config"]["precision"], log["precision_used"]) == ("bf16", "fp32")
