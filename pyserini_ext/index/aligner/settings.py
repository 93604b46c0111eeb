"""Every setting of an AligneR index build, its one check, and the defaults that follow the corpus size."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pyserini_ext.index.aligner.candidates import CANDIDATES, CandidateGenerator
from pyserini_ext.index.aligner.codecs import CODECS, TokenCodec
from pyserini_ext.index.aligner.reduction import DEFAULT_REDUCTION, DUPLICATE_COSINE, check_reduction

# From this many documents the default is residual-pq codes + centroid candidates (below: the exact float16 store
# with flat candidates, which a corpus this small searches in a few milliseconds, and too few tokens to train on)
COMPRESSED_MIN_DOCUMENTS = 2048
MAX_TRAIN_TOKENS = 1 << 20  # token vectors the quantizers train on, at most (bounded memory at any corpus size)
TWO_LEVEL_NLIST = 1 << 13  # from this many lists, Faiss's two-level k-means and an HNSW coarse quantizer
# centroids per query token probed, at every nlist (development queries, docs/aligner.md): PLAID's 2-4 at 16,384
# lists and more (corpora of more than 2^20 tokens) ranked 1,024 candidates that held the exact top 10 at recall 0.93
# (DL19 subset, MS MARCO train queries; 0.96 at 32) and 0.78 at 1M passages
DEFAULT_NPROBE = 32
RECORDED = ("nlist", "pq_m", "pq_bits", "hnsw_m")  # settings the metadata records where a codec/generator uses them


def default_nlist(n_tokens: int, dim: int = 128) -> int:
    """Coarse centroids for an index of `n_tokens` kept tokens of `dim` dimensions (a power of two).

    Up to 2^20 tokens (every corpus our figures come from) about 4 sqrt(tokens), between 16 and 1024, as chosen on
    development queries. Above, PLAID's rule 2^floor(log2(16 sqrt(tokens))) (2^17-2^18 for MS MARCO passage, PLAID's
    own 2^18): the lists must grow with the corpus for the documents under a query's probed lists to stay a small
    fraction of it (they are ~ query tokens x nprobe x tokens per list), and sqrt keeps k-means on a bounded sample;
    but at most 2^floor(log2(tokens / dim)), so that the float16 centroid table (2 dim bytes a list) costs at most 2
    bytes per token (SciFact's 1.24M tokens: 8,192 lists, 1.7 bytes per token, instead of 16,384 and 3.4; the same
    nDCG@10 on SciFact train, docs/aligner.md). The cap binds only just above 2^20 tokens.
    """
    if n_tokens <= 1 << 20:
        return int(min(1024, max(16, 2 ** round(np.log2(max(1.0, 4 * np.sqrt(n_tokens)))))))
    return int(2 ** min(np.floor(np.log2(16 * np.sqrt(n_tokens))), np.floor(np.log2(n_tokens / dim))))


def default_search() -> dict:
    """The search settings an index records for a searcher that is given none (the same at every nlist since
    PLAID's few probes at large ones lost recall, DEFAULT_NPROBE)."""
    return {"nprobe": DEFAULT_NPROBE}


@dataclass
class AlignerIndexSettings:
    """Every setting of an AligneR index build; None: chosen by corpus size (see `resolved`)."""
    beta_d: float = 1.0
    reduction: str = DEFAULT_REDUCTION
    duplicate_cosine: float | None = DUPLICATE_COSINE
    codec: str | None = None
    candidates: str | None = None
    nlist: int | None = None
    pq_m: int = 32
    pq_bits: int | None = None
    hnsw_m: int = 32
    train_size: int | None = None
    max_length: int | None = None
    batch_size: int = 32

    def check(self) -> None:
        """Every range and name check of the settings (a ValueError naming the setting)."""
        check_reduction(self.beta_d, self.reduction, self.duplicate_cosine)
        if self.codec is not None and self.codec not in CODECS:
            raise ValueError(f"codec must be one of {tuple(CODECS)}, got {self.codec!r}")
        if self.candidates is not None and self.candidates not in CANDIDATES:
            raise ValueError(f"candidates must be one of {tuple(CANDIDATES)}, got {self.candidates!r}")
        if self.candidates is not None and self.codec is not None:
            CANDIDATES[self.candidates].check_codec(self.codec)

    def resolved(self, documents: int) -> AlignerIndexSettings:
        """Codec, candidates and PQ bits filled in for a corpus of `documents` documents: one default path from
        `COMPRESSED_MIN_DOCUMENTS` up (residual-pq + centroid, nlist from the token count), exact below."""
        compressed = documents >= COMPRESSED_MIN_DOCUMENTS
        required = CANDIDATES[self.candidates].requires_codec if self.candidates else None
        codec = self.codec or required or ("residual-pq" if compressed else "float16")
        candidates = self.candidates or ("centroid" if compressed and codec == "residual-pq" else "flat")
        pq_bits = self.pq_bits or CODECS[codec].default_pq_bits
        return replace(self, codec=codec, candidates=candidates, pq_bits=pq_bits)

    @property
    def codec_class(self) -> type[TokenCodec]:
        return CODECS[self.codec]

    @property
    def candidates_class(self) -> type[CandidateGenerator]:
        return CANDIDATES[self.candidates]

    @property
    def trains(self) -> bool:
        return self.codec_class.trains or self.candidates_class.trains

    def recorded(self) -> dict:
        """nlist, pq_m, pq_bits, hnsw_m as the metadata records them: None where neither object uses one."""
        used = {*self.codec_class.recorded, *self.candidates_class.recorded}
        return {name: getattr(self, name) if name in used else None for name in RECORDED}

    def build_options(self, dim: int) -> dict:
        """What the codec and the candidate generator are given at every step of the build."""
        if self.trains and dim % self.pq_m:
            raise ValueError(f"pq_m={self.pq_m} must divide the vector dimension {dim}")
        train_size = self.train_size or (min(MAX_TRAIN_TOKENS, max(64 * self.nlist, 1 << 16)) if self.nlist else None)
        return {"dim": dim, "nlist": self.nlist, "pq_m": self.pq_m, "pq_bits": self.pq_bits, "hnsw_m": self.hnsw_m,
                "train_size": train_size, "two_level": bool(self.nlist and self.nlist >= TWO_LEVEL_NLIST)}
