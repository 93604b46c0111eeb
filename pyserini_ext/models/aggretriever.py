"""Aggretriever (Lin et al., 2023): [CLS] projection + aggregated MLM lexical representation, one vector.

Output = concat(cls_proj(e_cls), agg(v)), semantic part first, as in Pyserini's prebuilt indexes, with
  v[t] = max_i softmax(MLM logits_i)[t] * w_i * mask_i   over positions i = 1..L-1 ([CLS] left out),
  w_i = tok_proj(h_i), the raw term weight (the released code applies no |.| or ReLU).
`agg*` (default) slice-max-pools v into 2d columns and folds them into d signed values; `agg+` stops at d
slice maxima; the no-MLM variant puts w_i at the input token id instead of spreading it over the vocabulary.
See ../shared/design/reference-notes.md for the released code's exact rules, which the checkpoints follow.
Two layouts of the semantic part: Pyserini's (a 128-dim projection of the [CLS] state, the released checkpoints),
and the full-width one for a body trained with mean pooling (`dense_pooling="mean"`, `dense_normalize`,
`cls_dim` = the body's width, `identity_semantic_head`): the body's own sentence vector, scaled.

Memory and time: the reference computes v from a batch x length x vocab tensor (several copies of it, GBs per
batch). When encoding, only the non-padding positions go through the MLM head, `position_chunk` rows at a time,
and v itself is never built: each position's slice maxima go into a running max of the slice maxima
(`Aggretriever.slice_maxima`); the result is the same (the padded positions' zeros are put back into the max).
Training computes the same values in blocks of rows and differentiates them with a sparse backward
(`weighted_softmax_slice_max`): 1.5-1.8x faster per training step on a CPU than autograd through v.
"""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForMaskedLM

from pyserini_ext.errors import ModelFolderError
from pyserini_ext.models.folder import (
    AGGRETRIEVER,
    WEIGHTS_FILE,
    config_file,
    load_transformer,
    open_model_folder,
    resolve_model_folder,
    saving,
)

POOLINGS = ("agg*", "agg+", "no-mlm")
# What the semantic part projects: the [CLS] state (the paper, every released checkpoint) or the mean of the
# sequence's states, for a body trained with mean pooling (all-MiniLM-L6-v2), whose [CLS] state is a weak vector
DENSE_POOLINGS = ("cls", "mean")
AGG_CONFIG_NAME = config_file(AGGRETRIEVER)
WEIGHTS_NAME = WEIGHTS_FILE
# In the released rule, ids dropped to make the vocabulary divisible are the first ones ([unused*] in BERT);
# above this many, zeros are padded instead (reference-notes.md).
MAX_DROPPED_IDS = 1000


CheckpointError = ModelFolderError  # a checkpoint folder lacks what an Aggretriever needs


@dataclass
class AggretrieverConfig:
    agg_dim: int = 640
    cls_dim: int = 128
    pooling: str = "agg*"
    dense_pooling: str = "cls"
    # L2-normalise the pooled state before `cls_proj`, as sentence-transformers runs all-MiniLM-L6-v2 (its scores are
    # cosines): with an identity-initialised projection (`identity_semantic_head`) the semantic part is the body's
    # own sentence vector, and the projection's scale alone sets its weight against the lexical part
    dense_normalize: bool = False
    # the query encoder's token limit when a command gives none: 32 as Pyserini encodes the released checkpoints'
    # queries; our full-width models keep the whole query (the body's limit), chosen on the development sets
    query_max_length: int = 32

    def __post_init__(self):
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {self.pooling!r}; known: {', '.join(POOLINGS)}")
        if self.dense_pooling not in DENSE_POOLINGS:
            raise ValueError(f"unknown dense_pooling {self.dense_pooling!r}; known: {', '.join(DENSE_POOLINGS)}")
        if self.agg_dim <= 0 or self.cls_dim < 0:
            raise ValueError(f"agg_dim must be > 0 and cls_dim >= 0, got {self.agg_dim}, {self.cls_dim}")
        if self.query_max_length < 2:
            raise ValueError(f"query_max_length must be >= 2 ([CLS] plus one token), got {self.query_max_length}")


def slice_layout(vocab_size: int, width: int) -> int:
    """How many leading ids to drop (> 0) or zeros to pad (< 0) so the vocabulary splits into rows of `width`."""
    extra = vocab_size % width
    return extra - width if extra > MAX_DROPPED_IDS else extra


