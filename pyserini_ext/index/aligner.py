"""AligneR token index: salience-pruned token vectors, stored compactly, plus a candidate generator.

1. `encode_corpus` -> `EncodedCorpus`: every token vector (float16) and its document-salience pre-activation (one
   chunk of a stream, or a whole small corpus kept as an --encoded cache for several pruning ratios).
2. The build (index/aligner_build.py, streaming: chunk by chunk, resumable, on Ray alike; `build_index` here for
   an `EncodedCorpus`) keeps ceil(beta_d * m) vectors of each document's m tokens, by default merging similar
   tokens (`pool_tokens`), or pruning to the most salient ones (`prune_tokens`, reduction="prune"), and writes

   metadata.json   format, model (path, fingerprint), dims, settings, codec, candidates, counts, search defaults,
                   bytes per file
   docids.txt      one docid per line, in index order
   offsets.npy     int64 [documents + 1]: tokens of document i are rows offsets[i]:offsets[i + 1]
   weights.npy     float16 [tokens]: document salience u = ReLU(W d + b) of every kept (or pooled) token
   vectors.npy     float16 [tokens, dim]                            (codec "float16")
   codes.npy + codec.faiss   uint8 [tokens, code bytes] + trained IVF-PQ   (codec "residual-pq": centroid id
                   + PQ code of the residual, ColBERTv2-style; decoded with Faiss `sa_decode`)
   candidates.faiss          token-level ANN index (candidates "ivfpq" or "hnsw"); "flat" stores nothing
                   and keeps the stored vectors as float32 in memory for an exact search when the index is opened.
   centroid_docs.npy + centroid_offsets.npy + segments.npy   inverted lists centroid -> documents per segment of
                   at most 65,536 documents (candidates "centroid", PLAID-style, from the centroid ids inside the
                   residual-pq codes: no second index)

Codecs and candidate generators are objects behind one small interface (index/aligner_codecs.py). An opened index
memory-maps every array. `bytes_per_token` in the metadata counts every file of the folder.

The folder is written under a temporary name and renamed when complete, so an interrupted build leaves no
folder that opens; `AlignerIndex.open` checks every file against the metadata and names what is wrong.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from pyserini_ext.data import atomic_output, check_id
from pyserini_ext.data.text import corpus_fingerprint, document_text, sanitize_texts
from pyserini_ext.encode.aligner import AlignerDocumentEncoder
from pyserini_ext.errors import CacheMismatchError, OutputExistsError
from pyserini_ext.index.aligner_codecs import (
    CANDIDATES,
    CODECS,
    AlignerIndexError,
    CandidateGenerator,
    IndexFiles,
    TokenCodec,
    documents_of,
)
from pyserini_ext.models.aligner import DOCUMENT, AlignerModel

INDEX_FORMAT = "pyserini-ext-aligner-index/2"
# format 1 (one segment of centroid lists, no segments.npy) still opens: the prebuilt catalogue's indexes
READABLE_FORMATS = ("pyserini-ext-aligner-index/1", INDEX_FORMAT)
METADATA_FILE = "metadata.json"
ENCODED_FILE = "encoded.npz"


@dataclass
class EncodedCorpus:
    """Unpruned token vectors of a corpus (float16), their salience pre-activations, and document offsets."""
    docids: list[str]
    offsets: np.ndarray
    vectors: np.ndarray
    salience_scores: np.ndarray
    model_info: dict = field(default_factory=dict)  # path, fingerprint, doc_max_length, corpus_fingerprint
    truncated: int = 0  # documents cut at doc_max_length tokens
    skipped_empty: list[str] = field(default_factory=list)

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        with atomic_output(path, overwrite=True) as tmp, open(tmp, "wb") as f:
            np.savez(f, offsets=self.offsets, vectors=self.vectors, salience_scores=self.salience_scores,
                     docids=np.array(self.docids, dtype=str),
                     info=np.array(json.dumps({"model": self.model_info, "truncated": self.truncated,
                                               "skipped_empty": self.skipped_empty})))
        return path

    def check_matches(self, path: str | os.PathLike, model: AlignerModel,
                      corpus: Mapping[str, Mapping[str, str]] | None = None, max_length: int | None = None) -> None:
        """Refuse a cache made with another model or max length, or from another corpus (when one is given)."""
        if max_length and max_length != self.model_info.get("doc_max_length"):
            raise CacheMismatchError(f"{path}: encoding cache made with max length "
                                     f"{self.model_info.get('doc_max_length')}, not {max_length}; delete it or "
                                     "give another --encoded")
        made_with = self.model_info.get("fingerprint")
        if made_with != model.fingerprint():
            raise CacheMismatchError(f"{path}: encoding cache made with another model (fingerprint {made_with}, "
                                     f"this model {model.fingerprint()}); delete it or give another --encoded")
        if corpus is not None and self.model_info.get("corpus_fingerprint") != corpus_fingerprint(corpus):
            raise CacheMismatchError(f"{path}: encoding cache made from another corpus; delete it or give another "
                                     "--encoded")

    def subset(self, rows: list[int]) -> EncodedCorpus:
        """The encoding of the documents at `rows` (in that order)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, lengths = self.offsets[rows], self.offsets[rows + 1] - self.offsets[rows]
        tokens = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
        return EncodedCorpus([self.docids[r] for r in rows], np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                             self.vectors[tokens], self.salience_scores[tokens], self.model_info, 0, [])

    @classmethod
    def load(cls, path: str | os.PathLike) -> EncodedCorpus:
        try:
            with np.load(path) as data:  # docids are a unicode array: no pickle
                info = json.loads(str(data["info"]))
                return cls([str(d) for d in data["docids"]], data["offsets"], data["vectors"],
                           data["salience_scores"], info["model"], info["truncated"], info["skipped_empty"])
        except (ValueError, KeyError, OSError) as e:
            raise AlignerIndexError(f"{path}: not a readable AligneR encoding cache ({e}); delete it to re-encode"
                                    ) from None


