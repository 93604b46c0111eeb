"""How an AligneR index stores its token vectors (codecs) and finds candidate documents (candidate generators).

Codecs (`CODECS`), one small interface: `fit(vectors, options)` -> codec, `write(folder, vectors)` -> files written,
`read(files, options)` -> codec, `decode(rows)` -> float32 [rows, dim].
  float16       vectors.npy, 2 bytes per dimension, exact up to float16 rounding.
  residual-pq   ColBERTv2-style: a coarse centroid id + a PQ code of the residual, with Faiss's IVF-PQ
                (`sa_encode`/`sa_decode`, decoded vectors renormalised to unit length); codec.faiss holds the
                centroids and codebooks, codes.npy uint8 [tokens, centroid id bytes + PQ code bytes].

Candidate generators (`CANDIDATES`): `read(files, codec, offsets, options)`, `candidates(query_vectors,
query_weights, neighbours)` -> document rows (files written by index/aligner_build.py).
  flat      nothing stored; exact: every decoded vector scored by a blocked matrix product (torch), top-k merged.
  ivfpq     a token-level Faiss IVF-PQ index (candidates.faiss, about 42 bytes per token).
  hnsw      a token-level Faiss HNSW index (candidates.faiss).
  centroid  PLAID-style, from the centroid ids the residual-pq codes already hold: inverted lists centroid ->
            documents per segment of at most 65,536 documents (centroid_docs.npy uint16, centroid_offsets.npy
            [segments, nlist + 1], segments.npy), one entry per distinct (centroid, document); the documents under
            the `nprobe` nearest centroids of each query token are ranked by their centroid approximation (sum over
            query tokens of weight x max over the document's tokens of q . centroid) and the best `neighbours` go
            on to exact scoring.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import faiss
import numpy as np
import torch

from pyserini_ext.errors import IndexFolderError

BATCH = 65536
CENTROIDS_FILE = "centroids.npy"
# query-token scores per block of the flat candidate stage (64 MB of float32)
FLAT_SCORES_PER_BLOCK = 1 << 24
# documents per block of the centroid stage
CENTROID_STAGE_DOCS = 1024


class AlignerIndexError(IndexFolderError):
    """An AligneR index folder is missing, incomplete, corrupt, or does not fit the model used with it."""


@dataclass
class IndexFiles:
    """Reads and writes the files of one index folder; a read names the file and what is wrong with it."""
    folder: Path
    tokens: int = 0

    def save(self, name: str, array: np.ndarray) -> None:
        np.save(self.folder / name, array)

    def save_faiss(self, name: str, index: faiss.Index) -> None:
        faiss.write_index(index, str(self.folder / name))

    def array(self, name: str, rows: int | None = None) -> np.ndarray:
        path = self.folder / name
        if not path.is_file():
            raise AlignerIndexError(f"{self.folder}: missing {name}")
        try:
            array = np.load(path, mmap_mode="r")
        except (ValueError, OSError, EOFError) as e:
            raise AlignerIndexError(f"{path}: corrupt ({e})") from None
        rows = self.tokens if rows is None else rows
        if array.shape[0] != rows:
            raise AlignerIndexError(f"{path}: {array.shape[0]} rows, metadata says {rows}")
        return array

    def faiss_index(self, name: str) -> faiss.Index:
        path = self.folder / name
        if not path.is_file():
            raise AlignerIndexError(f"{self.folder}: missing {name}")
        try:
            return faiss.read_index(str(path))
        except RuntimeError as e:
            raise AlignerIndexError(f"{path}: corrupt Faiss index ({str(e).splitlines()[0]})") from None


# ---- codecs ---------------------------------------------------------------------------------------------------
class TokenCodec(ABC):
    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def fit(cls, vectors: np.ndarray, options: dict) -> TokenCodec: ...

    @abstractmethod
    def write(self, files: IndexFiles, vectors: np.ndarray) -> None: ...

    @classmethod
    @abstractmethod
    def read(cls, files: IndexFiles, options: dict) -> TokenCodec: ...

    @abstractmethod
    def decode(self, rows: np.ndarray) -> np.ndarray: ...

    def similarities(self, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """Inner products [len(rows), n] of the stored tokens `rows` with the query vectors [n, dim]."""
        return self.decode(rows) @ queries.T

    def options(self) -> dict:
        """What metadata.json records about this codec (read back as `options`)."""
        return {}


class Float16Store(TokenCodec):
    name = "float16"

    def __init__(self, vectors: np.ndarray | None = None):
        self.vectors = vectors

    @classmethod
    def fit(cls, vectors, options):
        return cls()

    def write(self, files, vectors):
        files.save("vectors.npy", vectors.astype(np.float16))

    @classmethod
    def read(cls, files, options):
        return cls(files.array("vectors.npy"))

    def decode(self, rows):
        return np.asarray(self.vectors[rows], dtype=np.float32)


def train_ivfpq(vectors: np.ndarray, nlist: int, pq_m: int, train_size: int | None = None, seed: int = 42,
                pq_bits: int = 8, two_level: bool = False) -> faiss.Index:
    """An empty IVF-PQ trained on a sample of `vectors`. two_level: the coarse centroids from Faiss's two-level
    k-means (sqrt(nlist) clusters, then each split) and an HNSW coarse quantizer, so that training and assigning
    cost ~sqrt(nlist) per vector instead of nlist (large corpora: tens of thousands of lists)."""
    # "np": no polysemous training (minutes of simulated annealing we do not use)
    quantizer = "_HNSW32" if two_level else ""
    index = faiss.index_factory(vectors.shape[1], f"IVF{nlist}{quantizer},PQ{pq_m}x{pq_bits}np",
                                faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    # Faiss wants >= 39 points per centroid: 64 per IVF list, and >= 2^16 for the 256-centroid PQ codebooks
    sample_size = min(len(vectors), train_size or max(64 * nlist, 1 << 16))
    sample = vectors[np.sort(rng.choice(len(vectors), sample_size, replace=False))].astype(np.float32)
    index.cp.seed = seed
    if two_level:
        from faiss.contrib.clustering import two_level_clustering

        centroids, _ = two_level_clustering(sample, int(np.sqrt(nlist)), nlist, clustering_niter=10, seed=seed)
        ivf = faiss.extract_index_ivf(index)
        ivf.quantizer.add(np.ascontiguousarray(centroids, dtype=np.float32))
    index.train(sample)  # with the quantizer filled, only the residual PQ trains
    return index


class ResidualPQStore(TokenCodec):
    name = "residual-pq"

    def __init__(self, ivfpq: faiss.Index, codes: np.ndarray | None = None):
        self.ivfpq, self.codes = ivfpq, codes
        self.centroid_bytes = faiss.extract_index_ivf(ivfpq).coarse_code_size()

    @classmethod
    def fit(cls, vectors, options):
        return cls(train_ivfpq(vectors, options["nlist"], options["pq_m"], options.get("train_size"),
                               pq_bits=options.get("pq_bits", 8), two_level=options.get("two_level", False)))

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        """uint8 codes [tokens, centroid id bytes + PQ code bytes] of float vectors."""
        if not len(vectors):
            return np.zeros((0, self.ivfpq.sa_code_size()), dtype=np.uint8)
        return np.concatenate([self.ivfpq.sa_encode(np.asarray(vectors[s:s + BATCH], dtype=np.float32))
                               for s in range(0, len(vectors), BATCH)])

    def write(self, files, vectors):
        files.save_faiss("codec.faiss", self.ivfpq)
        self.codes = self.encode(vectors)
        files.save("codes.npy", self.codes)

    @classmethod
    def read(cls, files, options):
        ivfpq = files.faiss_index("codec.faiss")
        if (files.folder / CENTROIDS_FILE).is_file():  # a compact codec: its coarse centroids stored apart
            ivf = faiss.extract_index_ivf(ivfpq)
            centroids = np.asarray(files.array(CENTROIDS_FILE, ivf.nlist), dtype=np.float32)
            quantizer = faiss.IndexFlatIP(centroids.shape[1])
            quantizer.add(centroids)
            ivf.quantizer = quantizer
            ivf.own_fields = False
            store = cls(ivfpq, files.array("codes.npy"))
            store.quantizer = quantizer  # Faiss does not own it: keep it alive with the codec
            return store
        return cls(ivfpq, files.array("codes.npy"))

    def write_compact(self, folder: Path) -> None:
        """codec.faiss without its coarse quantizer + centroids.npy (float16): the centroid table of a large codec
        (tens of thousands of lists) in a quarter of the bytes of float32 centroids with HNSW links. Exact when the
        centroids were rounded to float16 before any token was encoded (`round_centroids`)."""
        ivf = faiss.extract_index_ivf(self.ivfpq)
        np.save(folder / CENTROIDS_FILE, self.centroids().astype(np.float16))
        stripped = faiss.clone_index(self.ivfpq)
        stripped_ivf = faiss.extract_index_ivf(stripped)
        stripped_ivf.quantizer = faiss.IndexFlatIP(ivf.d)
        stripped_ivf.own_fields = True
        faiss.write_index(stripped, str(folder / "codec.faiss"))

    def round_centroids(self) -> None:
        """Replace the coarse centroids by their float16 roundings (so that `write_compact` loses nothing)."""
        quantizer = faiss.extract_index_ivf(self.ivfpq).quantizer
        rounded = self.centroids().astype(np.float16).astype(np.float32)
        quantizer.reset()
        quantizer.add(rounded)

    def decode(self, rows):
        # AligneR's vectors are unit length: putting the reconstruction back on the sphere removes the part of
        # the quantisation error along the vector (SciFact train, 300 queries, 1000 documents: PQ16x8 -1.29 ->
        # -0.98 nDCG@10 points from exact, PQ32x6 -0.99 -> -0.67)
        decoded = self.ivfpq.sa_decode(np.ascontiguousarray(self.codes[rows]))
        return decoded / self._norms(decoded)[:, None]

    def similarities(self, rows, queries):
        # the same values as decode(rows) @ queries.T, but the renormalisation divides the [tokens, n] products
        # rather than the [tokens, dim] vectors (n query tokens < dim)
        decoded = self.ivfpq.sa_decode(np.ascontiguousarray(self.codes[rows]))
        return (decoded @ queries.T) / self._norms(decoded)[:, None]

    @staticmethod
    def _norms(decoded: np.ndarray) -> np.ndarray:
        return np.maximum(np.sqrt(np.einsum("td,td->t", decoded, decoded)), 1e-6)

    def centroid_ids(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The coarse centroid of each stored token `rows`."""
        return self.centroid_ids_of(self.codes[rows], self.centroid_bytes)

    @staticmethod
    def centroid_ids_of(codes: np.ndarray, centroid_bytes: int) -> np.ndarray:
        """The coarse centroid of each code: its little-endian first bytes (Faiss `encode_listno`)."""
        head = np.asarray(codes[:, :centroid_bytes], dtype=np.int64)
        return (head << (8 * np.arange(centroid_bytes))).sum(axis=1)

    def centroids(self) -> np.ndarray:
        quantizer = faiss.extract_index_ivf(self.ivfpq).quantizer
        return quantizer.reconstruct_n(0, quantizer.ntotal)

    def options(self):
        ivf = faiss.extract_index_ivf(self.ivfpq)
        return {"nlist": int(ivf.nlist), "pq_m": int(faiss.downcast_index(self.ivfpq).pq.M)}