def slice_width(agg_dim: int, full: bool) -> int:
    """Slices of the vocabulary: 2 x agg_dim for agg* (signed pairs), agg_dim for agg+."""
    return 2 * agg_dim if full else agg_dim


def slice_max(lexical: Tensor, width: int) -> Tensor:
    """[batch, vocab] -> [batch, width]: the max over each slice (ids equal modulo `width`, after the drop/pad rule)."""
    shift = slice_layout(lexical.shape[-1], width)
    if shift >= 0:
        lexical = lexical[:, shift:]
    else:
        lexical = nn.functional.pad(lexical, (0, -shift))
    return lexical.reshape(lexical.shape[0], -1, width).amax(1)


class _WeightedSoftmaxSliceMax(torch.autograd.Function):
    """`slice_max(v, width)` of v[b, t] = max over sequence b's rows i of w_i * softmax(l_i)[t] (the padded
    sequences' zeros included), from the rows' logits [N, vocab] and weights [N], for training.

    Forward: each row's slice maxima in log space (`position_slice_maxima`, blocks of rows), never the [N, vocab]
    probabilities; then the max over each sequence's rows, keeping the winning row. Each output is one (row, id)'s
    w_i p_i[t], so its gradient goes to that winner alone: d/dw_i = p_i[t], d/dl_i = w_i p_i[t] (e_t - p_i). The
    backward finds each winner's id among its slice's ~vocab/width ids and writes the logits' gradient in one pass
    over [N, vocab], where autograd through v makes and reads several [N, vocab] tensors (each a fresh allocation,
    whose page faults alone cost about as much as a pass). Ties (equal values to the last bit) send the whole
    gradient to one winner where autograd's max would split it."""

    @staticmethod
    def forward(ctx, logits: Tensor, weights: Tensor, lengths: list[int], floored: list[bool], width: int) -> Tensor:
        rows, vocab = logits.shape
        if sum(lengths) != rows:
            raise ValueError(f"lengths add up to {sum(lengths)} rows, but there are {rows} rows of logits")
        compute = torch.promote_types(logits.dtype, torch.float32)
        per_row = logits.new_empty((rows, width), dtype=compute)
        log_total = logits.new_empty((rows, 1), dtype=compute)
        for start, end in _row_blocks(logits):
            per_row[start:end], log_total[start:end] = _slice_maxima_and_log_total(
                logits[start:end], weights[start:end], width)
        out = per_row.new_zeros((len(lengths), width))
        winners = torch.full((len(lengths), width), -1, dtype=torch.long, device=logits.device)
        offset = 0
        for b, (length, floor) in enumerate(zip(lengths, floored)):
            if length:
                values, best = per_row[offset:offset + length].max(0)
                won = values > 0 if floor else values != 0  # else a padded zero (no gradient) is the max
                out[b] = torch.where(won, values, torch.zeros_like(values))
                winners[b] = torch.where(won, best + offset, torch.full_like(best, -1))
            offset += length
        ctx.width = width
        ctx.save_for_backward(logits, weights, log_total, winners)
        return out  # float32 (float64 for float64 logits), as the reference's softmax gives under autocast

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        logits, weights, log_total, winners = ctx.saved_tensors
        vocab, width, compute = logits.shape[1], ctx.width, log_total.dtype
        live = winners >= 0
        rows = winners[live]
        grad = grad_out[live].to(compute)
        weight = weights.to(compute)[rows]
        # the winning id: the largest logit of the row's slice (the smallest for a negative weight) among its real ids
        shift = slice_layout(vocab, width)
        slice_ids = (torch.arange((vocab - shift) // width, device=logits.device)[:, None] * width
                     + torch.arange(width, device=logits.device) + max(shift, 0))  # [slice rows, width]
        ids = slice_ids.t()[live.nonzero()[:, 1]]  # [winners, slice rows]
        real = ids < vocab
        candidates = logits[rows[:, None], ids.clamp(max=vocab - 1)].to(compute)
        positive = weight > 0
        candidates = torch.where(real, candidates, torch.where(positive, -torch.inf, torch.inf)[:, None])
        pick = torch.where(positive, candidates.argmax(1), candidates.argmin(1))
        columns = ids.gather(1, pick[:, None])[:, 0]
        probability = torch.exp(logits[rows, columns].to(compute) - log_total[rows, 0])
        grad_weights = log_total.new_zeros(len(weights)).index_add_(0, rows, grad * probability)
        coefficient = grad * weight * probability  # w_i p_i[t] per winning entry
        row_totals = log_total.new_zeros(len(weights)).index_add_(0, rows, coefficient)
        grad_logits = torch.empty_like(logits)
        for start, end in _row_blocks(logits):  # -p_i x the row's total, then the winners' own terms
            grad_logits[start:end] = torch.exp(logits[start:end].to(compute) - log_total[start:end]).mul_(
                -row_totals[start:end, None])
        grad_logits.index_put_((rows, columns), coefficient.to(logits.dtype), accumulate=True)
        return grad_logits, grad_weights.to(weights.dtype), None, None, None


def _row_blocks(logits: Tensor) -> list[tuple[int, int]]:
    """Blocks of rows whose float32 copy stays small (~16 MB) on a CPU: a fresh [N, vocab] array costs page faults
    as long as a pass over it; all rows at once on an accelerator."""
    rows = len(logits) if logits.device.type != "cpu" else max(1, (1 << 22) // max(logits.shape[1], 1))
    return [(start, min(start + rows, len(logits))) for start in range(0, len(logits), rows)]


def weighted_softmax_slice_max(logits: Tensor, weights: Tensor, lengths: list[int], floored: list[bool],
                               width: int) -> Tensor:
    """[batch, width] = `slice_max(v, width)` for v as `Aggretriever.lexical` defines it, from the non-padding
    positions' logits [N, vocab] and weights [N] grouped by sequence (`lengths` rows each; `floored`: the sequence
    has padding, whose zeros join the max), with a sparse backward (`_WeightedSoftmaxSliceMax`)."""
    return _WeightedSoftmaxSliceMax.apply(logits, weights, lengths, floored, width)


def fold_slices(pooled: Tensor, full: bool) -> Tensor:
    """agg* (full=True): each pair of slice maxima becomes one signed value; agg+: the slice maxima as they are."""
    if not full:
        return pooled
    positive, negative = pooled[:, 0::2], pooled[:, 1::2]
    return torch.where(positive > negative, positive, -negative)


def aggregate(lexical: Tensor, agg_dim: int = 640, full: bool = True) -> Tensor:
    """Slice max pooling of [batch, vocab] lexical vectors: agg* (full=True, signed pairs) or agg+."""
    return fold_slices(slice_max(lexical, slice_width(agg_dim, full)), full)


def _slice_extrema(logits: Tensor, width: int, largest: bool) -> Tensor:
    """Per row of [rows, vocab] logits, the max (largest) or min over each slice, as `slice_max` lays the slices out;
    padded ids count as logit -inf (probability 0)."""
    shift = slice_layout(logits.shape[-1], width)
    body = logits[:, max(shift, 0):]
    whole = body.shape[1] // width * width
    reduce, pair = (torch.amax, torch.maximum) if largest else (torch.amin, torch.minimum)
    if whole:
        out = reduce(body[:, :whole].reshape(len(body), -1, width), 1)
    else:  # a vocabulary narrower than one slice row
        out = body.new_full((len(body), width), float("-inf") if largest else float("inf"))
    if shift < 0:  # the last, partial row of the vocabulary, then the padded ids
        tail = body[:, whole:].shape[1]
        padded = out[:, tail:] if largest else out.new_full((len(out), width - tail), float("-inf"))
        out = torch.cat((pair(out[:, :tail], body[:, whole:]), padded), 1)
    return out


def position_slice_maxima(logits: Tensor, weights: Tensor, width: int, bias: Tensor | None = None) -> Tensor:
    """[rows, width] float32: for each position i (a row of logits, plus `bias` where the product left it out), the
    max over each slice of w_i * softmax(l_i).

    In log space, without writing the probabilities: softmax is monotone within a row, so a slice's largest
    probability is exp(its largest logit - logsumexp(l_i)), and its smallest (what a negative w_i picks, as w_i * p
    then falls as p rises) exp(smallest logit - logsumexp(l_i))."""
    return _slice_maxima_and_log_total(logits, weights, width, bias)[0]


def _slice_maxima_and_log_total(logits: Tensor, weights: Tensor, width: int, bias: Tensor | None = None
                                ) -> tuple[Tensor, Tensor]:
    """`position_slice_maxima` and each row's logsumexp [rows, 1], in float32 (float64 for float64 logits)."""
    compute = torch.promote_types(logits.dtype, torch.float32)
    logits = logits.to(compute) if bias is None else logits.to(compute) + bias
    log_total = torch.logsumexp(logits, 1, keepdim=True)
    largest = torch.exp(_slice_extrema(logits, width, largest=True) - log_total)
    smallest = torch.exp(_slice_extrema(logits, width, largest=False) - log_total)
    weights = weights.to(compute)[:, None]
    return torch.where(weights < 0, smallest, largest) * weights, log_total


# torch.compile (inductor) fuses position_slice_maxima into a few passes over each block, where eager torch writes
# several [rows, vocab] temporaries: 1.7 against 3.1 ms per 64 x 30,522 block (bfloat16 logits; float32 1.9 against
# 3.2; one thread, Xeon with AMX). Compiled per block shape, so only for full blocks of real vocabularies; eager
# elsewhere, and everywhere if compiling fails (no C++ compiler) or PYSERINI_EXT_COMPILE=0.
COMPILE_MIN_VOCAB = 4096
_compiled_slice_maxima: Callable | None = None
_compile_failed = False


def block_slice_maxima(logits: Tensor, weights: Tensor, width: int, full_block: bool, bias: Tensor | None = None
                       ) -> Tensor:
    """`position_slice_maxima` of one block of positions, compiled where that pays (see above)."""
    global _compiled_slice_maxima, _compile_failed
    if (_compile_failed or not full_block or logits.device.type != "cpu" or logits.shape[1] < COMPILE_MIN_VOCAB
            or os.environ.get("PYSERINI_EXT_COMPILE", "1") == "0"):
        return position_slice_maxima(logits, weights, width, bias)
    if _compiled_slice_maxima is None:
        _compiled_slice_maxima = torch.compile(position_slice_maxima, dynamic=False)
    try:
        return _compiled_slice_maxima(logits, weights, width, bias)
    except Exception as error:  # inductor's failures have no common base class; the eager result is the same
        _compile_failed = True
        warnings.warn(f"torch.compile could not build the Aggretriever's vocabulary kernel ({type(error).__name__}: "
                      f"{str(error)[:200]}); encoding on in eager mode, about 1.4x slower", stacklevel=2)
        return position_slice_maxima(logits, weights, width, bias)


class MaskedLMHead:
    """Splits a masked-LM model into its transformer body and its vocabulary head (BERT, DistilBERT).

    The head is `decode(transform(h))`: a per-position transform, then the projection onto the vocabulary.
    """

    def __init__(self, mlm: nn.Module):
        self.mlm = mlm
        if hasattr(mlm, "cls") and hasattr(mlm.cls, "predictions"):  # BERT family
            self.transform, self.decode = mlm.cls.predictions.transform, mlm.cls.predictions.decoder
        elif hasattr(mlm, "vocab_projector"):  # DistilBERT
            self.transform = lambda h: mlm.vocab_layer_norm(mlm.activation(mlm.vocab_transform(h)))
            self.decode = mlm.vocab_projector
        else:
            raise CheckpointError(f"unsupported masked-LM backbone {type(mlm).__name__}: Aggretriever supports "
                                  "BERT-family (BertForMaskedLM) and DistilBertForMaskedLM")
        self._decoder_key, self._decoder_columns = None, None

    def head_parameters(self) -> list[nn.Parameter]:
        """The head's own weights: the transform and the decoder's bias, not the decoder's weight (tied to the body's
        word embeddings in BERT and DistilBERT)."""
        if hasattr(self.mlm, "cls"):
            modules = [self.mlm.cls.predictions.transform]
        else:
            modules = [self.mlm.vocab_transform, self.mlm.vocab_layer_norm]
        own = [p for module in modules for p in module.parameters()]
        if self.decode.weight is not self.mlm.get_input_embeddings().weight:  # untied (`untie_decoder`)
            own.append(self.decode.weight)
        return own + ([self.decode.bias] if self.decode.bias is not None else [])

    def hidden_states(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.mlm.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def logits(self, hidden: Tensor) -> Tensor:
        return self.decode(self.transform(hidden))

    def decoder_columns(self, fold_bias: bool = True) -> Tensor:
        """[hidden (+ 1), vocab], contiguous: the decoder's weight transposed, with its bias as one more row where it
        has one and `fold_bias`, so that `[transform(h), 1] @ decoder_columns()` are the logits from one matrix
        product without a bias pass. Contiguous columns, not a transposed view: the product runs 1.3-1.5x faster on
        it (bf16 and fp32).

        Kept until the weights change (in place or by `.to()`): building it copies the whole [vocab, hidden]
        matrix, which would cost more than encoding a short query."""
        weight, bias = self.decode.weight, self.decode.bias
        fold_bias = fold_bias and bias is not None
        key = (weight.data_ptr(), weight._version, weight.dtype, fold_bias,
               (bias.data_ptr(), bias._version) if fold_bias else None)
        if self._decoder_key != key:
            with torch.no_grad():
                rows = torch.cat((weight, bias[:, None].to(weight.dtype)), 1) if fold_bias else weight
                self._decoder_columns = rows.T.contiguous()
            self._decoder_key = key
        return self._decoder_columns


class Aggretriever(nn.Module):
    """State-dict layout of Pyserini's checkpoints: `encoder.*` (the masked LM), `tok_proj.*`, `cls_proj.*`.

    `cls_proj` keeps its name with `dense_pooling="mean"` (it then projects the mean state), so that the folder
    layout and the output vector's layout stay Pyserini's."""

    def __init__(self, encoder: nn.Module, config: AggretrieverConfig | None = None):
        super().__init__()
        self.config = config or AggretrieverConfig()
        self.encoder = encoder
        hidden = encoder.config.hidden_size if hasattr(encoder.config, "hidden_size") else encoder.config.dim
        self.tok_proj = nn.Linear(hidden, 1)
        self.cls_proj = nn.Linear(hidden, self.config.cls_dim) if self.config.cls_dim else None
        self._mlm = MaskedLMHead(encoder)
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
            return hidden.new_zeros((batch, self.vocab_size)).scatter_reduce(1, ids, src, reduce="amax",
                                                                             include_self=True)
        probs = torch.softmax(self._mlm.logits(hidden[:, 1:][mask]), dim=-1) * weights[mask][:, None]
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
                                        or any(p.requires_grad for p in self._mlm.head_parameters())):
            return weighted_softmax_slice_max(self._mlm.logits(hidden[:, 1:][mask]), flat_weights,
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
        # (bench/bench_decoder_product.py)
        fold_bias = not (dtype == torch.bfloat16 and device == "cpu") or self._mlm.decode.bias is None
        decoder = self._mlm.decoder_columns(fold_bias).to(dtype)
        bias = None if fold_bias else self._mlm.decode.bias.float()
        transformed = self._mlm.transform(hidden[:, 1:][mask]).to(dtype)
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
        hidden = self._mlm.hidden_states(input_ids, attention_mask)
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
        state = _read_state_dict(checked.weights)
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


def _read_state_dict(weights: Path) -> dict[str, Tensor]:
    try:
        if weights.name.endswith(".safetensors"):
            from safetensors.torch import load_file

            return load_file(str(weights))
        return torch.load(weights, map_location="cpu", weights_only=True)  # published checkpoints only
    except Exception as e:
        raise CheckpointError(f"{weights}: unreadable weights ({e})") from e


def from_masked_lm(backbone: str | os.PathLike, config: AggretrieverConfig | None = None,
                   constant_term_weight: float | None = None, zero_cls: bool = False) -> Aggretriever:
    """New heads on a masked-LM backbone folder (or hub name).

    A BERT body without a masked-LM head gets a tied one (`tie_identity_head`).
    `constant_term_weight=1, zero_cls=True` gives an untrained but meaningful model: pure MLM lexical
    matching (every position weighs 1, no semantic part), which the demo uses until trained weights exist.
    """
    encoder, loading = load_transformer(AutoModelForMaskedLM, resolve_model_folder(backbone),
                                        output_loading_info=True)
    if any(key.startswith("cls.predictions.") for key in loading["missing_keys"]):
        tie_identity_head(encoder)
    model = Aggretriever(encoder, config)
    if constant_term_weight is not None:
        nn.init.zeros_(model.tok_proj.weight)
        nn.init.constant_(model.tok_proj.bias, constant_term_weight)
    if zero_cls and model.cls_proj is not None:
        nn.init.zeros_(model.cls_proj.weight)
        nn.init.zeros_(model.cls_proj.bias)
    return model.eval()


def identity_semantic_head(model: Aggretriever, scale: float = 1.0) -> None:
    """`cls_proj` = scale x identity, bias 0: the semantic part is the body's pooled state itself (normalised where
    `dense_normalize`), at full width, times `scale`; its inner products are scale^2 x the body's own."""
    hidden = model.tok_proj.in_features
    if model.cls_proj is None or model.config.cls_dim != hidden:
        raise ValueError(f"an identity semantic head needs cls_dim == the body's width {hidden}, "
                         f"got {model.config.cls_dim}")
    if not scale > 0:
        raise ValueError(f"the semantic part's scale must be > 0, got {scale}")
    with torch.no_grad():
        model.cls_proj.weight.copy_(torch.eye(hidden) * scale)
        model.cls_proj.bias.zero_()


def untie_decoder(model: Aggretriever) -> None:
    """Give the MLM head's decoder its own copy of the word embeddings (BERT and DistilBERT tie them), so that the
    head can learn its vocabulary projection while the body stays frozen; the folder then stores the copy too."""
    decoder = model._mlm.decode
    if decoder.weight is model.encoder.get_input_embeddings().weight:
        model.encoder.config.tie_word_embeddings = False
        decoder.weight = nn.Parameter(decoder.weight.detach().clone())


def tie_identity_head(encoder: nn.Module) -> None:
    """A masked-LM head for a BERT body saved without one (all-MiniLM-L6-v2 is a bare BertModel): the decoder is
    tied to the word embeddings (transformers does that) and the transform starts as LayerNorm(gelu(h)), with an
    identity projection and no biases, instead of random weights, so that each position's distribution starts
    near the tokens whose embeddings its hidden state resembles and training refines it."""
    predictions = getattr(getattr(encoder, "cls", None), "predictions", None)
    if predictions is None:
        raise CheckpointError(f"{type(encoder).__name__} has no MLM head and is not a BERT body to tie one to")
    with torch.no_grad():
        transform = predictions.transform
        transform.dense.weight.copy_(torch.eye(transform.dense.weight.shape[0]))
        transform.dense.bias.zero_()
        transform.LayerNorm.weight.fill_(1.0)
        transform.LayerNorm.bias.zero_()
        predictions.bias.zero_()


def convert_training_checkpoint(src: str | os.PathLike, out: str | os.PathLike) -> Path:
    """castorini/dhr training-repo folder -> Pyserini-format folder.

    The training repo saves the masked LM with `save_pretrained` and the heads as separate files:
    `pooler.pt` ([CLS] projection) and `TermWeightTrans.pt`, each a LinearPooler state dict (`linear_q.*`,
    and `linear_p.*` which equals it when query and passage encoders are tied).
    """
    src = Path(src)
    if (src / "query_model").is_dir():
        raise CheckpointError(f"{src}: untied query/passage encoders cannot be expressed in Pyserini's format")
    heads = {}
    for name, target in (("TermWeightTrans.pt", "tok_proj"), ("pooler.pt", "cls_proj")):
        path = src / name
        if not path.is_file():
            raise CheckpointError(f"{src}: missing {name} (the {target} head of a training-repo checkpoint)")
        pooler = torch.load(path, map_location="cpu", weights_only=True)
        if "linear_p.weight" in pooler and not torch.equal(pooler["linear_p.weight"], pooler["linear_q.weight"]):
            raise CheckpointError(f"{path}: untied query/passage heads cannot be expressed in Pyserini's format")
        heads[f"{target}.weight"], heads[f"{target}.bias"] = pooler["linear_q.weight"], pooler["linear_q.bias"]
    encoder = load_transformer(AutoModelForMaskedLM, src)
    model = Aggretriever(encoder, AggretrieverConfig(cls_dim=heads["cls_proj.weight"].shape[0]))
    model.tok_proj.load_state_dict({"weight": heads["tok_proj.weight"], "bias": heads["tok_proj.bias"]})
    model.cls_proj.load_state_dict({"weight": heads["cls_proj.weight"], "bias": heads["cls_proj.bias"]})
    tokenizer = None
    if (src / "tokenizer_config.json").is_file() or (src / "vocab.txt").is_file():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(src)
    return model.save_pretrained(out, tokenizer)
