"""AligneR token index: salience-reduced token vectors, stored by a codec, found by a candidate generator.

    encoding.py    `encode_corpus` -> `EncodedCorpus` (token vectors + salience; one .npz cache format)
    reduction.py   keep ceil(beta_d * m) vectors per document: `pool_tokens` (default) or `prune_tokens`
    codecs.py      how token vectors are stored (float16, residual-pq): objects owning fit / write_part /
                   finalise / read
    candidates.py  how candidate documents are found (flat, ivfpq, hnsw, centroid): the same interface
    settings.py    `AlignerIndexSettings` (its one check) and the defaults that follow the corpus size
    build.py       the streaming build (index/streaming.py): resumable, on Ray alike; `build_index` for an encoding
    reader.py      `AlignerIndex.open`: every file checked against the metadata; formats 1 and 2
    files.py       the folder's files (`IndexFiles`), `AlignerIndexError`, the format names

An index folder:

   metadata.json   format, model (path, fingerprint), dims, settings, codec, candidates, counts, search defaults,
                   bytes per file
   docids.txt      one docid per line, in index order
   offsets.npy     int64 [documents + 1]: tokens of document i are rows offsets[i]:offsets[i + 1]
   weights.npy     float16 [tokens]: document salience u = ReLU(W d + b) of every kept (or pooled) token
   vectors.npy     float16 [tokens, dim]                            (codec "float16")
   codes.npy + codec.faiss + centroids.npy   uint8 [tokens, code bytes] + trained IVF-PQ + its coarse centroids
                   as float16 (codec "residual-pq": centroid id + PQ code of the residual, ColBERTv2-style; decoded
                   with Faiss `sa_decode`; indexes written before keep their centroids inside codec.faiss)
   candidates.faiss          token-level ANN index (candidates "ivfpq" or "hnsw"); "flat" stores nothing
                   and keeps the stored vectors as float32 in memory for an exact search when the index is opened.
   centroid_docs.npy + centroid_offsets.npy + segments.npy   inverted lists centroid -> documents per segment of
                   at most 65,536 documents (candidates "centroid", PLAID-style, from the centroid ids inside the
                   residual-pq codes: no second index)

An opened index memory-maps every array. `bytes_per_token` in the metadata counts every file of the folder. The
folder is written under a temporary name and renamed when complete, so an interrupted build leaves no folder that
opens; `AlignerIndex.open` checks every file against the metadata and names what is wrong.

The names below are the package's public API (the submodules import one another, never this package).
"""
from pyserini_ext.index.aligner.build import (
    AlignerIndexBuilder,
    EncodedCorpusBuilder,
    build_aligner_index,
    build_encoded,
    build_index,
)
from pyserini_ext.index.aligner.candidates import CANDIDATES, CandidateGenerator
from pyserini_ext.index.aligner.codecs import CODECS, TokenCodec
from pyserini_ext.index.aligner.encoding import EncodedCorpus, encode_corpus
from pyserini_ext.index.aligner.files import INDEX_FORMAT, METADATA_FILE, AlignerIndexError, is_index
from pyserini_ext.index.aligner.reader import AlignerIndex
from pyserini_ext.index.aligner.reduction import (
    DEFAULT_REDUCTION,
    DUPLICATE_COSINE,
    REDUCTIONS,
    pool_tokens,
    prune_tokens,
)
from pyserini_ext.index.aligner.settings import AlignerIndexSettings, default_nlist, default_search

__all__ = [
    "CANDIDATES", "CODECS", "DEFAULT_REDUCTION", "DUPLICATE_COSINE", "INDEX_FORMAT", "METADATA_FILE", "REDUCTIONS",
    "AlignerIndex", "AlignerIndexBuilder", "AlignerIndexError", "AlignerIndexSettings", "CandidateGenerator",
    "EncodedCorpus", "EncodedCorpusBuilder", "TokenCodec", "build_aligner_index", "build_encoded", "build_index",
    "default_nlist", "default_search", "encode_corpus", "is_index", "pool_tokens", "prune_tokens",
]
