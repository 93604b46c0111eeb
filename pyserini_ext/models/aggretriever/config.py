"""The Aggretriever's settings (`aggretriever_config.json`) and the names of its folder's files."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pyserini_ext.errors import ModelFolderError
from pyserini_ext.models.folder import AGGRETRIEVER, WEIGHTS_FILE, config_file

POOLINGS = ("agg*", "agg+", "no-mlm")
# What the semantic part projects: the [CLS] state (the paper, every released checkpoint) or the mean of the
# sequence's states, for a body trained with mean pooling (all-MiniLM-L6-v2), whose [CLS] state is a weak vector
DENSE_POOLINGS = ("cls", "mean")
AGG_CONFIG_NAME = config_file(AGGRETRIEVER)
WEIGHTS_NAME = WEIGHTS_FILE
# In the released rule, ids dropped to make the vocabulary divisible are the first ones ([unused*] in BERT);
# above this many, zeros are padded instead (docs/references.md).
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
    # A query of n > query_lexical_tokens tokens has its lexical part scaled by query_lexical_tokens / n, on the query
    # side only (the index is unchanged). Max pooling over a long query's positions fills most of the 640 slices, and
    # that part then ranks far below BM25 and drags the concatenation below its semantic part alone; short queries,
    # where it helps, are untouched. None: no scaling (the released checkpoints, as Pyserini encodes them).
    query_lexical_tokens: int | None = None

    def query_lexical_scales(self, token_counts: Sequence[int] | np.ndarray) -> np.ndarray:
        """The factor of each query's lexical part, from its token count ([CLS] and [SEP] not counted)."""
        counts = np.maximum(np.asarray(token_counts, dtype=np.float64), 1.0)
        if self.query_lexical_tokens is None:
            return np.ones_like(counts, dtype=np.float32)
        return np.minimum(1.0, self.query_lexical_tokens / counts).astype(np.float32)

    def __post_init__(self):
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {self.pooling!r}; known: {', '.join(POOLINGS)}")
        if self.dense_pooling not in DENSE_POOLINGS:
            raise ValueError(f"unknown dense_pooling {self.dense_pooling!r}; known: {', '.join(DENSE_POOLINGS)}")
        if self.agg_dim <= 0 or self.cls_dim < 0:
            raise ValueError(f"agg_dim must be > 0 and cls_dim >= 0, got {self.agg_dim}, {self.cls_dim}")
        if self.query_max_length < 2:
            raise ValueError(f"query_max_length must be >= 2 ([CLS] plus one token), got {self.query_max_length}")
        if self.query_lexical_tokens is not None and self.query_lexical_tokens < 1:
            raise ValueError(f"query_lexical_tokens must be >= 1 (or null), got {self.query_lexical_tokens}")