CODECS: dict[str, type[TokenCodec]] = {c.name: c for c in (Float16Store, ResidualPQStore)}


# ---- candidate generators ---------------------------------------------------------------------------------------
def documents_of(offsets: np.ndarray, token_rows: np.ndarray) -> np.ndarray:
    """The document of each token row (no per-token array: a binary search in the document offsets)."""
    return np.searchsorted(offsets, token_rows, side="right") - 1


def concatenated_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """starts[0]..starts[0]+lengths[0]-1, starts[1]..., as one array."""
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(starts - firsts, lengths) + np.arange(int(lengths.sum()))


class CandidateGenerator(ABC):
    name: ClassVar[str]
    default_neighbours: ClassVar[int] = 256  # a searcher's `neighbours` when it is not given
    # every stored vector decoded to float32, where the generator keeps them in memory (flat): exact scoring gathers
    # rows from it instead of decoding the codec's rows again (3x faster than float16 -> float32 per batch)
    decoded: np.ndarray | None = None
    touched: int = 0  # documents the last query's candidate stage looked at

    @classmethod
    @abstractmethod
    def read(cls, files: IndexFiles, codec: TokenCodec, offsets: np.ndarray, options: dict) -> CandidateGenerator:
        ...

    @abstractmethod
    def candidates(self, query_vectors: np.ndarray, query_weights: np.ndarray, neighbours: int) -> np.ndarray:
        """Sorted distinct document rows to score exactly."""


