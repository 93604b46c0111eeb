"""How an AligneR index stores its token vectors (codecs) and finds candidate documents (candidate generators).

Codecs (`CODECS`), one small interface: `fit(vectors, options)` -> codec, `write(folder, vectors)` -> files written,
`read(files, options)` -> codec, `decode(rows)` -> float32 [rows, dim].
  float16       vectors.npy, 2 bytes per dimension, exact up to float16 rounding.
  residual-pq   ColBERTv2-style: a coarse centroid id + a PQ code of the residual, with Faiss's IVF-PQ
                (`sa_encode`/`sa_decode`, decoded vectors renormalised to unit length); codec.faiss holds the
                centroids and codebooks, codes.npy uint8 [tokens, centroid id bytes + PQ code bytes].

Candidate generators (`CANDIDATES`): `build(files, vectors, codec, doc_of_token, options)`,
`read(files, codec, doc_of_token, options)`, `candidates(query_vectors, query_weights, neighbours)` -> document rows.
  flat      nothing stored; exact: every decoded vector scored by a blocked matrix product (torch), top-k merged.
  ivfpq     a token-level Faiss IVF-PQ index (candidates.faiss, about 42 bytes per token).
  hnsw      a token-level Faiss HNSW index (candidates.faiss).
  centroid  PLAID-style, from the centroid ids the residual-pq codes already hold: inverted lists centroid ->
            documents (centroid_docs.npy, uint16 below 65536 documents else int32, one entry per distinct
            (centroid, document)), then the documents under the `nprobe` nearest centroids of each query token
            are ranked by their centroid approximation (sum over query tokens of weight x max over the
            document's tokens of q . centroid) and the best `neighbours` go on to exact scoring.
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
# query-token scores per block of the flat candidate stage (64 MB of float32)
FLAT_SCORES_PER_BLOCK = 1 << 24
# documents per block of the centroid stage (SciFact: blocks of 64-256 ran about 2x faster than of 1024+)
CENTROID_STAGE_DOCS = 256


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
                pq_bits: int = 8) -> faiss.Index:
    # "np": no polysemous training (minutes of simulated annealing we do not use)
    index = faiss.index_factory(vectors.shape[1], f"IVF{nlist},PQ{pq_m}x{pq_bits}np", faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    # Faiss wants >= 39 points per centroid: 64 per IVF list, and >= 2^16 for the 256-centroid PQ codebooks
    sample_size = min(len(vectors), train_size or max(64 * nlist, 1 << 16))
    sample = vectors[np.sort(rng.choice(len(vectors), sample_size, replace=False))].astype(np.float32)
    index.cp.seed = seed
    index.train(sample)
    return index


class ResidualPQStore(TokenCodec):
    name = "residual-pq"

    def __init__(self, ivfpq: faiss.Index, codes: np.ndarray | None = None):
        self.ivfpq, self.codes = ivfpq, codes
        self.centroid_bytes = faiss.extract_index_ivf(ivfpq).coarse_code_size()

    @classmethod
    def fit(cls, vectors, options):
        return cls(train_ivfpq(vectors, options["nlist"], options["pq_m"], options.get("train_size"),
                               pq_bits=options.get("pq_bits", 8)))

    def write(self, files, vectors):
        files.save_faiss("codec.faiss", self.ivfpq)
        self.codes = np.concatenate([self.ivfpq.sa_encode(vectors[s:s + BATCH].astype(np.float32))
                                     for s in range(0, len(vectors), BATCH)])
        files.save("codes.npy", self.codes)

    @classmethod
    def read(cls, files, options):
        return cls(files.faiss_index("codec.faiss"), files.array("codes.npy"))

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
        """The coarse centroid of each token: the little-endian first bytes of its code (Faiss `encode_listno`)."""
        head = np.asarray(self.codes[rows, :self.centroid_bytes], dtype=np.int64)
        return (head << (8 * np.arange(self.centroid_bytes))).sum(axis=1)

    def centroids(self) -> np.ndarray:
        quantizer = faiss.extract_index_ivf(self.ivfpq).quantizer
        return quantizer.reconstruct_n(0, quantizer.ntotal)

    def options(self):
        ivf = faiss.extract_index_ivf(self.ivfpq)
        return {"nlist": int(ivf.nlist), "pq_m": int(faiss.downcast_index(self.ivfpq).pq.M)}


CODECS: dict[str, type[TokenCodec]] = {c.name: c for c in (Float16Store, ResidualPQStore)}


# ---- candidate generators ---------------------------------------------------------------------------------------
class CandidateGenerator(ABC):
    name: ClassVar[str]
    default_neighbours: ClassVar[int] = 256  # a searcher's `neighbours` when it is not given
    # every stored vector decoded to float32, where the generator keeps them in memory (flat): exact scoring gathers
    # rows from it instead of decoding the codec's rows again (3x faster than float16 -> float32 per batch)
    decoded: np.ndarray | None = None

    @classmethod
    @abstractmethod
    def build(cls, files: IndexFiles, vectors: np.ndarray, codec: TokenCodec, doc_of_token: np.ndarray,
              options: dict) -> dict: ...

    @classmethod
    @abstractmethod
    def read(cls, files: IndexFiles, codec: TokenCodec, doc_of_token: np.ndarray, options: dict
             ) -> CandidateGenerator: ...

    @abstractmethod
    def candidates(self, query_vectors: np.ndarray, query_weights: np.ndarray, neighbours: int) -> np.ndarray:
        """Sorted distinct document rows to score exactly."""


class FaissTokenCandidates(CandidateGenerator):
    """The documents owning any of the `neighbours` nearest tokens of any query token in a token-level index."""

    def __init__(self, index: faiss.Index, doc_of_token: np.ndarray):
        self.index, self.doc_of_token = index, doc_of_token

    def candidates(self, query_vectors, query_weights, neighbours):
        n = min(neighbours, self.index.ntotal)
        _, token_ids = self.index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), n)
        return np.unique(self.doc_of_token[token_ids[token_ids >= 0]])


class FlatCandidates(CandidateGenerator):
    """Exact: the documents owning any of the `neighbours` highest-scoring tokens of any query token, every stored
    token scored by a matrix product, in blocks whose top `neighbours` are merged. Nothing stored; the decoded
    vectors are kept in memory when the index opens. (Faiss's IndexFlatIP search with k = 256 took about twice the
    time of this product and torch's top-k on SciFact, 628 against 350 ms per query. Batching queries into one
    product did not pay on an AMD CPU, whose float32 products ran at ~40 GFLOP/s, and torch's top-k is 5x slower per
    score on short rows.)"""
    name = "flat"

    def __init__(self, vectors: np.ndarray, doc_of_token: np.ndarray):
        self.decoded, self.vectors, self.doc_of_token = vectors, torch.from_numpy(vectors), doc_of_token

    @classmethod
    def build(cls, files, vectors, codec, doc_of_token, options):
        return {}

    @classmethod
    def read(cls, files, codec, doc_of_token, options):
        tokens = len(doc_of_token)
        vectors = np.empty((tokens, options["dim"]), dtype=np.float32)
        for start in range(0, tokens, BATCH):
            vectors[start:start + BATCH] = codec.decode(np.arange(start, min(start + BATCH, tokens)))
        return cls(vectors, doc_of_token)

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
        return np.unique(self.doc_of_token[best_ids.numpy()])


class StoredTokenCandidates(FaissTokenCandidates):
    """A token-level Faiss index in candidates.faiss: IVF-PQ (`nprobe`) or HNSW (`ef_search`)."""

    @classmethod
    def build(cls, files, vectors, codec, doc_of_token, options):
        ann = cls.empty_index(vectors, codec, options)
        for start in range(0, len(vectors), BATCH):
            ann.add(vectors[start:start + BATCH].astype(np.float32))
        files.save_faiss("candidates.faiss", ann)
        return {}

    @classmethod
    def read(cls, files, codec, doc_of_token, options):
        index = files.faiss_index("candidates.faiss")
        if index.ntotal != len(doc_of_token):
            raise AlignerIndexError(f"{files.folder / 'candidates.faiss'}: {index.ntotal} vectors, metadata says "
                                    f"{len(doc_of_token)}")
        faiss.ParameterSpace().set_index_parameters(index, cls.search_parameter(options))
        return cls(index, doc_of_token)


class IvfPqCandidates(StoredTokenCandidates):
    name = "ivfpq"

    @staticmethod
    def empty_index(vectors, codec, options):
        if isinstance(codec, ResidualPQStore):  # the same trained quantizer and codebooks
            return faiss.clone_index(codec.ivfpq)
        return train_ivfpq(vectors, options["nlist"], options["pq_m"], options.get("train_size"))

    @staticmethod
    def search_parameter(options):
        return f"nprobe={options['nprobe']}"


class HnswCandidates(StoredTokenCandidates):
    name = "hnsw"

    @staticmethod
    def empty_index(vectors, codec, options):
        return faiss.index_factory(vectors.shape[1], f"HNSW{options['hnsw_m']}", faiss.METRIC_INNER_PRODUCT)

    @staticmethod
    def search_parameter(options):
        return f"efSearch={options['ef_search']}"


class CentroidCandidates(CandidateGenerator):
    name = "centroid"
    # documents to exact scoring, chosen on development queries (PQ32x6, 40% of tokens, every query token; nDCG@10
    # below exact): SciFact train 256 -0.69, 512 -0.46, 1024 -0.46; MS MARCO triples dev 256 -1.90, 512 -0.90,
    # 1024 -0.27 (docs/aligner.md)
    default_neighbours = 1024

    def __init__(self, codec: ResidualPQStore, list_offsets: np.ndarray, list_docs: np.ndarray, documents: int,
                 nprobe: int):
        self.centroids = codec.centroids()
        self.list_offsets, self.list_docs, self.nprobe = list_offsets, list_docs, nprobe
        # the same (centroid, document) pairs grouped by document: each document's distinct centroids, which is all
        # the centroid approximation needs (fewer rows than its tokens, gathered contiguously)
        lists = np.repeat(np.arange(len(list_offsets) - 1), np.diff(list_offsets))
        by_doc = np.argsort(list_docs, kind="stable")
        self.doc_centroids = lists[by_doc]
        self.doc_offsets = np.searchsorted(list_docs[by_doc], np.arange(documents + 1))

    @staticmethod
    def _codec(codec: TokenCodec) -> ResidualPQStore:
        if not isinstance(codec, ResidualPQStore):
            raise ValueError("candidates 'centroid' reads the centroid ids of the residual-pq codec; use "
                             "codec='residual-pq' (or another candidate generator)")
        return codec

    @classmethod
    def build(cls, files, vectors, codec, doc_of_token, options):
        centroid_ids = cls._codec(codec).centroid_ids()
        pairs = np.unique(centroid_ids * (int(doc_of_token.max(initial=0)) + 1) + doc_of_token)  # (centroid, doc)
        lists, docs = np.divmod(pairs, int(doc_of_token.max(initial=0)) + 1)
        nlist = codec.options()["nlist"]
        # document rows in the narrowest type that holds them: 2 bytes per entry below 65536 documents
        files.save("centroid_docs.npy", docs.astype(np.uint16 if len(doc_of_token) and doc_of_token.max() < 1 << 16
                                                    else np.int32))
        files.save("centroid_offsets.npy", np.searchsorted(lists, np.arange(nlist + 1)).astype(np.int64))
        return {"centroid_list_entries": int(len(docs))}

    @classmethod
    def read(cls, files, codec, doc_of_token, options):
        codec = cls._codec(codec)
        nlist = codec.options()["nlist"]
        list_offsets = np.asarray(files.array("centroid_offsets.npy", nlist + 1))
        list_docs = np.asarray(files.array("centroid_docs.npy", int(list_offsets[-1])))
        return cls(codec, list_offsets, list_docs, options["documents"], min(options["nprobe"], nlist))

    def candidates(self, query_vectors, query_weights, neighbours):
        scores = np.ascontiguousarray(query_vectors, dtype=np.float32) @ self.centroids.T  # [q, nlist]
        probed = np.unique(np.argpartition(-scores, self.nprobe - 1, axis=1)[:, :self.nprobe])
        docs = np.unique(np.concatenate([self.list_docs[self.list_offsets[c]:self.list_offsets[c + 1]]
                                         for c in probed])).astype(np.int64)  # uint16 rows: docs + 1 must not wrap
        if len(docs) <= neighbours:
            return docs
        # centroid approximation of every candidate: max over its tokens (= over its distinct centroids) of
        # q . centroid, weighted sum over q
        starts, ends = self.doc_offsets[docs], self.doc_offsets[docs + 1]
        lengths = ends - starts
        firsts = np.cumsum(lengths) - lengths
        rows = np.repeat(starts - firsts, lengths) + np.arange(lengths.sum())
        # [candidates' centroids, q] rows gathered from [nlist, q] and max-reduced per document along contiguous
        # rows, CENTROID_STAGE_DOCS documents at a time so that the gathered rows stay in cache: the same values as
        # one [q, entries] gather reduced along its rows, in a third of the time (memory-bound)
        by_centroid = np.ascontiguousarray(scores.T)
        centroids = self.doc_centroids[rows]
        bounds = np.append(firsts, len(rows))  # entries of documents [a, b): bounds[a]:bounds[b]
        blocks = [(a, min(a + CENTROID_STAGE_DOCS, len(docs))) for a in range(0, len(docs), CENTROID_STAGE_DOCS)]
        best = np.concatenate([  # [docs, q]
            np.maximum.reduceat(by_centroid[centroids[bounds[a]:bounds[b]]], firsts[a:b] - bounds[a], axis=0)
            for a, b in blocks])
        approx = best @ np.asarray(query_weights, dtype=np.float32)
        return np.sort(docs[np.argpartition(-approx, neighbours - 1)[:neighbours]])


CANDIDATES: dict[str, type[CandidateGenerator]] = {
    c.name: c for c in (FlatCandidates, IvfPqCandidates, HnswCandidates, CentroidCandidates)}
