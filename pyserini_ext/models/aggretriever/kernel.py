"""The vocabulary kernels: each position's slice maxima of w_i * softmax(l_i) computed in log space, one block of
positions at a time (compiled where that pays), and the autograd function that training differentiates them with."""
from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from pyserini_ext.models.aggretriever.pooling import slice_layout


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