class FaissTokenCandidates(CandidateGenerator):
    """The documents owning any of the `neighbours` nearest tokens of any query token in a token-level index."""

    def __init__(self, index: faiss.Index, offsets: np.ndarray):
        self.index, self.offsets = index, offsets

    def candidates(self, query_vectors, query_weights, neighbours):
        n = min(neighbours, self.index.ntotal)
        _, token_ids = self.index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), n)
        docs = np.unique(documents_of(self.offsets, token_ids[token_ids >= 0]))
        self.touched = len(docs)
        return docs


class FlatCandidates(CandidateGenerator):
    """Exact: the documents owning any of the `neighbours` highest-scoring tokens of any query token, every stored
    token scored by a matrix product, in blocks whose top `neighbours` are merged. Nothing stored; the decoded
    vectors are kept in memory when the index opens (small corpora: the default up to EXACT_MAX_DOCUMENTS).
    Faiss's IndexFlatIP search with k = 256 took about twice the time of this product and torch's top-k."""
    name = "flat"

    def __init__(self, vectors: np.ndarray, offsets: np.ndarray):
        self.decoded, self.vectors, self.offsets = vectors, torch.from_numpy(vectors), offsets

    @classmethod
    def read(cls, files, codec, offsets, options):
        tokens = int(offsets[-1])
        vectors = np.empty((tokens, options["dim"]), dtype=np.float32)
        for start in range(0, tokens, BATCH):
            vectors[start:start + BATCH] = codec.decode(np.arange(start, min(start + BATCH, tokens)))
        return cls(vectors, offsets)

    def candidates(self, query_vectors, query_weights, neighbours):
        rows = torch.from_numpy(np.ascontiguousarray(query_vectors, dtype=np.float32))
        k = min(neighbours, len(self.vectors))
        block = max(k, FLAT_SCORES_PER_BLOCK // max(1, len(rows)))
        best_scores = torch.empty(len(rows), 0)
        best_ids = torch.empty(len(rows), 0, dtype=torch.int64)
        for start in range(0, len(self.vectors), block):
            top = torch.topk(rows @ self.vectors[start:start + block].T, min(k, len(self.vectors) - start), dim=1)
            merged_scores = torch.cat([best_scores, top.values], dim=1)
            merged_ids = torch.cat([best_ids, top.indices + start], dim=1)
            keep = torch.topk(merged_scores, min(k, merged_scores.shape[1]), dim=1).indices
            best_scores, best_ids = merged_scores.gather(1, keep), merged_ids.gather(1, keep)
        self.touched = len(self.offsets) - 1
        return np.unique(documents_of(self.offsets, best_ids.numpy()))


class StoredTokenCandidates(FaissTokenCandidates):
    """A token-level Faiss index in candidates.faiss: IVF-PQ (`nprobe`) or HNSW (`ef_search`)."""

    @classmethod
    def read(cls, files, codec, offsets, options):
        index = files.faiss_index("candidates.faiss")
        if index.ntotal != int(offsets[-1]):
            raise AlignerIndexError(f"{files.folder / 'candidates.faiss'}: {index.ntotal} vectors, metadata says "
                                    f"{int(offsets[-1])}")
        faiss.ParameterSpace().set_index_parameters(index, cls.search_parameter(options))
        return cls(index, offsets)


class IvfPqCandidates(StoredTokenCandidates):
    name = "ivfpq"

    @staticmethod
    def search_parameter(options):
        return f"nprobe={options['nprobe']}"


class HnswCandidates(StoredTokenCandidates):
    name = "hnsw"

    @staticmethod
    def search_parameter(options):
        return f"efSearch={options['ef_search']}"


class CentroidCandidates(CandidateGenerator):
    """PLAID-style: the documents in the inverted lists of each query token's `nprobe` nearest centroids, ranked by
    their centroid approximation; the best `neighbours` go on to exact scoring. The lists are stored per segment
    of at most 65,536 documents (centroid_offsets [segments, nlist + 1], 2-byte document numbers), and the
    approximation reads each candidate's centroid ids from its (memory-mapped) codes: opening the index builds no
    per-token array."""
    name = "centroid"
    # documents to exact scoring, chosen on development queries (docs/aligner.md)
    default_neighbours = 1024

    def __init__(self, codec: ResidualPQStore, list_offsets: np.ndarray, list_docs: np.ndarray,
                 segment_starts: np.ndarray, offsets: np.ndarray, nprobe: int):
        self.codec, self.centroids = codec, codec.centroids()
        self.list_offsets, self.list_docs, self.segment_starts = list_offsets, list_docs, segment_starts
        self.offsets, self.nprobe = offsets, nprobe

    @staticmethod
    def _codec(codec: TokenCodec) -> ResidualPQStore:
        if not isinstance(codec, ResidualPQStore):
            raise ValueError("candidates 'centroid' reads the centroid ids of the residual-pq codec; use "
                             "codec='residual-pq' (or another candidate generator)")
        return codec

    @classmethod
    def read(cls, files, codec, offsets, options):
        codec = cls._codec(codec)
        nlist = codec.options()["nlist"]
        if (files.folder / "segments.npy").is_file():
            segment_starts = np.asarray(files.array("segments.npy", np.load(files.folder / "segments.npy",
                                                                             mmap_mode="r").shape[0]))
            list_offsets = np.asarray(files.array("centroid_offsets.npy", len(segment_starts) - 1))
        else:  # format 1: one segment
            segment_starts = np.array([0, options["documents"]], dtype=np.int64)
            list_offsets = np.asarray(files.array("centroid_offsets.npy", nlist + 1))[None]
        if list_offsets.shape[1] != nlist + 1:
            raise AlignerIndexError(f"{files.folder / 'centroid_offsets.npy'}: {list_offsets.shape[1] - 1} lists, "
                                    f"the codec has {nlist}")
        list_docs = files.array("centroid_docs.npy", int(list_offsets[-1, -1]))
        return cls(codec, list_offsets, list_docs, segment_starts, offsets, min(options["nprobe"], nlist))

    def candidates(self, query_vectors, query_weights, neighbours):
        scores = np.ascontiguousarray(query_vectors, dtype=np.float32) @ self.centroids.T  # [q, nlist]
        nprobe = min(self.nprobe, scores.shape[1])
        probed = np.unique(np.argpartition(-scores, nprobe - 1, axis=1)[:, :nprobe])
        starts, ends = self.list_offsets[:, probed], self.list_offsets[:, probed + 1]  # [segments, probed]
        lengths = (ends - starts).ravel()
        entries = concatenated_ranges(starts.ravel(), lengths)
        segment_of_entry = np.repeat(np.repeat(np.arange(len(starts)), len(probed)), lengths)
        docs = np.unique(np.asarray(self.list_docs[entries], dtype=np.int64)
                         + self.segment_starts[segment_of_entry])
        self.touched = len(docs)
        if len(docs) <= neighbours:
            return docs
        # centroid approximation of every candidate: sum over query tokens of weight x max over the document's
        # tokens of q . centroid (the centroid ids read from the codes), CENTROID_STAGE_DOCS documents at a time
        by_centroid = np.ascontiguousarray(scores.T)
        weights = np.asarray(query_weights, dtype=np.float32)
        approx = np.empty(len(docs), dtype=np.float32)
        for a in range(0, len(docs), CENTROID_STAGE_DOCS):
            block = docs[a:a + CENTROID_STAGE_DOCS]
            first, lengths = self.offsets[block], self.offsets[block + 1] - self.offsets[block]
            rows = concatenated_ranges(first, lengths)
            best = np.maximum.reduceat(by_centroid[self.codec.centroid_ids(rows)], np.cumsum(lengths) - lengths,
                                       axis=0)
            approx[a:a + len(block)] = best @ weights
        return np.sort(docs[np.argpartition(-approx, neighbours - 1)[:neighbours]])


CANDIDATES: dict[str, type[CandidateGenerator]] = {
    c.name: c for c in (FlatCandidates, IvfPqCandidates, HnswCandidates, CentroidCandidates)}