def encode_corpus(model: AlignerModel | AlignerDocumentEncoder,
                  corpus: Mapping[str, Mapping[str, str]] | Iterable[tuple[str, Mapping[str, str]]],
                  batch_size: int = 32, max_length: int | None = None, model_path: str = "",
                  progress: bool = True, allow_empty: bool = False) -> EncodedCorpus:
    """Encode every document (title + text). Empty documents are skipped and listed; long ones are truncated.

    `corpus`: a docid -> document mapping or (docid, document) pairs (one chunk of a stream). `model` may be an
    `AlignerDocumentEncoder` to encode on its runtime (ONNX Runtime; bf16, fp16, int8). allow_empty: an all-empty
    corpus gives an empty encoding (a chunk of a stream) instead of an error.
    """
    encoder = model if isinstance(model, AlignerDocumentEncoder) else None
    model = encoder.model if encoder else model
    max_length = max_length or model.config.doc_max_length
    encode_batch = partial(encoder.encode_batch, max_length=max_length) if encoder else None
    docids, texts, skipped = [], [], []
    pairs = list(corpus.items() if isinstance(corpus, Mapping) else corpus)
    for docid, doc in pairs:
        check_id(docid, "corpus")
        text = sanitize_texts([document_text(doc)], f"document {docid!r}")[0]
        (docids if text else skipped).append(docid)
        if text:
            texts.append(text)
    if not texts and not allow_empty:
        raise ValueError("encode_corpus: every document is empty; nothing to index")
    encoded = model.encode_texts(texts, DOCUMENT, batch_size=batch_size, max_length=max_length, progress=progress,
                                 encode_batch=encode_batch) if texts else []
    lengths = np.array([len(scores) for _, scores in encoded], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    dim = model.config.dim
    return EncodedCorpus(
        docids=docids, offsets=offsets,
        vectors=(np.concatenate([v for v, _ in encoded]) if encoded else np.zeros((0, dim))).astype(np.float16),
        salience_scores=(np.concatenate([s for _, s in encoded]) if encoded else np.zeros(0)).astype(np.float32),
        model_info={"path": model_path, "fingerprint": model.fingerprint(), "doc_max_length": max_length,
                    "dim": dim, "corpus_fingerprint": corpus_fingerprint(dict(pairs))},
        truncated=int((lengths >= max_length).sum()), skipped_empty=skipped)


def prune_tokens(offsets: np.ndarray, salience_scores: np.ndarray, beta_d: float, vectors: np.ndarray | None = None,
                 duplicate_cosine: float | None = None) -> np.ndarray:
    """Row numbers of the kept tokens: the top ceil(beta_d * m) of each document by salience, in original order.

    With `vectors` and `duplicate_cosine`, a token whose cosine with a more salient token of the same document is
    >= duplicate_cosine ranks after every other token of that document: a near-copy adds little to a MaxSim
    alignment, so the budget goes to distinct tokens first (repeated words, subwords of one word).
    """
    if not 0 < beta_d <= 1:
        raise ValueError(f"beta_d must be in (0, 1], got {beta_d}")
    lengths = np.diff(offsets)
    doc_of_token = np.repeat(np.arange(len(lengths)), lengths)
    duplicate = np.zeros(len(salience_scores), dtype=bool)
    if duplicate_cosine is not None and beta_d < 1:
        if vectors is None:
            raise ValueError("duplicate_cosine needs the token vectors")
        for start, stop in zip(offsets[:-1], offsets[1:]):
            by_salience = start + np.argsort(-salience_scores[start:stop], kind="stable")
            block = np.asarray(vectors[by_salience], dtype=np.float32)
            similar_to_earlier = np.tril(block @ block.T >= duplicate_cosine, k=-1)
            duplicate[by_salience] = similar_to_earlier.any(axis=1)
    # by document, then distinct tokens first, then salience descending
    order = np.lexsort((-salience_scores, duplicate, doc_of_token))
    rank_in_doc = np.empty(len(order), dtype=np.int64)
    rank_in_doc[order] = np.arange(len(order)) - offsets[doc_of_token[order]]
    keep_per_doc = np.maximum(1, np.ceil(lengths * beta_d - 1e-9).astype(np.int64))
    return np.flatnonzero(rank_in_doc < keep_per_doc[doc_of_token])


def pool_tokens(offsets: np.ndarray, vectors: np.ndarray, salience_scores: np.ndarray, beta_d: float,
                progress: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, vectors, salience scores) with each document's m tokens merged into at most ceil(beta_d * m).

    Token pooling (Clavie et al., 2024): Ward-linkage clusters of each document's token vectors; a cluster becomes
    the salience-weighted mean of its members, L2-normalised, and keeps its most salient member's score. Unlike
    pruning, no part of the document loses its vector: the tokens that go are merged into their nearest group.
    Fewer clusters than the budget come out only where vectors are identical.
    """
    from scipy.cluster.hierarchy import fcluster, linkage

    if not 0 < beta_d <= 1:
        raise ValueError(f"beta_d must be in (0, 1], got {beta_d}")
    pooled_vectors, pooled_scores, pooled_lengths = [], [], []
    for start, stop in tqdm(list(zip(offsets[:-1], offsets[1:])), desc="pool tokens", disable=not progress):
        block = np.asarray(vectors[start:stop], dtype=np.float64)
        scores = np.asarray(salience_scores[start:stop], dtype=np.float32)
        budget = max(1, int(np.ceil(len(block) * beta_d - 1e-9)))
        if budget >= len(block):
            pooled_vectors.append(block)
            pooled_scores.append(scores)
            pooled_lengths.append(len(block))
            continue
        labels = fcluster(linkage(block, method="ward"), budget, criterion="maxclust")
        order = np.argsort(labels, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(labels[order]) != 0])
        weights = np.maximum(scores[order], 0)[:, None] + 1e-6  # all-zero salience: the plain mean
        means = np.add.reduceat(block[order] * weights, starts)
        pooled_vectors.append(means / np.linalg.norm(means, axis=1, keepdims=True))
        pooled_scores.append(np.maximum.reduceat(scores[order], starts))
        pooled_lengths.append(len(starts))
    return (np.concatenate([[0], np.cumsum(pooled_lengths)]).astype(np.int64),
            np.concatenate(pooled_vectors).astype(vectors.dtype), np.concatenate(pooled_scores))


# Pruning pushes a token back when its cosine with a more salient token of its document is at least this: a
# near-copy adds little to a MaxSim alignment (chosen on development queries: experiments/aligner-token-reduction/)
DUPLICATE_COSINE: float | None = 0.85

# How an index keeps ceil(beta_d * m) vectors of a document's m tokens: "pool" merges them (`pool_tokens`),
# "prune" keeps the most salient (`prune_tokens`); pooling lost less (experiments/aligner-token-reduction/)
REDUCTIONS = ("pool", "prune")
DEFAULT_REDUCTION = "pool"

# Residual codes of 32 x 6 bits (24 bytes; ~30.5 bytes per kept token with the centroid id, weights and lists): the
# best loss per byte on development queries (docs/journal/aligner.md)
RESIDUAL_PQ_BITS = 6


def default_nlist(n_tokens: int) -> int:
    """Coarse centroids for an index of `n_tokens` kept tokens (a power of two).

    Up to 2^20 tokens (every corpus our figures come from) about 4 sqrt(tokens), between 16 and 1024, as chosen on
    development queries. Above, PLAID's rule 2^floor(log2(16 sqrt(tokens))) (2^17-2^18 for MS MARCO passage, PLAID's
    own 2^18): the lists must grow with the corpus for the documents under a query's probed lists to stay a small
    fraction of it (they are ~ query tokens x nprobe x tokens per list), and sqrt keeps k-means on a bounded sample.
    """
    if n_tokens <= 1 << 20:
        return int(min(1024, max(16, 2 ** round(np.log2(max(1.0, 4 * np.sqrt(n_tokens)))))))
    return int(2 ** np.floor(np.log2(16 * np.sqrt(n_tokens))))


DEFAULT_NPROBE = 32  # centroids per query token probed at up to 1024 lists (chosen on development queries)
LARGE_NPROBE = 4  # ... and above, where lists are many and short (PLAID probes 2-4)


def default_search(candidates: str, nlist: int | None) -> dict:
    """The search settings an index records for a searcher that is given none."""
    return {"nprobe": DEFAULT_NPROBE if not nlist or nlist <= 1024 else LARGE_NPROBE}


def build_index(encoded: EncodedCorpus, folder: str | os.PathLike, beta_d: float = 1.0, codec: str | None = None,
                candidates: str | None = None, nlist: int | None = None, pq_m: int = 32, hnsw_m: int = 32,
                train_size: int | None = None, overwrite: bool = False, progress: bool = True,
                pq_bits: int | None = None, duplicate_cosine: float | None = DUPLICATE_COSINE,
                reduction: str = DEFAULT_REDUCTION, chunk_docs: int | None = None) -> Path:
    """Write an AligneR index folder from an encoding (see the module docstring); returns its path.

    The streaming build of index/aligner_build.py over `encoded`, chunk by chunk. codec / candidates: None chooses
    by corpus size (`AlignerIndexSettings.resolved`); train_size: token vectors sampled to train IVF/PQ;
    pq_bits: bits per PQ sub-quantizer code (default RESIDUAL_PQ_BITS for residual-pq, 8 for ivfpq alone);
    reduction: how beta_d < 1 keeps ceil(beta_d * m) vectors per document, "pool" or "prune"; duplicate_cosine:
    when pruning, near-copies of a more salient token of the same document go first (None: by salience alone).
    """
    from pyserini_ext.index.aligner_build import AlignerIndexSettings, build_encoded
    from pyserini_ext.index.streaming import DEFAULT_CHUNK_DOCS

    if codec is not None and codec not in CODECS:
        raise ValueError(f"codec must be one of {tuple(CODECS)}, got {codec!r}")
    if candidates is not None and candidates not in CANDIDATES:
        raise ValueError(f"candidates must be one of {tuple(CANDIDATES)}, got {candidates!r}")
    folder = Path(folder)
    if folder.exists() and not overwrite:  # before any work; atomic_output checks again when writing
        raise OutputExistsError(f"{folder} exists; pass overwrite=True (--overwrite) to replace it")
    settings = AlignerIndexSettings(beta_d=beta_d, reduction=reduction, duplicate_cosine=duplicate_cosine,
                                    codec=codec, candidates=candidates, nlist=nlist, pq_m=pq_m, pq_bits=pq_bits,
                                    hnsw_m=hnsw_m, train_size=train_size)
    return build_encoded(encoded, folder, settings, overwrite, progress, chunk_docs or DEFAULT_CHUNK_DOCS)


class AlignerIndex:
    """An opened AligneR index: document tokens for exact scoring (through its codec) and its candidate generator.
    Every array is memory-mapped; nothing per token is built in memory (but the flat generator's decoded vectors)."""

    def __init__(self, folder: Path, metadata: dict, docids: list[str], offsets: np.ndarray, weights: np.ndarray,
                 codec: TokenCodec, candidates: CandidateGenerator):
        self.folder, self.metadata, self.docids = folder, metadata, docids
        self.offsets, self.weights, self.codec, self.candidates = offsets, weights, codec, candidates

    @classmethod
    def open(cls, folder: str | os.PathLike, nprobe: int | None = None, ef_search: int = 256) -> AlignerIndex:
        """nprobe: IVF lists (ivfpq) or centroids per query token (centroid) probed (default: the index's);
        ef_search: HNSW."""
        folder = Path(folder)
        if not folder.is_dir():
            raise AlignerIndexError(f"{folder}: no such AligneR index folder")
        meta_path = folder / METADATA_FILE
        if not meta_path.is_file():
            raise AlignerIndexError(f"{folder}: no {METADATA_FILE}; not an AligneR index or an unfinished build")
        try:
            metadata = json.loads(meta_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise AlignerIndexError(f"{meta_path}: corrupt metadata ({e})") from None
        if metadata.get("format") not in READABLE_FORMATS:
            raise AlignerIndexError(f"{folder}: index format {metadata.get('format')!r}, expected {INDEX_FORMAT!r}")
        counts = metadata["counts"]
        files = IndexFiles(folder, counts["tokens"])
        docids_path = folder / "docids.txt"
        if not docids_path.is_file():
            raise AlignerIndexError(f"{folder}: missing docids.txt")
        docids = docids_path.read_text(encoding="utf-8").splitlines()
        if len(docids) != counts["documents"]:
            raise AlignerIndexError(f"{docids_path}: {len(docids)} docids, metadata says {counts['documents']}")
        offsets = files.array("offsets.npy", counts["documents"] + 1)
        if offsets[0] != 0 or offsets[-1] != counts["tokens"] or np.any(np.diff(offsets) < 0):
            raise AlignerIndexError(f"{folder / 'offsets.npy'}: offsets do not cover {counts['tokens']} tokens")
        weights = files.array("weights.npy")
        if nprobe is None:
            nprobe = metadata.get("search", {}).get("nprobe", DEFAULT_NPROBE)
        options = {**metadata, "documents": counts["documents"], "nprobe": nprobe, "ef_search": ef_search}
        codec = CODECS[metadata["codec"]].read(files, options)
        candidates = CANDIDATES[metadata["candidates"]].read(files, codec, offsets, options)
        return cls(folder, metadata, docids, offsets, weights, codec, candidates)

    def documents_of(self, token_rows: np.ndarray) -> np.ndarray:
        """The document row of each token row."""
        return documents_of(self.offsets, token_rows)

    @property
    def model_fingerprint(self) -> str:
        return self.metadata["model"].get("fingerprint", "")

    def __len__(self) -> int:
        return len(self.docids)

    @property
    def tokens(self) -> int:
        return int(self.metadata["counts"]["tokens"])

    def document_similarities(self, doc_indices: np.ndarray, query_vectors: np.ndarray
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Padded (similarities [C, L, n] float32 of each document token with the n query vectors, weights [C, L],
        mask [C, L]): what scoring needs, without materialising padded document vectors."""
        if query_vectors.ndim != 2 or query_vectors.shape[1] != self.metadata["dim"]:
            raise ValueError(f"query vectors of shape {tuple(query_vectors.shape)}; {self.folder} holds "
                             f"{self.metadata['dim']}-dim token vectors")
        rows, weights, mask = self._padded_rows(doc_indices)
        similarities = np.zeros(rows.shape + (len(query_vectors),), dtype=np.float32)
        queries = np.ascontiguousarray(query_vectors, np.float32)
        decoded = self.candidates.decoded
        similarities[mask] = (decoded[rows[mask]] @ queries.T if decoded is not None
                              else self.codec.similarities(rows[mask], queries))
        return similarities, weights, mask

    def _padded_rows(self, doc_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        starts = self.offsets[doc_indices]
        lengths = self.offsets[doc_indices + 1] - starts
        positions = np.arange(max(1, int(lengths.max(initial=1))))
        mask = positions[None, :] < lengths[:, None]
        rows = np.where(mask, starts[:, None] + positions[None, :], 0)
        weights = np.where(mask, np.asarray(self.weights[rows.ravel()]).reshape(rows.shape), 0).astype(np.float32)
        return rows, weights, mask

    def bytes_per_token(self) -> float:
        return float(self.metadata["bytes_per_token"])
