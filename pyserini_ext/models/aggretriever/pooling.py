"""The slice max pooling that turns a [vocab] lexical vector into agg_dim values (agg*, agg+), and its vocabulary
layout (which ids are dropped or padded so that the vocabulary splits into rows of one slice width)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from pyserini_ext.models.aggretriever.config import MAX_DROPPED_IDS


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


def fold_slices(pooled: Tensor, full: bool) -> Tensor:
    """agg* (full=True): each pair of slice maxima becomes one signed value; agg+: the slice maxima as they are."""
    if not full:
        return pooled
    positive, negative = pooled[:, 0::2], pooled[:, 1::2]
    return torch.where(positive > negative, positive, -negative)


def aggregate(lexical: Tensor, agg_dim: int = 640, full: bool = True) -> Tensor:
    """Slice max pooling of [batch, vocab] lexical vectors: agg* (full=True, signed pairs) or agg+."""
    return fold_slices(slice_max(lexical, slice_width(agg_dim, full)), full)
