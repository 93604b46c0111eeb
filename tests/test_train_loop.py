"""The shared training loop: an interrupted run resumes to the same weights; a finished one trains no more;
bfloat16 autocast computes the forward pass in bfloat16 and keeps float32 weights, and falls back to float32 (with
a warning, and recorded in the training log) where the device has no bfloat16 kernels."""
from __future__ import annotations

import json

import pytest
import torch

from pyserini_ext import hardware
from pyserini_ext.train.loop import TrainConfig, save_training_log, train

STEPS = 6


class Interrupted(Exception):
    pass


def run(checkpoint_dir, stop_at: int | None = None, precision: str = "float32",
        computed_in: torch.dtype | None = None) -> tuple[torch.nn.Module, list[float]]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    inputs = torch.randn(STEPS + 2, 8, 4)  # an epoch longer than max_steps

    def loss_fn(module, batch):
        if stop_at is not None and batch == stop_at:
            raise Interrupted
        output = module(inputs[batch])
        assert output.dtype == (computed_in or (torch.bfloat16 if precision == "bfloat16" else torch.float32))
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
    model, losses = run(None, precision="bfloat16")
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
        model, losses = run(None, precision="bfloat16", computed_in=torch.float32)
    assert losses == reference_losses
    torch.testing.assert_close(model.weight, reference.weight, atol=0, rtol=0)
    log = json.loads(save_training_log(tmp_path, TrainConfig(precision="bfloat16"), losses).read_text())
    assert (log["config"]["precision"], log["precision_used"]) == ("bfloat16", "float32")


def test_precision_has_one_vocabulary_and_reads_the_old_spellings():
    """Training takes the encoders' dtype names; the short spellings of older configs and logs still read."""
    from pyserini_ext.encode.runtime import EncoderRuntime

    assert TrainConfig(precision="bf16").precision == "bfloat16"
    assert TrainConfig(precision="fp32").precision == "float32"
    assert EncoderRuntime(precision="fp32").precision == "float32"
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainConfig(precision="int8")


def test_attention_dropout_zero_makes_training_mode_attention_deterministic(tmp_path):
    """attention_dropout=0 switches off the dropout on attention probabilities (and only that): with the hidden
    dropouts off as well, a training-mode forward pass equals the evaluation one."""
    from transformers import AutoModel

    from pyserini_ext.models.backbones import backbone_path

    body = AutoModel.from_pretrained(backbone_path("splade-tiny"), attn_implementation="sdpa")
    for name, module in body.named_modules():
        if isinstance(module, torch.nn.Dropout) and "attention.self" not in name:
            module.p = 0.0  # hidden dropouts off; the attention dropouts keep BERT's 0.1
    inputs = {"input_ids": torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 102]])}
    body.eval()
    expected = body(**inputs).last_hidden_state
    seen = []

    def loss_fn(module, batch):
        assert module.training
        output = module(**inputs).last_hidden_state
        seen.append(output.detach())
        return output.sum() * 0.0  # no update: only the forward pass is compared

    config = TrainConfig(learning_rate=0.0, max_steps=1, attention_dropout=0.0)
    train(body, lambda epoch: iter([0]), loss_fn, config, 1)
    torch.testing.assert_close(seen[0], expected)
    body.train()
    for module in body.modules():
        if type(module).__name__.endswith("SelfAttention"):
            module.dropout.p = 0.1
    torch.manual_seed(0)
    assert not torch.allclose(body(**inputs).last_hidden_state, expected)  # BERT's 0.1 does drop
    with pytest.raises(ValueError, match="attention_dropout must be in"):
        TrainConfig(attention_dropout=1.0)
    with pytest.raises(ValueError, match="no self-attention module"):
        train(torch.nn.Linear(2, 1), lambda epoch: iter([0]), lambda m, b: m.weight.sum(), config, 1)
