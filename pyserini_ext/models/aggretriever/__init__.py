"""Aggretriever (Lin et al., 2023): [CLS] projection + aggregated MLM lexical representation, one vector.

Output = concat(cls_proj(e_cls), agg(v)), semantic part first, as in Pyserini's prebuilt indexes, with
  v[t] = max_i softmax(MLM logits_i)[t] * w_i * mask_i   over positions i = 1..L-1 ([CLS] left out),
  w_i = tok_proj(h_i), the raw term weight (the released code applies no |.| or ReLU).
`agg*` (default) slice-max-pools v into 2d columns and folds them into d signed values; `agg+` stops at d
slice maxima; the no-MLM variant puts w_i at the input token id instead of spreading it over the vocabulary.
docs/references.md gives the released code's exact rules, which the checkpoints follow.
Two layouts of the semantic part: Pyserini's (a 128-dim projection of the [CLS] state, the released checkpoints),
and the full-width one for a body trained with mean pooling (`dense_pooling="mean"`, `dense_normalize`,
`cls_dim` = the body's width, `identity_semantic_head`): the body's own sentence vector, scaled.

Memory and time: the reference computes v from a batch x length x vocab tensor (several copies of it, GBs per
batch). When encoding, only the non-padding positions go through the MLM head, `position_chunk` rows at a time,
and v itself is never built: each position's slice maxima go into a running max of the slice maxima
(`Aggretriever.slice_maxima`); the result is the same (the padded positions' zeros are put back into the max).
Training computes the same values in blocks of rows and differentiates them with a sparse backward
(`weighted_softmax_slice_max`): 1.5-1.8x faster per training step on a CPU than autograd through v.

One module per job: config.py (settings, file names), pooling.py (slice layout and max pooling), kernel.py (the
log-space vocabulary kernels and the training autograd function), mlm.py (the masked LM as body + vocabulary head),
model.py (the module, save / load), heads.py (new heads, head surgery, training-checkpoint conversion). This
package re-exports their public names, so `from pyserini_ext.models.aggretriever import ...` keeps working.
"""
from __future__ import annotations

from pyserini_ext.models.aggretriever.config import (
    AGG_CONFIG_NAME,
    DENSE_POOLINGS,
    MAX_DROPPED_IDS,
    POOLINGS,
    WEIGHTS_NAME,
    AggretrieverConfig,
    CheckpointError,
)
from pyserini_ext.models.aggretriever.heads import (
    convert_training_checkpoint,
    from_masked_lm,
    identity_semantic_head,
    tie_identity_head,
    untie_decoder,
)
from pyserini_ext.models.aggretriever.kernel import (
    COMPILE_MIN_VOCAB,
    block_slice_maxima,
    position_slice_maxima,
    weighted_softmax_slice_max,
)
from pyserini_ext.models.aggretriever.mlm import MaskedLMHead
from pyserini_ext.models.aggretriever.model import Aggretriever, read_state_dict
from pyserini_ext.models.aggretriever.pooling import aggregate, fold_slices, slice_layout, slice_max, slice_width
from pyserini_ext.models.folder import resolve_model_folder  # imported from here by cli/ and train/ before the split

__all__ = [
    "AGG_CONFIG_NAME", "COMPILE_MIN_VOCAB", "DENSE_POOLINGS", "MAX_DROPPED_IDS", "POOLINGS", "WEIGHTS_NAME",
    "Aggretriever", "AggretrieverConfig", "CheckpointError", "MaskedLMHead", "aggregate", "block_slice_maxima",
    "convert_training_checkpoint", "fold_slices", "from_masked_lm", "identity_semantic_head",
    "position_slice_maxima", "read_state_dict", "resolve_model_folder", "slice_layout", "slice_max", "slice_width",
    "tie_identity_head", "untie_decoder", "weighted_softmax_slice_max",
]
