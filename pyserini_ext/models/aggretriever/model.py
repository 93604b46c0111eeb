"""The Aggretriever module: forward (semantic part + lexical part), and save / load of its folder."""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForMaskedLM

from pyserini_ext.models.aggretriever.config import AGG_CONFIG_NAME, WEIGHTS_NAME, AggretrieverConfig, CheckpointError
from pyserini_ext.models.aggretriever.kernel import block_slice_maxima, weighted_softmax_slice_max
from pyserini_ext.models.aggretriever.mlm import MaskedLMHead
from pyserini_ext.models.aggretriever.pooling import fold_slices, slice_max, slice_width
from pyserini_ext.models.folder import AGGRETRIEVER, open_model_folder, saving


class Aggretriever(nn.Module):
    """State-dict layout of Pyserini's checkpoints: `encoder.*` (the masked LM), `tok_proj.*`, `cls_proj.*`.

    `cls_proj` keeps its name with `dense_pooling="mean"` (it then projects the mean state), so that the folder
    layout and the output vector's layout stay Pyserini's.

    Public for ONNX export and training: `mlm_head` (the body's states, the vocabulary head's transform, decoder and
    logits, its own parameters), `dense`, `tok_proj`, `lexical` and `slice_maxima`."""

    def __init__(self, encoder: nn.Module, config: AggretrieverConfig | None = None):
        super().__init__()
        self.config = config or AggretrieverConfig()
        self.encoder = encoder
        hidden = encoder.config.hidden_size if hasattr(encoder.config, "hidden_size") else encoder.config.dim
        self.tok_proj = nn.Linear(hidden, 1)
        self.cls_proj = nn.Linear(hidden, self.config.cls_dim) if self.config.cls_dim else None
        self.mlm_head = MaskedLMHead(encoder)
        self.vocab_size = encoder.config.vocab_size
        self.position_chunk = 64  # rows of [*, vocab] at once; encoders set it per device (default_position_chunk)

    @property
    def dim(self) -> int:
        return self.config.cls_dim + self.config.agg_dim

    def dense(self, attention_mask: Tensor, hidden: Tensor) -> Tensor:
        """The semantic part, [batch, cls_dim]: `cls_proj` of the [CLS] state or of the mean over non-padding
        positions (`config.dense_pooling`); [batch, 0] without a [CLS] part."""
        if self.cls_proj is None:
            return hidden[:, 0, :0]
        if self.config.dense_pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = attention_mask[..., None].to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        if self.config.dense_normalize:
            pooled = nn.functional.normalize(pooled, dim=-1)
        return self.cls_proj(pooled)

    def lexical(self, input_ids: Tensor, attention_mask: Tensor, hidden: Tensor) -> Tensor:
        """v: [batch, vocab] max over positions 1..L-1 of softmax(logits) * w * mask.

        What training differentiates through (it keeps every position's [vocab] row for the backward pass anyway);
        encoding takes `slice_maxima`, which never builds v."""
        batch = input_ids.shape[0]
        weights = self.tok_proj(hidden[:, 1:]).squeeze(-1)  # [B, L-1]
        mask = attention_mask[:, 1:].bool()
        if self.config.pooling == "no-mlm":
            ids = input_ids[:, 1:]
            src = torch.where(mask, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))
            # in the weights' dtype: under autocast tok_proj gives bfloat16 while the body's states may be float32
            return src.new_zeros((batch, self.vocab_size)).scatter_reduce(1, ids, src, reduce="amax",
                                                                          include_self=True)
        probs = torch.softmax(self.mlm_head.logits(hidden[:, 1:][mask]), dim=-1) * weights[mask][:, None]
        zero = probs.new_zeros(())
        rows = []
        # Padded positions contribute exact zeros to the reference max (it multiplies by the mask)
        for seq_probs, padded in zip(probs.split(mask.sum(1).tolist()), (~mask.all(dim=1)).tolist()):
            if seq_probs.shape[0] == 0:  # only [CLS] and padding: the reference's max over zeros
                rows.append(probs.new_zeros(self.vocab_size))
                continue
            pooled = seq_probs.amax(0)
            rows.append(torch.maximum(pooled, zero) if padded else pooled)
        return torch.stack(rows)

    def slice_maxima(self, input_ids: Tensor, attention_mask: Tensor, hidden: Tensor) -> Tensor:
        """`slice_max(lexical(...))`, [batch, slice width], without building v.

        The max over positions and the max over a slice commute, so each position is first reduced to its own
        slice maxima (`position_slice_maxima`, in log space from each block of logits); the max over positions
        then runs over [rows, width] instead of [rows, vocab]."""
        width = slice_width(self.config.agg_dim, self.config.pooling != "agg+")
        if self.config.pooling == "no-mlm":
            return slice_max(self.lexical(input_ids, attention_mask, hidden), width)
        mask = attention_mask[:, 1:].bool()
        flat_weights = self.tok_proj(hidden[:, 1:][mask]).squeeze(-1)
        # training (the body's states or only the heads, a frozen body's case, need gradients): the same values,
        # a sparse backward
        if torch.is_grad_enabled() and (hidden.requires_grad or flat_weights.requires_grad
                                        or any(p.requires_grad for p in self.mlm_head.head_parameters())):
            return weighted_softmax_slice_max(self.mlm_head.logits(hidden[:, 1:][mask]), flat_weights,
                                              mask.sum(1).tolist(), (~mask.all(dim=1)).tolist(), width)
        # Each [chunk, vocab] block of logits is written once by one matrix product (the bias is a row of the
        # decoder columns: addmm would first copy it into the block) into one reused buffer.
        device = hidden.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
        # Padded positions are exact zeros in the reference's v: the running max starts at 0 for sequences with
        # padding, at -inf for those without.
        pooled = torch.full((input_ids.shape[0], width), float("-inf"), device=hidden.device, dtype=torch.float32)
        pooled[~mask.all(dim=1)] = 0
        rows = mask.nonzero(as_tuple=False)  # [N, 2] (sequence, position), grouped by sequence
        # bfloat16 products on CPU (AMX tiles) run 1.1-1.2x faster on 128 inner rows than on 129, so there the bias
        # is added in the vocabulary kernel; float32 ones run as fast either way, and folded in it costs no pass
        # (experiments/aggretriever-kernels/decoder_product.py)
        fold_bias = not (dtype == torch.bfloat16 and device == "cpu") or self.mlm_head.decode.bias is None
        decoder = self.mlm_head.decoder_columns(fold_bias).to(dtype)
        bias = None if fold_bias else self.mlm_head.decode.bias.float()
        transformed = self.mlm_head.transform(hidden[:, 1:][mask]).to(dtype)
        if decoder.shape[0] > transformed.shape[1]:
            transformed = torch.cat((transformed, transformed.new_ones(len(transformed), 1)), 1)
        logits = transformed.new_empty((min(self.position_chunk, len(rows)), self.vocab_size))
        for start in range(0, rows.shape[0], self.position_chunk):
            end = min(start + self.position_chunk, rows.shape[0])
            torch.mm(transformed[start:end], decoder, out=logits[:end - start])
            extrema = block_slice_maxima(logits[:end - start], flat_weights[start:end], width,
                                         full_block=end - start == self.position_chunk, bias=bias)
            seqs, counts = torch.unique_consecutive(rows[start:end, 0], return_counts=True)
            offset = 0
            for seq, count in zip(seqs.tolist(), counts.tolist()):
                pooled[seq] = torch.maximum(pooled[seq], extrema[offset:offset + count].amax(0))
                offset += count
        return pooled

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        if input_ids.shape[1] < 2:
            raise ValueError("Aggretriever needs at least [CLS] and one more token per sequence")
        hidden = self.mlm_head.hidden_states(input_ids, attention_mask)
        agg = fold_slices(self.slice_maxima(input_ids, attention_mask, hidden), self.config.pooling != "agg+")
        if self.cls_proj is None:
            return agg
        return torch.cat((self.dense(attention_mask, hidden), agg), dim=-1)

    # ---- save / load -----------------------------------------------------------------------------------
    def save_pretrained(self, out_dir: str | os.PathLike, tokenizer=None, encoder_dtype: torch.dtype | None = None
                        ) -> Path:
        """encoder_dtype: store the masked LM's weights in this dtype (float16 halves a shipped folder); they load
        back as float32. The heads stay float32. A tied output projection is stored once, as safetensors wants."""
        from safetensors.torch import save_file

        with saving(out_dir) as out:
            out.mkdir()
            self.encoder.config.save_pretrained(out)
            tied = sorted(_tied_output_names(self))[1:]  # the word embeddings keep the one copy
            state = {k: v.detach().to(encoder_dtype if encoder_dtype and k.startswith("encoder.") else v.dtype)
                     .contiguous().clone() for k, v in self.state_dict().items() if k not in tied}
            save_file(state, str(out / WEIGHTS_NAME), metadata={"format": "pt"})
            settings = {"model_type": AGGRETRIEVER, **asdict(self.config)}
            (out / AGG_CONFIG_NAME).write_text(json.dumps(settings, indent=1))
            if tokenizer is not None:
                tokenizer.save_pretrained(out)
        return Path(out_dir)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, **config_overrides) -> Aggretriever:
        """Load our folder, or a Pyserini-format checkpoint, from a local folder or a Hugging Face hub name.

        The model only: encoders load (and check) the tokenizer, which Pyserini lets users name separately."""
        checked = open_model_folder(name_or_path, AGGRETRIEVER, tokenizer=False)
        folder = checked.path
        state = read_state_dict(checked.weights)
        config_kwargs = {k: v for k, v in checked.settings.items() if k != "model_type"}
        if "cls_proj.weight" in state:
            config_kwargs.setdefault("cls_dim", state["cls_proj.weight"].shape[0])
        config_kwargs.update(config_overrides)
        config = AggretrieverConfig(**config_kwargs)
        heads = ["tok_proj"] + (["cls_proj"] if config.cls_dim else [])
        required = [f"{head}.{p}" for head in heads for p in ("weight", "bias")]
        missing = [k for k in required if k not in state]
        if missing:
            raise CheckpointError(f"{folder}: checkpoint is missing the Aggretriever heads {missing} (a plain "
                                  "masked-LM folder? use `pyserini-ext aggretriever init` to add heads, or "
                                  "`pyserini-ext aggretriever convert` for a training-repo checkpoint)")
        if not any(k.startswith("encoder.") for k in state):
            raise CheckpointError(f"{folder}: no 'encoder.*' weights in the checkpoint")
        encoder = AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(folder))
        model = cls(encoder, config)
        result = model.load_state_dict(state, strict=False)
        # A tied output projection may be stored once (safetensors) or twice (torch.save): both are fine.
        tied = _tied_output_names(model)
        missing = set(result.missing_keys) - tied
        if tied and tied <= set(result.missing_keys):
            missing |= tied
        if missing or result.unexpected_keys:
            raise CheckpointError(f"{folder}: weights do not fit the model: missing {sorted(missing)[:5]}, "
                                  f"unexpected {sorted(result.unexpected_keys)[:5]}")
        return model.eval()


def _tied_output_names(model: Aggretriever) -> set[str]:
    output = model.encoder.get_output_embeddings()
    if output is None:
        return set()
    return {f"encoder.{n}" for n, p in model.encoder.named_parameters(remove_duplicate=False) if p is output.weight}


def read_state_dict(weights: Path) -> dict[str, Tensor]:
    try:
        if weights.name.endswith(".safetensors"):
            from safetensors.torch import load_file

            return load_file(str(weights))
        return torch.load(weights, map_location="cpu", weights_only=True)  # published checkpoints only
    except Exception as e:
        raise CheckpointError(f"{weights}: unreadable weights ({e})") from e
